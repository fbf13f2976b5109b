"""Real-browser test of the Head roles page (METHODS §20): the role map and the score heatmaps drawn for the default
model, an induction score drawn in the browser equal to the library's, the head on the probe, and the Causal check."""

from __future__ import annotations

import time

import numpy as np
import pytest

from attnlib.analyses.registry import analyse
from attnlib.analyses.roles import checkpoint_table
from attnlib.core.corpus import read_corpus
from attnlib.core.model import TRAINED_MODEL, checkpoints_of
from attnlib.results.shipped import CLASSROOM_SINGLE
from support.browser import FIGURES_DRAWN, IDLE, TRACES, browser_page, traces_of, wait_idle

LONG = 300_000  # a loaded two-core machine
LIMIT = 4
CELL = """([layer, head]) => {
  const p = [...document.querySelectorAll('.js-plotly-plot')].find(p => p.layout.title.text.startsWith('Head roles'));
  const box = p.querySelector('.nsewdrag').getBoundingClientRect();
  return {x: box.left + p._fullLayout.xaxis.d2p(head), y: box.top + p._fullLayout.yaxis.d2p(layer)}; }"""


def _drawn(page) -> None:
    page.wait_for_function(IDLE, timeout=LONG)
    page.wait_for_function(FIGURES_DRAWN, timeout=LONG)


@pytest.mark.browser
@pytest.mark.slow
def test_roles_page_draws_the_library_scores(streamlit_server, browser, screenshot_dir, minilm):
    with browser_page(browser, screenshot_dir / "head-roles-failure.png", 1500, 3000) as page:
        page.goto(f"{streamlit_server}/head-roles?limit={LIMIT}", wait_until="domcontentloaded")
        page.get_by_role("button", name="Compute for").click(timeout=LONG)
        page.get_by_role("tab", name="Role map", exact=True).wait_for(timeout=LONG)
        wait_idle(page, LONG)
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "head-roles-map.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        figures = page.evaluate(TRACES)
        induction = next(t["z"] for t in traces_of(figures, "Induction score") if t["type"] == "heatmap")
        text = page.inner_text("body")
        assert "bidirectional" in text and "One head on the probe" in text
        cell = page.evaluate(CELL, [2, 3])  # a click on the role map's cell of head 2-3 opens it on the probe
        page.mouse.click(cell["x"], cell["y"])
        page.wait_for_function("() => location.search.includes('pick=2-3')", timeout=LONG)
        wait_idle(page, LONG)
        assert page.get_by_role("link", name="Open head 2-3 in the Live page").count() == 1

    own = analyse("roles", minilm, corpus=read_corpus(CLASSROOM_SINGLE, limit=LIMIT)).result
    np.testing.assert_allclose(np.asarray(induction, float), own.scores.induction, rtol=0, atol=1e-6)


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    wait_idle(page, LONG)


@pytest.mark.browser
@pytest.mark.slow
def test_the_trained_decoders_roles_form_over_training(streamlit_server, browser, screenshot_dir):
    """The decoder trained in the repository opens drawn (its roles ship): its role map without a button, the causal
    check, the lines over its checkpoints (their largest induction score the library's), and its induction head
    opened in the Live page."""
    with browser_page(browser, screenshot_dir / "head-roles-trained-failure.png", 1500, 2600) as page:
        start = time.perf_counter()
        page.goto(f"{streamlit_server}/head-roles?model={TRAINED_MODEL}", wait_until="domcontentloaded")
        page.get_by_role("tab", name="Role map", exact=True).wait_for(timeout=LONG)
        wait_idle(page, LONG)
        _drawn(page)
        print(f"the trained decoder's role map drawn {time.perf_counter() - start:.1f} s after opening the page")
        assert page.get_by_role("button", name="Compute for").count() == 0
        assert "precomputed, shipped with the app" in page.inner_text("body")
        page.screenshot(path=str(screenshot_dir / "head-roles-trained-map.png"), full_page=True)
        live_link = page.get_by_role("link", name="in the Live page").get_attribute("href")
        _tab(page, "Causal check")
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "head-roles-trained-causal.png"), full_page=True)
        _tab(page, "Over training")
        _drawn(page)
        assert page.get_by_role("button", name="Compute over").count() == 0  # the shipped file's checkpoints
        page.screenshot(path=str(screenshot_dir / "head-roles-trained-training.png"), full_page=True)
        (traces,) = [f["traces"] for f in page.evaluate(TRACES) if "over training" in f["title"]]
        assert page.locator("[data-testid='stException']").count() == 0
        page.goto(f"{streamlit_server}/{live_link.removeprefix('./')}", wait_until="domcontentloaded")
        page.locator("iframe").first.wait_for(timeout=LONG)
        wait_idle(page, LONG)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(screenshot_dir / "head-roles-trained-live-induction-head.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0

    own = analyse("roles", TRAINED_MODEL, checkpoints=tuple(checkpoints_of(TRAINED_MODEL))).result
    table = checkpoint_table(own)
    (induction,) = [t for t in traces if t["name"] == "largest induction score"]
    assert induction["x"] == list(table["step"])
    np.testing.assert_allclose(induction["y"], table["max_induction"], rtol=0, atol=1e-6)
