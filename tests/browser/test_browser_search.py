"""Real-browser test of "Find similar tokens in a corpus" on the Live page: a token picked by a click in the head view,
the matches with their attention strips, the UPOS / DEPREL / attends-to charts, a match opened in the head view."""

from __future__ import annotations

import pytest

from support.browser import FIGURE, browser_page, view_frame, wait_idle

ROW, TOP = 18, 4  # the head view's row height and top margin in CSS pixels (attnlib/views/head_view.js)
K = 8


@pytest.mark.slow
def test_pick_a_token_search_and_open_a_match(streamlit_server, browser, screenshot_dir):
    url = f"{streamlit_server}/?a=The+cat+sat+on+the+mat.&b=&layer=3&find=1&corpus=ewt-dev&limit=60&k={K}&fvec=hidden"
    with browser_page(browser, screenshot_dir / "failed-live-search.png", height=3400) as page:  # tall: one shot
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Live attention").first.wait_for(timeout=180_000)
        wait_idle(page)
        assert page.get_by_text("Pick a token: click it in the head view").count() == 1  # nothing searched yet
        frame = view_frame(page, "#cv")
        frame.locator("#cv").click(position={"x": 20, "y": TOP + ROW * 2 + ROW / 2})  # row 2: "cat"
        wait_idle(page)
        page.get_by_text("UPOS of the matches").first.wait_for(timeout=300_000)
        page.wait_for_function(
            "() => document.querySelectorAll('.js-plotly-plot[data-drawn]').length >= 3", timeout=120_000
        )
        assert page.get_by_role("combobox", name="Selected token").input_value() == "3: cat"
        assert "token=3" in page.url
        strips = page.locator(".attn-strip")
        assert strips.count() == K
        captions = page.get_by_text("cos 0.").all_inner_texts()
        scores = [float(c.split("cos ")[1].split(" ")[0]) for c in captions]
        assert len(scores) == K and scores == sorted(scores, reverse=True)
        titles = " ".join(page.locator(FIGURE).all_inner_texts())
        for title in ("UPOS of the matches", "DEPREL of the matches", "Key each head attends to most"):
            assert title in titles
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / "live-search-matches.png"), full_page=True)
        first_match = strips.first.inner_text()
        page.locator(".st-key-find0_open_1 button").first.click()  # the first match's "Open"
        wait_idle(page)
        text_a = page.locator("textarea").first.input_value()
        assert text_a.split()[0].lower() in first_match.lower() and "token=" in page.url
        view_frame(page, "#cv")
        page.screenshot(path=str(screenshot_dir / "live-search-opened.png"), full_page=True)
