"""The example notebook: committed without outputs, runs headless (nbclient, ipykernel), and its HTML export
(nbconvert) draws the head view's canvas and every figure in Chromium with every request but local ones refused."""

from __future__ import annotations

import sys

import nbformat
import pytest

from support.browser import INK, PLOTTED, offline_page
from support.notebook import EXAMPLE_NOTEBOOK

LIMIT = 10  # inputs of each corpus: enough for every cell, quick


def test_the_example_notebook_is_committed_without_outputs():
    nb = nbformat.read(EXAMPLE_NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


@pytest.fixture(scope="module")
def executed(execute_notebook, tmp_path_factory):
    """The notebook run by this Python's kernel, in a folder outside the checkout."""
    return execute_notebook(sys.executable, tmp_path_factory.mktemp("notebook"), LIMIT)


def html_outputs(nb) -> list[str]:
    return [
        o.data["text/html"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "text/html" in o.get("data", {})
    ]


@pytest.mark.slow
def test_the_example_notebook_runs_and_shows_its_views(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    frames = [h for h in html_outputs(executed) if h.startswith("<iframe srcdoc=")]
    # head, model and neuron views, the two special-token figures and the dependency heatmaps
    assert len(frames) == 6
    assert sum("plotly-graph-div" in h for h in frames) == 3 and sum("id=&#x27;cv&#x27;" in h for h in frames) == 2


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
        assert len(frames) == 6
        canvases = [f for f in frames if f.query_selector("#cv")]
        figures = [f for f in frames if f.query_selector(".js-plotly-plot")]
        assert len(canvases) == 2 and len(figures) == 3  # the head and neuron views; the model view draws #grid
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
