"""The example notebook: committed without outputs, runs headless (nbclient, ipykernel), and its HTML export
(nbconvert) draws the head view's canvas and every figure in Chromium with every request but local ones refused.

The browser test; packaging/test_notebook.py holds the rest."""

from __future__ import annotations

import pytest

from support.browser import INK, PLOTTED, offline_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.slow
def test_the_notebooks_html_export_draws_offline(executed, browser, tmp_path, screenshot_dir):
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(executed)
    path = tmp_path / "quickstart.html"
    path.write_text(body, encoding="utf-8")
    with offline_page(browser) as (page, asked):
        by_frame: list[tuple[str, str]] = []
        page.on("request", lambda request: by_frame.append((request.frame.url, request.url)))
        page.goto(path.as_uri())
        frames = [f for f in page.frames if f.url == "about:srcdoc"]
        assert len(frames) == 10
        canvases = [f for f in frames if f.query_selector("#cv")]
        figures = [f for f in frames if f.query_selector(".js-plotly-plot")]
        assert len(canvases) == 2 and len(figures) == 7  # the head and neuron views; the model view draws #grid
        head = canvases[0]
        head.wait_for_function(f"() => ({INK})('#cv') > 500", timeout=30_000)
        assert head.query_selector("#layer") is not None  # the head view with its layer picker
        for figure in figures:
            figure.wait_for_function(f"() => ({PLOTTED})() > 0", timeout=30_000)
        # The export's own page asks for require.js and MathJax from a CDN (refused); no view asks for anything.
        assert [url for frame, url in by_frame if frame == "about:srcdoc" and not url.startswith("data:")] == []
        refused = [url for url in asked if not url.startswith(("file:", "data:"))]
        assert all("cdnjs" in url for url in refused), refused
        page.screenshot(path=str(screenshot_dir / "notebook-export.png"), full_page=True)
