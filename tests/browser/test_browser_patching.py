"""Real-browser test of the Patching tab (Predictions page) and the Composition tab (Head roles page) on the trained
decoder (METHODS §22): both draw without an exception, the heads heatmap is `attnlib patch`'s and the K-composition
heatmap `attnlib compose`'s; screenshots of both and of the Tour's causal picture are kept."""

from __future__ import annotations

import numpy as np
import pytest

import attnlib
from attnlib.core.model import TRAINED_MODEL
from support.browser import FIGURES_DRAWN, IDLE, TRACES, browser_page, wait_idle

LONG = 300_000  # a loaded two-core machine


def _drawn(page) -> None:
    wait_idle(page, LONG)
    page.wait_for_function(IDLE, timeout=LONG)
    page.wait_for_function(FIGURES_DRAWN, timeout=LONG)


def _heatmap(page, title: str) -> np.ndarray:
    found = [f for f in page.evaluate(TRACES) if title in f["title"]]
    return np.asarray(next(t["z"] for t in found[0]["traces"] if t["type"] == "heatmap"), float)


@pytest.mark.browser
@pytest.mark.slow
def test_patching_and_composition_tabs_on_the_trained_decoder(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "patching-failure.png", 1400, 6400) as page:
        page.goto(f"{streamlit_server}/predictions?model={TRAINED_MODEL}&tab=patching&direction=noise",
                  wait_until="domcontentloaded")  # fmt: skip
        page.get_by_text("Every head patched").wait_for(timeout=LONG)
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "patching-tab.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        heads = _heatmap(page, "activation patching of every head")
        clean = page.get_by_role("textbox", name="Clean prompt").input_value()
        corrupted = page.get_by_role("textbox", name="Corrupted prompt").input_value()

        page.goto(f"{streamlit_server}/head-roles?model={TRAINED_MODEL}&tab=composition",
                  wait_until="domcontentloaded")  # fmt: skip
        page.get_by_text("Into the induction heads, over training").wait_for(timeout=LONG)  # drawn: the roles ship
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "composition-tab.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        k = _heatmap(page, "K-composition")

        page.goto(f"{streamlit_server}/tour?model={TRAINED_MODEL}&step=8", wait_until="domcontentloaded")
        page.get_by_text("The causal picture", exact=True).wait_for(timeout=LONG)
        _drawn(page)
        page.screenshot(path=str(screenshot_dir / "tour-causal.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0

    own = attnlib.patch(TRAINED_MODEL, clean=clean, corrupted=corrupted, direction="noise").to_json()
    np.testing.assert_allclose(heads, own["heads"], rtol=0, atol=1e-5)
    scores = np.asarray(attnlib.compose(TRAINED_MODEL).to_json()["k"])
    np.testing.assert_allclose(k, scores.reshape(k.shape), rtol=0, atol=1e-9)
