"""Real-browser test of the Queries and keys page: the grid of every head opens from the shipped result, a click on a
head opens it large, and a click on a query draws its attention to its input's keys as lines, their widths the
model's weights."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

import attnlib
from attnlib.core.corpus import read_corpus
from attnlib.core.model import DEFAULT_MODEL, load_model
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.views.qk import MIN_LINE_WEIGHT
from support.browser import FIGURES_DRAWN, IDLE, TRACES, browser_page
from support.tolerances import EPS32

GRID = "canvas[data-drawn]"
PICTURE = ".js-plotly-plot[data-drawn]"
LINES = ".js-plotly-plot .scatterlayer .trace path.js-line"


def _settle(page) -> None:
    page.wait_for_function(IDLE, timeout=240_000)
    page.wait_for_function(FIGURES_DRAWN, timeout=120_000)
    page.wait_for_timeout(800)


@pytest.mark.browser
@pytest.mark.slow
def test_grid_click_a_head_then_a_query(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "qk-browser-failure.png", 1400, 2000) as page:
        page.goto(f"{streamlit_server}/queries-keys", wait_until="domcontentloaded")
        page.locator(GRID).wait_for(timeout=240_000)
        page.locator(PICTURE).first.wait_for(timeout=240_000)
        _settle(page)
        assert page.locator("[data-testid='stException']").count() == 0
        assert "precomputed, shipped with the app" in page.inner_text("[data-testid='stMain']")
        page.screenshot(path=str(screenshot_dir / "qk-grid.png"), full_page=True)

        box = page.locator(GRID).bounding_box()
        assert box is not None
        cell = (box["width"] - 52) / 12  # qk_grid.js: 52 px of row labels, then 12 heads (cell + gap each)
        layer, head = 3, 5  # 1-based, as the page numbers them
        page.mouse.click(box["x"] + 52 + (head - 1 + 0.5) * cell, box["y"] + 18 + (layer - 1 + 0.5) * cell)
        page.get_by_text(f"Head {layer}-{head}, PCA", exact=True).wait_for(timeout=120_000)  # not the figure title
        _settle(page)
        assert "layer=3" in page.url and "head=5" in page.url
        assert "Fidelity" in page.inner_text("[data-testid='stMain']")

        queries = page.locator(".js-plotly-plot .scatterlayer .trace").first.locator("path.point")
        assert queries.count() > 1000  # every query of the classroom set
        queries.nth(40).click(force=True)
        page.get_by_text("Open this input in the Live page's head view").wait_for(timeout=120_000)
        _settle(page)
        assert page.locator(LINES).count() >= 1  # the query's attention to its keys
        assert "query=" in page.url
        link = page.get_by_role("link", name="Open this input in the Live page's head view")
        href = link.get_attribute("href") or ""
        assert "view=head" in href and "layer=3" in href and "head=5" in href and "token=" in href
        (picture,) = [f for f in page.evaluate(TRACES) if f["title"].startswith(f"Head {layer}-{head}")]
        query = parse_qs(urlparse(page.url).query)["query"][0]
        page.locator(PICTURE).first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "qk-head-with-lines.png"), full_page=True)

    # each line's width is 0.8 + 7 w (views/qk.py), w the query's weight to a key, lines under MIN_LINE_WEIGHT left out
    drawn = sorted(((t["width"] - 0.8) / 7 for t in picture["traces"] if t["mode"] == "lines"), reverse=True)
    item, position = (int(n) - 1 for n in query.split(","))  # 1-based in the URL
    lm, text = load_model(DEFAULT_MODEL), read_corpus(CLASSROOM_SINGLE)[item]  # the page's default corpus
    row = attnlib.run(lm, text.text_a, text.text_b).attentions[layer - 1, head - 1, position]
    # the page's run and this one differ by float32 sums in another order: tolerances.py's bound for this model
    config = lm.encoder.config
    tol = 2 * config.intermediate_size * config.num_hidden_layers * EPS32
    assert int((row >= MIN_LINE_WEIGHT + tol).sum()) <= len(drawn) <= int((row >= MIN_LINE_WEIGHT - tol).sum())
    np.testing.assert_allclose(drawn, np.sort(row)[::-1][: len(drawn)], rtol=tol, atol=tol)
