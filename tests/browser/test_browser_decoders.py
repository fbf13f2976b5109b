"""Decoders and encoder-decoders in a real browser (METHODS §18): the Live page's causal head view and T5's three
attentions, the Special tokens page's Sinks tab with the bundled encoder beside a decoder, Head importance's sink test
and the Tour's sink step. Screenshots in test-output/screenshots/."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from support.browser import FIGURES_DRAWN, IDLE, INK, browser_page, iframe_frame, wait_idle
from support.models import save_tiny

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_live_page_draws_a_decoders_head_view(streamlit_server, browser, screenshot_dir, tmp_path_factory, kind):
    folder = save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-browser"))
    url = f"{streamlit_server}/?model={quote(str(folder))}&a={quote('The cat sat on the mat.')}&b="
    with browser_page(browser, screenshot_dir / f"decoder-{kind}-failure.png", 1400, 1400) as page:
        page.goto(url, wait_until="domcontentloaded")
        wait_idle(page, 240_000)
        frame = iframe_frame(page)
        frame.wait_for_function(f"() => ({INK})('#cv') > 500", timeout=60_000)
        page.screenshot(path=str(screenshot_dir / f"decoder-{kind}-live-head-view.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "decoder: causal attention" in page.locator("[data-testid='stSidebar']").inner_text()


def test_sinks_tab_puts_an_encoder_beside_a_decoder(streamlit_server, browser, screenshot_dir, tmp_path_factory):
    folder = save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-sinks"))
    url = f"{streamlit_server}/special-tokens?tab=sinks&limit=6&grad=0&map=0&cmp={quote(str(folder))}"
    with browser_page(browser, screenshot_dir / "decoder-sinks-failure.png", 1500, 2000) as page:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Sinks", exact=True).wait_for(timeout=240_000)
        page.wait_for_function(IDLE, timeout=240_000)
        for _ in range(2):  # each model's statistics computed on request
            ask = page.get_by_role("button", name="Compute")
            if ask.count() == 0:
                break
            ask.first.click()
            wait_idle(page, 240_000)
        panel = page.locator("[role='tabpanel']:not([hidden])")
        panel.locator(".js-plotly-plot[data-drawn]").nth(2).wait_for(timeout=60_000)
        panel.locator(".attn-table table").first.wait_for(timeout=60_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=60_000)
        page.screenshot(path=str(screenshot_dir / "decoder-sinks-beside-encoder.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        text = panel.inner_text()
        assert "attention sink" in text and "encoder" in text and "decoder" in text
        assert panel.locator(".js-plotly-plot").count() == 3  # overlaid layer lines, a heatmap per model


@pytest.mark.parametrize(
    ("part", "show"), [("encoder", "weights"), ("decoder", "weights"), ("cross", "weights"), ("cross", "norms")]
)
def test_live_page_draws_each_part_of_an_encoder_decoder(
    streamlit_server, browser, screenshot_dir, tmp_path_factory, part, show
):
    """T5's three attentions on the Live page: the encoder's, the decoder's (causal) and the cross attention; and the
    cross attention's value-weighted norms (METHODS §11)."""
    folder = save_tiny("t5", tmp_path_factory.mktemp(f"t5-browser-{part}-{show}"))
    source, target = quote("The house is small."), quote("Das Haus ist klein.")
    url = f"{streamlit_server}/?model={quote(str(folder))}&a={source}&b=&target={target}&part={part}&show={show}"
    name = f"t5-live-{part}" + ("-norms" if show == "norms" else "")
    with browser_page(browser, screenshot_dir / f"{name}-failure.png", 1400, 1400) as page:
        page.goto(url, wait_until="domcontentloaded")
        wait_idle(page, 240_000)
        frame = iframe_frame(page)
        frame.wait_for_function(f"() => ({INK})('#cv') > 300", timeout=60_000)
        page.screenshot(path=str(screenshot_dir / f"{name}.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "encoder-decoder" in page.locator("[data-testid='stSidebar']").inner_text()
        assert page.get_by_role("radio", name=part.capitalize(), exact=True).is_checked()
        assert page.get_by_role("radio", name=show.capitalize(), exact=True).is_checked()


def test_head_importance_sink_test_and_tour_step_of_a_decoder(
    streamlit_server, browser, screenshot_dir, tmp_path_factory
):
    """A decoder on Head importance (computed on the page: first-token knockouts, the sink test) and at the Tour's
    no-op step, which for a decoder asks whether the sink is a no-op."""
    model = quote(str(save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-importance"))))
    with browser_page(browser, screenshot_dir / "decoder-importance-failure.png", 1500, 2200) as page:
        page.goto(f"{streamlit_server}/head-importance?model={model}&limit=3&tab=noop&ko=1", wait_until="commit")
        page.get_by_role("heading", name="Head importance").wait_for(timeout=240_000)
        wait_idle(page, 240_000)
        for _ in range(3):  # computed on request
            ask = page.get_by_role("button", name="Compute")
            if ask.count() == 0:
                break
            ask.first.click()
            wait_idle(page, 300_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / "decoder-importance-sink-test.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        body = page.inner_text("body")
        assert "The sink test." in body and "first-token share against effect" in body

        page.goto(f"{streamlit_server}/tour?model={model}&step=3", wait_until="commit")
        page.get_by_text("What to notice.").wait_for(timeout=240_000)
        wait_idle(page, 240_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / "decoder-tour-sink-step.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        body = page.inner_text("body")
        assert "3. Is the sink a no-op?" in body and "first-token share against effect" in body
