"""The example notebook: committed without outputs, runs headless (nbclient, ipykernel), and its HTML export
(nbconvert) draws the head view's canvas and every figure in Chromium with every request but local ones refused.

The slow tier; test_notebook.py holds the quick tests."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


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
    # head, model and neuron views, the four figures of the special-token run's show() and the dependency heatmaps
    assert len(frames) == 8
    assert sum("plotly-graph-div" in h for h in frames) == 5 and sum("id=&#x27;cv&#x27;" in h for h in frames) == 2
