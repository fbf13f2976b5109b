"""Real-browser test of the tour: a link to ?step=3 opens step 3; Next and Previous move and keep the URL in step;
every step draws; step 1's three head views fit their columns and draw the default model's weights."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import attnlib
from attnlib.core.model import DEFAULT_MODEL, load_model
from attnlib.present.tour import STEPS
from attnlib.results.shipped import TUTORIAL_A, TUTORIAL_B
from support.browser import FIGURES_DRAWN, IDLE, INK, VIEW_DATA, assert_lines_are_weights, browser_page, iframe_frame


def _wait_for_step(page, number: int) -> None:
    """The step's heading and its notice are shown and the app has stopped running."""
    page.get_by_role("heading", name=f"{number}. {STEPS[number - 1].title}").first.wait_for(timeout=180_000)
    page.get_by_text("What to notice.").first.wait_for(timeout=180_000)
    page.wait_for_function(IDLE, timeout=180_000)
    page.wait_for_function(FIGURES_DRAWN, timeout=60_000)
    page.wait_for_timeout(1000)


@pytest.mark.browser
@pytest.mark.slow
def test_tour_opens_step_3_and_moves(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "failed-tour-moves.png", width=1600) as page:
        page.goto(f"{streamlit_server}/tour?step=3", wait_until="domcontentloaded")
        _wait_for_step(page, 3)
        assert "step=3" in page.url
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / "tour-step-3.png"), full_page=True)
        page.get_by_role("button", name="Next →").click()
        _wait_for_step(page, 4)
        assert "step=4" in page.url
        page.get_by_role("button", name="← Previous").click()
        _wait_for_step(page, 3)
        page.get_by_role("button", name="← Previous").click()
        _wait_for_step(page, 2)
        assert "step=2" in page.url
        assert page.locator("[data-testid='stException']").count() == 0
        link = page.get_by_role("link", name="Open the full page in this state")
        assert "special-tokens?model=" in link.get_attribute("href")


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("number", [s.number for s in STEPS])
def test_tour_step_renders(streamlit_server, browser, screenshot_dir, number):
    height = 2000 if number in (8, 9) else 1000  # steps 8 and 9: a figure, then the head view or the notice below
    with browser_page(browser, screenshot_dir / f"failed-tour-step-{number}.png", width=1600, height=height) as page:
        page.goto(f"{streamlit_server}/tour?step={number}", wait_until="domcontentloaded")
        _wait_for_step(page, number)
        page.locator(".js-plotly-plot, iframe").first.wait_for(state="visible", timeout=120_000)
        page.wait_for_timeout(1500)
        page.screenshot(path=str(screenshot_dir / f"tour-step-{number}.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.locator(".js-plotly-plot, iframe").count() > 0


# The canvas's right edge, the width of the view's page, and whether its box scrolls sideways (the head view's
# canvas sits in #box, which scrolls what does not fit).
FIT = """() => { const cv = document.getElementById('cv'), box = document.getElementById('box');
  return {right: cv.getBoundingClientRect().right, page: document.documentElement.clientWidth,
          scrolls: box.scrollWidth > box.clientWidth}; }"""


# Whether the view's label columns are as wide as its widest labels (none cut), from head_view.js's own geometry.
WHOLE_LABELS = """() => { const c = document.createElement('canvas').getContext('2d'); c.font = FONT;
  return wl === labelWidth(c, Lb, 150) && wr === labelWidth(c, Rb, 150); }"""


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("width", [1024, 1280, 1400])
def test_tour_head_views_fit_their_columns(streamlit_server, browser, screenshot_dir, width):
    """Step 1's three head views in three columns (projector widths, down to 1,024 px): each canvas, tokens and
    lines, fits its column without a sideways scroll bar; from 1,280 px no token is cut (at 1,024 px the columns are
    177 px wide, and the longest tokens end in '…'); each view's lines are the default model's weights of the tutorial
    pair in the head its heading names."""
    with browser_page(browser, screenshot_dir / f"failed-tour-heads-{width}.png", width=width, height=900) as page:
        page.goto(f"{streamlit_server}/tour?step=1", wait_until="domcontentloaded")
        _wait_for_step(page, 1)
        frames = [iframe_frame(page, k) for k in range(3)]
        for frame in frames:
            frame.wait_for_function(f"() => ({INK})('#cv') > 500", timeout=60_000)
        page.locator("iframe").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / f"tour-step-1-{width}px.png"))
        fits = [frame.evaluate(FIT) for frame in frames]
        drawn = [frame.evaluate(VIEW_DATA) for frame in frames]
        headings = page.locator("[data-testid='stMain'] h4").all_inner_texts()
        assert all(f["right"] <= f["page"] and not f["scrolls"] for f in fits), fits
        if width >= 1280:
            assert all(frame.evaluate(WHOLE_LABELS) for frame in frames)
    for heading, view in zip(headings, drawn, strict=True):
        assert heading.startswith(f"Head {view['layers'][0]}-{view['heads'][0]}: ")
        assert_lines_are_weights(view, tutorial_attentions())


@cache
def tutorial_attentions() -> np.ndarray:
    """The default model's attention weights of the tutorial pair ([layers, heads, n, n]), computed here."""
    return attnlib.run(load_model(DEFAULT_MODEL), TUTORIAL_A, TUTORIAL_B).attentions
