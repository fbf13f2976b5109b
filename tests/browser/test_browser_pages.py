"""Real-browser test: every page renders its main content in headless Chromium, with no exception box."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import attnlib
from attnlib.core.model import DEFAULT_MODEL, load_model
from attnlib.results.shipped import TUTORIAL_A, TUTORIAL_B
from support.browser import FIGURES_DRAWN, IDLE, VIEW_DATA, assert_lines_are_weights, browser_page, view_frame
from ui.sources.live_inputs import pretty_token

PAGES = [
    ("", "Live attention"),
    ("special-tokens", "Special tokens"),
    ("dependency-heads", "Dependency heads"),
    ("local-global", "Local vs global"),
]
HEADINGS = {"Local vs global": "Local versus global"}  # page titles that differ from their navigation label
# The main content of a page: a chart, a table, a component, or (for pages not built yet) the notice saying what they will show.
MAIN_CONTENT = ".js-plotly-plot, .attn-table, [data-testid='stTable'], iframe, [data-testid='stAlert']"


@pytest.mark.parametrize("path,title", PAGES)
def test_page_renders_in_browser(streamlit_server, browser, screenshot_dir, path, title):
    with browser_page(browser, screenshot_dir / "page-failure.png") as page:
        page.goto(f"{streamlit_server}/{path}", wait_until="domcontentloaded")
        page.get_by_role("heading", name=HEADINGS.get(title, title)).first.wait_for(timeout=90_000)
        page.locator(MAIN_CONTENT).first.wait_for(state="visible", timeout=120_000)
        page.wait_for_function(IDLE, timeout=120_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=60_000)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(screenshot_dir / f"page-{path or 'live'}.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0, "an exception box is shown"
        assert page.get_by_text("Page not found").count() == 0
        assert page.locator(MAIN_CONTENT).count() > 0
        page.locator("[data-testid='stSidebarNav']").wait_for(timeout=30_000)
        page.get_by_text("Model", exact=True).first.wait_for(timeout=30_000)
        nav = page.locator("[data-testid='stSidebarNav']").inner_text()
        assert all(name in nav for _, name in PAGES), "the app's own navigation (app.py) is not in charge"


def test_live_page_shows_default_pair_chart(streamlit_server, browser, screenshot_dir):
    """The Live page opens on the tutorial pair's head view: its canvas is drawn, and the lines it draws are the
    default model's attention weights of that pair (each a byte, round(weight x 255)), at the positions it names."""
    with browser_page(browser, screenshot_dir / "page-failure.png") as page:
        page.goto(f"{streamlit_server}/", wait_until="domcontentloaded")
        # Streamlit mounts a text area empty and gives it its value a moment later, so the check retries.
        expect(page.locator("textarea").first).to_have_value(TUTORIAL_A, timeout=120_000)
        expect(page.locator("textarea").nth(1)).to_have_value(TUTORIAL_B, timeout=30_000)
        frame = view_frame(page, "#cv")
        drawn = frame.evaluate(VIEW_DATA)
        page.screenshot(path=str(screenshot_dir / "page-live-default-pair.png"), full_page=True)
    result = attnlib.run(load_model(DEFAULT_MODEL), TUTORIAL_A, TUTORIAL_B)
    left, right = [i - 1 for i in drawn["leftPos"]], [j - 1 for j in drawn["rightPos"]]
    assert left == right == list(range(len(result.tokens)))
    assert drawn["left"] == drawn["right"] == [pretty_token(t) for t in result.tokens]
    assert_lines_are_weights(drawn, result.attentions)


def test_exact_example_computes_on_request(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "page-failure.png") as page:
        page.goto(f"{streamlit_server}/local-global?tab=example&a=Birds+sing+at+dawn.", wait_until="domcontentloaded")
        page.get_by_text("takes about").first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=120_000)  # until the run ends, the page above keeps growing
        button = page.get_by_role("button", name="Compute exact attribution")
        button.scroll_into_view_if_needed()
        button.click()
        page.locator("text=Head 1-1, query 0").first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=120_000)
        page.screenshot(path=str(screenshot_dir / "local-global-exact-example.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.get_by_text("Compute exact attribution").count() == 0
