"""The example notebook: committed without outputs, runs headless (nbclient, ipykernel), and its HTML export
(nbconvert) draws the head view's canvas and every figure in Chromium with every request but local ones refused."""

from __future__ import annotations

import nbformat
import pytest

from support.notebook import EXAMPLE_NOTEBOOK


def test_the_example_notebook_is_committed_without_outputs():
    nb = nbformat.read(EXAMPLE_NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)


# ---------- slow tests


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
    # head, model and neuron views, the four figures of the special-token run's show(), the dependency heatmaps and the
    # trained decoder's lens run (its lens table and its attribution heatmap)
    assert len(frames) == 10
    # nothing printed under the special-token run's figures (show() returns None in a notebook), and no warning from
    # tqdm.auto (which transformers imports) that a kernel without ipywidgets has no IProgress
    (shown,) = [c for c in executed.cells if c.cell_type == "code" and c.source.startswith("special.show()")]
    assert [o.output_type for o in shown.outputs] == ["display_data"] * 4
    streams = [o.text for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"]
    assert not any("IProgress" in text for text in streams), streams
    assert sum("plotly-graph-div" in h for h in frames) == 7 and sum("id=&#x27;cv&#x27;" in h for h in frames) == 2
