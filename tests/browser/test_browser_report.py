"""The report: its tables equal each command's JSON, it is offline and self-contained, and a model equals itself;
the Report page builds one whose figures draw the library's statistics.

The browser tests; present/test_report.py holds the rest."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from attnlib.analyses.base import run_analysis
from attnlib.analyses.labels import STAT_NAMES
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.core.corpus import read_corpus
from attnlib.core.model import load_model
from attnlib.results.shipped import CLASSROOM_SINGLE
from support.browser import TRACES, browser_page, download, traces_of, wait_idle
from support.tolerances import FORWARD_RTOL

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.slow
@pytest.mark.browser
def test_browser_renders_every_figure_offline(report_page, browser, screenshot_dir, tiny_model_dir):
    out, _ = report_page
    figures = figures_in(out)
    blocked: list[str] = []
    page = browser.new_page(viewport={"width": 1300, "height": 1000})

    def offline(route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(out.as_uri())
    page.wait_for_function(f"document.querySelectorAll('.plotly-graph-div .main-svg').length >= {figures}")
    rendered = page.eval_on_selector_all(
        ".plotly-graph-div", "divs => divs.filter(d => d.querySelector('.main-svg')).length"
    )
    assert rendered == figures
    assert page.locator(".difference").count() == 0  # one model: nothing to compare
    page.screenshot(path=str(screenshot_dir / f"report-{tiny_model_dir.name}.png"), full_page=False)
    page.close()
    assert errors == [] and blocked == []


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_report_page_builds_a_report_of_the_librarys_shares(
    streamlit_server, browser, screenshot_dir, tiny_model_dir, tmp_path
):
    """The Report page (a tiny BERT, the first 2 classroom sentences): "Build the report", download it, open it; its
    figure of the shares draws every head's share (METHODS §2) as the library computes it here."""
    folder, limit = str(tiny_model_dir), 2
    out = tmp_path / "report.html"
    with browser_page(browser, screenshot_dir / "report-page-failure.png", 1400, 1400) as page:
        page.goto(f"{streamlit_server}/report?model={quote(folder)}&limit={limit}", wait_until="domcontentloaded")
        page.get_by_role("button", name="Build the report").click(timeout=240_000)
        build = page.get_by_role("button", name="Download the report (HTML)")
        build.wait_for(timeout=240_000)
        wait_idle(page)
        download(page, build.click, out)
        page.goto(out.as_uri())
        page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {figures_in(out)}")
        page.screenshot(path=str(screenshot_dir / "report-page-built.png"))
        shares = traces_of(page.evaluate(TRACES), "Share of attention per layer")

    corpus = {"corpus": read_corpus(CLASSROOM_SINGLE, limit=limit)}  # the page's default corpus
    own = run_analysis(SPECIAL, load_model(folder), SpecialOptions(norms=True), inputs=corpus).result.special
    for key in ("cls", "sep", "punct", "other"):
        (dots,) = [t for t in shares if t["name"] == STAT_NAMES[key] and t["mode"] == "markers"]  # a dot per head
        np.testing.assert_allclose(dots["y"], own.heads[key].ravel(), rtol=FORWARD_RTOL, atol=FORWARD_RTOL)


def figures_in(report) -> int:
    """How many figures a report file draws."""
    return report.read_text().count("Plotly.newPlot(")
