"""Real-browser test of the Predictions page (METHODS §21): the trained decoder's prediction, route graph, an edge opened
with its heads' maps, a node's lens table and a head clicked open in the attribution heatmap (drawn values the
library's); the default model's routes with the one-click switch to the trained decoder."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from attnlib.analyses.registry import analyse
from attnlib.core.model import TRAINED_MODEL
from support.browser import FIGURES_DRAWN, IDLE, TRACES, browser_page, traces_of, wait_idle

LONG = 300_000  # a loaded two-core machine
PROMPT = "Great res ass pr own che are St As man Great res ass pr"
CELL = """([layer, head]) => {
  const p = [...document.querySelectorAll('.js-plotly-plot')].find(p => p.layout.title.text.startsWith('Direct logit'));
  const box = p.querySelector('.nsewdrag').getBoundingClientRect();
  return {x: box.left + p._fullLayout.xaxis.d2p(head), y: box.top + p._fullLayout.yaxis.d2p(layer)}; }"""


ATTRIBUTION_DRAWN = """() => [...document.querySelectorAll('.js-plotly-plot[data-drawn]')]
  .some(p => p.layout.title.text.startsWith('Direct logit'))"""


def _drawn(page) -> None:
    page.wait_for_function(IDLE, timeout=LONG)
    page.wait_for_function(FIGURES_DRAWN, timeout=LONG)
    page.wait_for_timeout(1000)


def _pick(page, label: str, option: str) -> None:
    """Choose the option of a select box whose text starts with `option`, and wait for the run."""
    page.get_by_role("combobox", name=label, exact=True).click()
    page.keyboard.type(option)  # the list shows a few options at a time: typing filters it
    page.get_by_role("option").filter(has_text=option).first.click()
    wait_idle(page, LONG)


@pytest.mark.browser
@pytest.mark.slow
def test_the_trained_decoders_prediction_route_edge_node_and_attribution(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "predictions-trained-failure.png", 1500, 4600) as page:
        page.goto(f"{streamlit_server}/predictions?model={TRAINED_MODEL}&text={quote(PROMPT)}",
                  wait_until="domcontentloaded")  # fmt: skip
        page.get_by_role("heading", name="Predictions").first.wait_for(timeout=LONG)
        page.get_by_text("the model predicts").first.wait_for(timeout=LONG)
        _drawn(page)
        page.get_by_text("Direct logit attribution of").first.scroll_into_view_if_needed()
        page.wait_for_function(ATTRIBUTION_DRAWN, timeout=LONG)
        page.screenshot(path=str(screenshot_dir / "predictions-trained.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        figures = page.evaluate(TRACES)
        heads = next(t["z"] for t in traces_of(figures, "Direct logit attribution") if t["type"] == "heatmap")

        _pick(page, "Attention edge", "layer 1:")  # another edge: layer 1's heaviest into the position
        _pick(page, "Head", "1-")
        _drawn(page)
        assert "edge=1%3A" in page.url or "edge=1:" in page.url
        page.get_by_text("Contribution of head").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "predictions-edge.png"), full_page=True)

        _pick(page, "Node", "A2 at")
        _drawn(page)
        assert "node=A2" in page.url
        page.screenshot(path=str(screenshot_dir / "predictions-node-lens.png"), full_page=True)

        page.get_by_text("Direct logit attribution of").first.scroll_into_view_if_needed()
        page.wait_for_function(ATTRIBUTION_DRAWN, timeout=LONG)
        cell = page.evaluate(CELL, [2, 3])  # a click on head 2-3 of the attribution heatmap opens its readout
        page.mouse.click(cell["x"], cell["y"])
        page.wait_for_function("() => location.search.includes('readout=2-3')", timeout=LONG)
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "predictions-attribution.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0

    lens = analyse("lens", TRAINED_MODEL, text=PROMPT).result.to_json()
    np.testing.assert_allclose(np.asarray(heads, float), np.asarray(lens["dla"]["heads"]), rtol=0, atol=1e-6)


@pytest.mark.browser
@pytest.mark.slow
def test_the_default_model_shows_routes_and_opens_the_trained_decoder(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "predictions-default-failure.png", 1500, 2200) as page:
        page.goto(f"{streamlit_server}/predictions", wait_until="domcontentloaded")
        page.get_by_role("heading", name="Predictions").first.wait_for(timeout=LONG)
        page.get_by_text("language-model head").first.wait_for(timeout=LONG)
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "predictions-default.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.get_by_text("the model predicts").count() == 0
        page.get_by_role("button", name=f"Open the trained decoder {TRAINED_MODEL}").click()
        page.get_by_text("the model predicts").first.wait_for(timeout=LONG)
        _drawn(page)
        assert f"model={TRAINED_MODEL}" in page.url
