"""Decoders and encoder-decoders in a real browser (METHODS §18): the Live page's causal head view and T5's three
attentions, the Special tokens page's Sinks tab with the bundled encoder beside a decoder, Head importance's sink test
and the Tour's sink step, Local vs global's Global aggregation of a decoder (offsets k <= 0), and T5's encoder on the
Special tokens and Head importance pages. Screenshots in test-output/screenshots/."""

from __future__ import annotations

import json
from urllib.parse import quote

import numpy as np
import pytest

from app_pages.local_global.aggregation_tab import causal_offsets_text
from attnlib.analyses.aggregation import AGGREGATION, AggregationOptions
from attnlib.analyses.base import run_analysis
from attnlib.core.corpus import read_corpus
from attnlib.core.model import load_model
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.views.norms import MEASURE_NAMES
from support.browser import (
    FIGURES_DRAWN,
    IDLE,
    INK,
    TRACES,
    browser_page,
    compute_all,
    compute_from_last,
    download,
    iframe_frame,
    wait_idle,
)
from support.models import save_tiny
from support.tolerances import FORWARD_RTOL
from ui.widgets.family_notes import encoder_part_text

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
        compute_all(page, 2, 240_000)  # each model's statistics computed on request
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
        compute_all(page, 3)  # computed on request
        page.locator(".js-plotly-plot[data-drawn]").first.wait_for(timeout=120_000)  # FIGURES_DRAWN holds before any
        page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / "decoder-importance-sink-test.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        body = page.inner_text("body")
        assert "The sink test." in body and "first-token share against effect" in body
        page.get_by_role("tab", name="Gradient importance").click()
        page.get_by_text("is a decoder: gradient importance is defined here with a masked-LM head").wait_for(
            timeout=60_000
        )
        page.screenshot(path=str(screenshot_dir / "decoder-importance-gradient.png"), full_page=True)

        page.goto(f"{streamlit_server}/tour?model={model}&step=3", wait_until="commit")
        page.get_by_text("What to notice.").wait_for(timeout=240_000)
        wait_idle(page, 240_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / "decoder-tour-sink-step.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        body = page.inner_text("body")
        assert "3. Is the sink a no-op?" in body and "first-token share against effect" in body


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_global_aggregation_of_a_decoder_keeps_offsets_up_to_zero(
    streamlit_server, browser, screenshot_dir, tmp_path_factory, tmp_path, kind
):
    """Local vs global's Global aggregation tab for a decoder (METHODS §13, §18): the histograms' bars and the axis
    ticks drawn stand at offsets k <= 0, as a caption beside them says, and the bars and the downloaded JSON are the
    library's own aggregation."""
    folder = save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-aggregation"))
    limit, probes = 3, 2
    url = f"{streamlit_server}/local-global?model={quote(str(folder))}&limit={limit}&probes={probes}&tab=aggregation"
    with browser_page(browser, screenshot_dir / f"decoder-{kind}-aggregation-failure.png", 1500, 4400) as page:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("tab", name="Global aggregation", exact=True).wait_for(timeout=240_000)
        wait_idle(page, 240_000)
        compute_from_last(page, 2)  # the aggregation in its tab, then the positions above the tabs
        panel = page.locator("[role='tabpanel']:not([hidden])")
        panel.get_by_text("Measure for the histograms").wait_for(timeout=60_000)
        said = causal_offsets_text().replace("<=", "≤").replace(">=", "≥")  # as Streamlit's markdown sets them
        panel.get_by_text(said, exact=True).wait_for(timeout=60_000)  # beside the histograms
        page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / f"decoder-{kind}-aggregation.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        figures = page.evaluate(TRACES)  # before the download, whose click reruns the page
        found = [f for f in figures if "layer-output attribution per layer" in f["title"]]
        assert len(found) == 1, [f["title"] for f in figures]
        histograms = found[0]
        wait_idle(page, 240_000)  # a click while the page still reruns (the positions above the tabs) is lost
        download(page, panel.get_by_role("button", name="Download JSON").click, tmp_path / "aggregation.json")

    corpus = {"corpus": read_corpus(CLASSROOM_SINGLE, limit=limit)}  # the page's default corpus
    options = AggregationOptions(probes=probes)
    own = run_analysis(AGGREGATION, load_model(str(folder)), options, inputs=corpus).result
    assert own.causal and own.offsets.max() == 0 and own.offsets.min() < 0
    (shown,) = json.loads((tmp_path / "aggregation.json").read_text()).values()
    assert shown["kind"] == "decoder" and shown["histograms"]["offsets"] == own.offsets.tolist()
    for name, values in own.histograms.items():
        np.testing.assert_allclose(shown["histograms"][name], values, rtol=FORWARD_RTOL, atol=FORWARD_RTOL)

    ticks = [float(t.replace("\u2212", "-")) for t in histograms["ticks"]]  # plotly writes a minus sign
    assert ticks and max(ticks) <= 0 < -min(ticks)
    # per layer: the chosen measure's (attention) bars, then attribution's
    bars = [t for t in histograms["traces"] if t["type"] == "bar"]
    assert len(bars) == 2 * len(own.histograms["attention"])
    for i, bar in enumerate(bars):
        measure = "attention" if i % 2 == 0 else "attribution"
        assert bar["name"] == MEASURE_NAMES[measure]
        assert max(bar["x"]) == 0 and min(bar["x"]) < 0
        at = np.searchsorted(own.offsets, bar["x"])
        expected = own.histograms[measure][i // 2][at]
        np.testing.assert_allclose(bar["y"], expected, rtol=FORWARD_RTOL, atol=FORWARD_RTOL)


@pytest.mark.parametrize(
    ("path", "title"), [("special-tokens", "Special tokens and sinks"), ("head-importance", "Head importance")]
)
def test_corpus_pages_of_an_encoder_decoder_draw_its_encoder(
    streamlit_server, browser, screenshot_dir, tmp_path_factory, path, title
):
    """T5 on the Special tokens and Head importance pages (METHODS §18): computed on the encoder's self-attention,
    which one caption says, a figure drawn and no exception."""
    folder = save_tiny("t5", tmp_path_factory.mktemp(f"t5-{path}"))
    caption = encoder_part_text(load_model(str(folder)).facts)
    assert caption is not None
    with browser_page(browser, screenshot_dir / f"t5-{path}-failure.png", 1500, 2200) as page:
        page.goto(f"{streamlit_server}/{path}?model={quote(str(folder))}&limit=3", wait_until="domcontentloaded")
        page.get_by_role("heading", name=title).wait_for(timeout=240_000)
        wait_idle(page, 240_000)
        compute_all(page, 3)
        page.locator(".js-plotly-plot[data-drawn] .main-svg").first.wait_for(timeout=120_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / f"t5-{path}.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        captions = page.locator("[data-testid='stCaptionContainer']").all_inner_texts()
        assert [c for c in captions if caption in c] == [caption], captions
