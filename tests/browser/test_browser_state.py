"""Real browser: each page keeps a changed option across a visit to another page, and its copied URL reproduces the
same options and the same figure in a fresh browser context."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from support.browser import FIGURES_DRAWN, IDLE, browser_page

HEADINGS = {"Local vs global": "Local versus global"}
# the first figure's content: Plotly's data, or the self-contained view's page
FIGURE = """() => { const p = document.querySelector('.js-plotly-plot');
  if (p) return JSON.stringify(p.data);
  const f = document.querySelector('iframe'); return f ? (f.srcdoc || f.contentDocument.body.innerHTML) : null; }"""


@dataclass
class Case:
    path: str
    nav: str  # the page's name in the navigation
    start: str  # query string of the first visit: small corpora keep the test short
    option: str  # the label of the radio or checkbox the test switches on
    param: str  # what the URL must then hold
    elsewhere: str  # the page visited in between


CASES = [
    Case("", "Live attention", "", "Model view", "view=model", "Local vs global"),
    Case("special-tokens", "Special tokens", "?limit=8&grad=0", "all punctuation", "punct=all", "Live attention"),
    Case(
        "dependency-heads",
        "Dependency heads",
        "?limit=15&min=3",
        "Select on half A, report on half B",
        "split=halves",
        "Live attention",
    ),
    Case(
        "local-global",
        "Local vs global",
        "",
        "Drop [CLS]/[SEP] from the histograms",
        "drop=1",
        "Live attention",
    ),
]


def settle(page, nav: str) -> None:
    """Wait for the page's heading, its first figure, the end of its run and every figure drawn."""
    page.get_by_role("heading", name=HEADINGS.get(nav, nav)).first.wait_for(timeout=180_000)
    page.wait_for_timeout(300)
    page.wait_for_function(IDLE, timeout=240_000)
    page.locator(".js-plotly-plot, iframe").first.wait_for(state="visible", timeout=240_000)
    page.wait_for_function(IDLE, timeout=240_000)
    page.wait_for_function(FIGURES_DRAWN, timeout=60_000)
    page.wait_for_timeout(800)


def control(page, label: str):
    """The radio button or checkbox with this label."""
    return page.locator("[data-testid='stRadio'] label, [data-testid='stCheckbox'] label").filter(has_text=label).first


def is_on(page, label: str) -> bool:
    box = control(page, label)
    box.wait_for(timeout=60_000)
    return box.evaluate("l => l.querySelector('input').checked")


def go(page, nav: str) -> None:
    """Open another page through the app's navigation (the same session, as a visitor does)."""
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text=nav).first.click()
    settle(page, nav)


@pytest.mark.browser
@pytest.mark.parametrize("case", CASES, ids=[c.nav for c in CASES])
def test_option_survives_other_page_and_url_reproduces_figure(streamlit_server, browser, screenshot_dir, case):
    name = case.path or "live"
    with browser_page(browser, screenshot_dir / f"failed-state-{name}.png", height=1200) as page:
        page.goto(f"{streamlit_server}/{case.path}{case.start}", wait_until="domcontentloaded")
        settle(page, case.nav)
        assert not is_on(page, case.option)
        control(page, case.option).click()
        settle(page, case.nav)
        assert is_on(page, case.option)
        copied, figure = page.url, page.evaluate(FIGURE)
        assert case.param in copied and figure
        go(page, case.elsewhere)
        go(page, case.nav)
        assert is_on(page, case.option), "the option was lost on the way to another page and back"
        assert page.evaluate(FIGURE) == figure
        assert case.param in page.url
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / f"state-{name}-back.png"), full_page=True)
    # browser_page opens its own context: a new session with nothing of the first one
    with browser_page(browser, screenshot_dir / f"failed-state-{name}-url.png", height=1200) as fresh:
        fresh.goto(copied, wait_until="domcontentloaded")
        settle(fresh, case.nav)
        assert is_on(fresh, case.option)
        assert fresh.evaluate(FIGURE) == figure, "the copied URL shows another figure"
        assert fresh.locator("[data-testid='stException']").count() == 0
        fresh.screenshot(path=str(screenshot_dir / f"state-{name}-url.png"), full_page=True)
