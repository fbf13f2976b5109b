"""The example notebook: committed without outputs, runs headless (nbclient, ipykernel), and its HTML export
(nbconvert) draws the head view's canvas and every figure in Chromium with every request but local ones refused."""

from __future__ import annotations

import nbformat

from support.notebook import EXAMPLE_NOTEBOOK


def test_the_example_notebook_is_committed_without_outputs():
    nb = nbformat.read(EXAMPLE_NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
