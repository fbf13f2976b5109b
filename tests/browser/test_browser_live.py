"""Real-browser test of the live page: each view draws, a copied URL reopens the same view, PNG export, 512 tokens."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest

from support.browser import (
    FIGURE,
    FIGURES_DRAWN,
    INK,
    browser_page,
    download,
    iframe_frame,
    offline_page,
    side_by_side,
    view_frame,
    wait_idle,
)

VIEW_LABELS = {"head": "Head view", "model": "Model view", "neuron": "Neuron view"}
CANVAS = {"head": "#cv", "model": "#grid", "neuron": "#cv"}


@contextmanager
def open_page(browser, url: str, failure: Path | None = None) -> Iterator:
    """The Live page at url once its run has ended, closed afterwards (a screenshot at `failure` if the body fails)."""
    with browser_page(browser, failure, height=1800) as page:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Live attention").first.wait_for(timeout=180_000)
        wait_idle(page)
        yield page


def widget_values(page) -> dict:
    """What the page's controls show: the chosen view, the layer and the head."""
    view = page.locator("[data-testid='stRadio']").first.locator("input:checked").first
    return {
        "view": view.evaluate("e => e.closest('label').innerText.trim()"),
        "layer": page.get_by_role("slider", name="Layer").input_value(),
        "head": page.get_by_role("combobox", name="Head", exact=True).input_value(),
    }


@pytest.mark.parametrize("view", list(VIEW_LABELS))
def test_each_view_draws(streamlit_server, browser, screenshot_dir, view):
    with open_page(
        browser,
        f"{streamlit_server}/?view={view}&layer=3&head=2&token=6",
        screenshot_dir / f"failed-live-{view}-view.png",
    ) as page:
        frame = view_frame(page, CANVAS[view])
        assert frame.evaluate(f"() => ({INK})('{CANVAS[view]}')") > 500
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / f"live-{view}-view.png"), full_page=True)


def test_head_finder_renders(streamlit_server, browser, screenshot_dir):
    with open_page(browser, f"{streamlit_server}/?view=finder", screenshot_dir / "failed-live-head-finder.png") as page:
        page.get_by_text("same word in the other sentence").first.wait_for(timeout=180_000)
        # the finder's buttons arrive a few at a time after its first text; wait for a full table, then count
        page.wait_for_function(
            "() => document.querySelectorAll(\"[data-testid='stButton']\").length >= 24", timeout=60_000
        )
        assert page.locator("[data-testid='stButton']").count() >= 24
        link = page.locator(".attn-table a").first  # the table's link column: the head view of that head, in a new tab
        link.wait_for(timeout=60_000)
        assert link.inner_text() == "open" and link.get_attribute("target") == "_blank"
        assert "view=head" in link.get_attribute("href")
        page.screenshot(path=str(screenshot_dir / "live-head-finder.png"), full_page=True)


def test_copied_url_reopens_the_same_view(streamlit_server, browser, screenshot_dir):
    with open_page(browser, streamlit_server, screenshot_dir / "failed-live-copied-url.png") as page:
        page.get_by_text("Model view", exact=True).click()
        wait_idle(page)
        slider = page.get_by_role("slider", name="Layer")
        slider.focus()
        slider.press("ArrowRight")
        slider.press("ArrowRight")
        wait_idle(page)
        page.get_by_role("combobox", name="Head", exact=True).click()
        page.get_by_role("option", name="7", exact=True).click()
        wait_idle(page)
        view_frame(page, "#grid")
        chosen = widget_values(page)
        assert chosen == {"view": "Model view", "layer": "3", "head": "7"}
        copied = page.url
        assert "view=model" in copied and "layer=3" in copied and "head=7" in copied
    with open_page(browser, copied, screenshot_dir / "failed-live-reopened-url.png") as again:
        frame = view_frame(again, "#grid")
        assert widget_values(again) == chosen
        assert "Layer 3, head 7" in frame.inner_text("#bigcap")
        again.screenshot(path=str(screenshot_dir / "live-reopened-url.png"), full_page=True)


def test_exports_png_csv_and_offline_html(streamlit_server, browser, tmp_path):
    with open_page(browser, f"{streamlit_server}/?view=head&layer=2", tmp_path / "failed-live-exports.png") as page:
        frame = view_frame(page, "#cv")
        png = download(page, lambda: frame.click("#png"), tmp_path / "view.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
        csv = download(
            page, lambda: page.get_by_role("button", name="Download attention (CSV)").click(), tmp_path / "a.csv"
        )
        lines = csv.read_text().splitlines()
        assert lines[0] == "layer,head,layer_head,query_index,query,key_index,key,weight"
        assert len(lines) == 1 + 12 * 19 * 19 and lines[1].startswith("1,0,2-1,0,[CLS],0,[CLS],")
        html = download(
            page, lambda: page.get_by_role("button", name="Download figure (HTML)").click(), tmp_path / "v.html"
        )
    with offline_page(browser) as (offline, asked):
        offline.goto(html.as_uri())
        offline.wait_for_function(f"() => ({INK})('#cv') > 200", timeout=30_000)
    assert all(u.startswith(("file:", "data:", "blob:")) for u in asked), asked


def test_512_tokens_stay_responsive(streamlit_server, browser, screenshot_dir):
    text = " ".join(["The old gardener watered the tomatoes every morning before the market opened."] * 40)
    with open_page(
        browser, f"{streamlit_server}/?view=head&a={quote(text)}", screenshot_dir / "failed-live-512.png"
    ) as page:
        page.get_by_text("truncated").first.wait_for(timeout=60_000)  # the page says the input was cut to 512 tokens
        frame = view_frame(page, "#cv")
        box = frame.locator("#cv").bounding_box()
        every_line = frame.evaluate(f"() => ({INK})('#cv')")
        start = time.perf_counter()
        for k in range(10):  # hover ten tokens: each redraws the view with that token's lines only
            page.mouse.move(box["x"] + 30, box["y"] + 20 + 14 * k)
        frame.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
        print(f"\n512 tokens: ten hovers redrawn in {time.perf_counter() - start:.2f} s")
        assert 0 < frame.evaluate(f"() => ({INK})('#cv')") < every_line  # one token's lines, not the whole map
        page.screenshot(path=str(screenshot_dir / "live-head-view-512.png"))
        page.get_by_text("Model view", exact=True).click()
        wait_idle(page)
        frame = view_frame(page, "#grid")
        assert "heatmaps" in frame.inner_text("#hint")
        page.screenshot(path=str(screenshot_dir / "live-model-view-512.png"), full_page=True)


def frame_ink(page, index: int, canvas: str, timeout: int = 180_000):
    """The index-th view iframe once its canvas has ink, and how much."""
    frame = iframe_frame(page, index, timeout)
    frame.wait_for_selector(canvas, timeout=timeout)
    frame.wait_for_function(f"() => ({INK})('{canvas}') > 200", timeout=timeout)
    return frame, frame.evaluate(f"() => ({INK})('{canvas}')")


def two_views_side_by_side(page):
    """Both models' view frames, once both are drawn and stand side by side, and the first one's box."""
    page.locator("iframe").nth(1).wait_for(state="visible", timeout=180_000)
    assert page.locator("iframe").count() == 2
    (first, ink_a), (second, ink_b) = frame_ink(page, 0, "#cv"), frame_ink(page, 1, "#cv")
    assert ink_a > 500 and ink_b > 500
    a, b = (page.locator("iframe").nth(k).bounding_box() for k in (0, 1))
    assert side_by_side(a, b)  # side by side
    return first, second, a


def test_norms_head_view_draws(streamlit_server, browser, screenshot_dir):
    with open_page(
        browser, f"{streamlit_server}/?view=head&show=norms&layer=3&token=6", screenshot_dir / "failed-live-norms.png"
    ) as page:
        frame, ink = frame_ink(page, 0, "#cv")
        assert ink > 500
        assert "norms" in frame.inner_text("#ttl") and "‖α f(x)‖" in frame.inner_text("#hint")
        assert page.get_by_role("radio", name="Norms").is_checked()
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / "live-head-view-norms.png"), full_page=True)


def test_value_norms_beside_the_neuron_view(streamlit_server, browser, screenshot_dir):
    with open_page(
        browser, f"{streamlit_server}/?view=neuron&layer=2&head=3", screenshot_dir / "failed-live-value-norms.png"
    ) as page:
        frame_ink(page, 0, "#cv")
        chart = page.locator(FIGURE).first
        chart.wait_for(state="visible", timeout=60_000)
        page.wait_for_function("() => document.querySelectorAll('.barlayer .point').length >= 19", timeout=60_000)
        assert page.locator(".barlayer .point").count() == 19  # one bar per token
        page.wait_for_function(FIGURES_DRAWN, timeout=60_000)  # its title too
        assert "Value norms, head 2-3" in chart.inner_text()
        neuron, bars = page.locator("iframe").first.bounding_box(), chart.bounding_box()
        assert bars["x"] > neuron["x"] + neuron["width"] - 5  # beside the neuron view, on its right
        page.screenshot(path=str(screenshot_dir / "live-neuron-value-norms.png"), full_page=True)


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_two_models_head_views_side_by_side(streamlit_server, browser, screenshot_dir, tiny_model_dir):
    with open_page(
        browser,
        f"{streamlit_server}/?view=head&layer=4&heads=2,7&cmp={quote(str(tiny_model_dir))}",
        screenshot_dir / "failed-live-two-models.png",
    ) as page:
        first, second, _ = two_views_side_by_side(page)
        assert "all-MiniLM-L6-v2" in first.inner_text("#ttl") and "Layer 4" in first.inner_text("#ttl")
        assert str(tiny_model_dir.name) in second.inner_text("#ttl") and "Layer 2" in second.inner_text("#ttl")
        assert page.get_by_text("largest difference").count() == 1
        page.screenshot(path=str(screenshot_dir / "live-two-models.png"), full_page=True)


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_two_models_neuron_views_side_by_side(streamlit_server, browser, screenshot_dir, tiny_model_dir):
    url = f"{streamlit_server}/?view=neuron&layer=4&head=9&token=3&cmp={quote(str(tiny_model_dir))}"
    with open_page(browser, url, screenshot_dir / "failed-live-two-neuron.png") as page:
        first, second, a = two_views_side_by_side(page)
        assert "all-MiniLM-L6-v2" in first.inner_text("#ttl") and "layer 4, head 9" in first.inner_text("#ttl")
        assert str(tiny_model_dir.name) in second.inner_text("#ttl") and "layer 2, head 4" in second.inner_text("#ttl")
        page.wait_for_function(
            "() => document.querySelectorAll('.js-plotly-plot[data-drawn]').length == 2", timeout=60_000
        )
        charts = page.locator(FIGURE)
        assert "Value norms, head 4-9" in charts.nth(0).inner_text()
        assert "Value norms, head 2-4" in charts.nth(1).inner_text()
        assert charts.nth(1).bounding_box()["x"] >= a["x"] + a["width"] - 5  # under the second model's view
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / "live-two-models-neuron.png"), full_page=True)
