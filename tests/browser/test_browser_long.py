"""Real-browser test of the Live page on a long input (METHODS §19, issue 36): a tiny ModernBERT of 8,192 positions;
the head view draws the reduced map, a drag on it opens a window whose lines are drawn, and the draw times are printed
(the 3 s target is benchmarks/bench_long_view.py's, not an assertion). Screenshots in test-output/screenshots/."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from support.browser import INK, browser_page, view_frame, wait_idle
from support.long import long_text, save_long_modernbert

N = 8192


@pytest.fixture(scope="module")
def long_folder(tmp_path_factory):
    return save_long_modernbert(tmp_path_factory.mktemp("long-modernbert-8192"), N)


def drawn_ms(frame) -> int:
    """The view's time from its navigation start to its first full drawing (long_view.js), in ms."""
    frame.wait_for_function("() => document.body.dataset.drawMs !== undefined", timeout=60_000)
    return int(frame.evaluate("() => document.body.dataset.drawMs"))


def test_long_head_view_draws_the_map_and_a_dragged_window(streamlit_server, browser, screenshot_dir, long_folder):
    url = f"{streamlit_server}/?model={quote(str(long_folder))}&a={quote(long_text(N))}&b=&view=head&layer=2"
    with browser_page(browser, screenshot_dir / "failed-live-long.png", height=1400) as page:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Live attention").first.wait_for(timeout=180_000)
        page.get_by_text(f"{N} tokens: the map is drawn in cells of 16×16 tokens").first.wait_for(timeout=180_000)
        wait_idle(page)
        frame = view_frame(page, "#map")
        assert frame.evaluate(f"() => ({INK})('#map')") > 2000
        print(f"\n{N}-token head view, reduced map drawn in {drawn_ms(frame)} ms (from the view's navigation start)")
        assert "No window" in frame.inner_text("#wcap")
        assert page.locator("[data-testid='stException']").count() == 0
        page.locator("iframe").first.screenshot(path=str(screenshot_dir / "live-long-8192-map.png"))

        box = frame.locator("#map").bounding_box()  # the map: 44 px of ticks left, 16 on top, 512 px a side
        top, left = box["y"] + 16, box["x"] + 44
        page.mouse.move(left + 200, top + 256)  # row 4096
        page.mouse.down()
        page.mouse.move(left + 200, top + 262, steps=4)  # 6 px: 96 rows further
        page.mouse.up()
        page.wait_for_url("**start=4097**", timeout=60_000)
        wait_idle(page)
        frame = view_frame(page, "#cv")
        caption = frame.inner_text("#wcap")
        assert caption.startswith("Window: query rows 4097–4193"), caption
        assert frame.evaluate(f"() => ({INK})('#cv')") > 2000
        print(f"{N}-token head view with a 97-row window drawn in {drawn_ms(frame)} ms")
        assert page.get_by_role("spinbutton", name="Window from").input_value() == "4097"
        # the lines' canvas is box-high and drawn again for what a scroll shows: the box's foot has its labels too
        frame.evaluate("() => { box.scrollTop = box.scrollHeight; }")
        frame.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        assert frame.evaluate("() => box.scrollTop") > 0 and frame.evaluate(f"() => ({INK})('#cv')") > 2000
        page.locator("iframe").first.screenshot(path=str(screenshot_dir / "live-long-8192-window-scrolled.png"))
        frame.evaluate("() => { box.scrollTop = 0; }")
        frame.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        page.locator("iframe").first.screenshot(path=str(screenshot_dir / "live-long-8192-window.png"))
        page.get_by_text(f"{N} tokens: the map").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "live-long-8192-page.png"))

        page.get_by_text("Model view", exact=True).click()  # every head's reduced map, the chosen head's window below
        wait_idle(page)
        grid = view_frame(page, "#grid")
        assert grid.evaluate(f"() => ({INK})('#grid')") > 2000
        assert "start=4097" in page.url and page.locator("iframe").count() >= 2
        assert page.locator("[data-testid='stException']").count() == 0
        page.locator("iframe").first.screenshot(path=str(screenshot_dir / "live-long-8192-model-view.png"))


def test_long_neuron_view_searches_a_window_token(streamlit_server, browser, screenshot_dir, long_folder):
    """The search of a long input's window token (METHODS §16, §19) in the browser: the neuron view's query, its
    matches in a corpus, no exception."""
    query = "view=neuron&layer=1&head=2&start=4097&end=4160&token=4120&find=1&corpus=classroom-single&k=4"
    url = f"{streamlit_server}/?model={quote(str(long_folder))}&a={quote(long_text(N))}&b=&{query}"
    with browser_page(browser, screenshot_dir / "failed-live-long-search.png", height=2200) as page:
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_text("Query: piece 4120 of the input above, layer output, layer 1").first.wait_for(timeout=300_000)
        wait_idle(page)
        assert page.locator("[data-testid='stException']").count() == 0
        assert page.get_by_role("switch", name="Find similar tokens in a corpus").is_checked()
        page.screenshot(path=str(screenshot_dir / "live-long-8192-search.png"), full_page=True)
