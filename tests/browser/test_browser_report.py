"""The report: its tables equal each command's JSON, it is offline and self-contained, and a model equals itself.

The browser test; present/test_report.py holds the rest."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.slow
@pytest.mark.browser
def test_browser_renders_every_figure_offline(report_page, browser, screenshot_dir, tiny_model_dir):
    out, _ = report_page
    figures = out.read_text().count("Plotly.newPlot(")
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
