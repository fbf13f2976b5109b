"""Real-browser test of the Queries and keys page: the grid of every head opens from the shipped result, a click on a
head opens it large, and a click on a query draws its attention to its input's keys as lines."""

from __future__ import annotations

import pytest

from support.browser import FIGURES_DRAWN, IDLE, browser_page

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
        page.locator(PICTURE).first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "qk-head-with-lines.png"), full_page=True)
