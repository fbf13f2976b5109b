"""The circuit figures (attnlib.views.circuit) on arrays made by hand: the composition heatmap's cells are the scores
[sender, receiver] flattened layer by layer, a role's head is named on both axes and framed twice (its row and its
column); the lines over training are the table's columns, the baseline dashed."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlib.views.circuit import composition_training_figure, marked_composition_heatmap, role_tags


def test_the_heatmap_marks_the_role_heads():
    scores = np.zeros((2, 2, 2, 2))
    scores[0, 1, 1, 0] = 0.3  # sender 1-2 into receiver 2-1
    roles = {"previous": [[0, 1]], "induction": [[1, 0]], "copying": [[1, 0]]}
    fig = marked_composition_heatmap(scores, "k", "m", roles)
    z = np.asarray(fig.data[0].z)
    assert z.shape == (4, 4) and z[1, 2] == 0.3 and z.sum() == 0.3
    assert list(fig.layout.yaxis.ticktext) == ["1-1", "1-2 previous-token", "2-1 induction", "2-2"]
    assert list(fig.layout.xaxis.ticktext) == list(fig.layout.yaxis.ticktext)
    assert len(fig.layout.shapes) == 4  # two heads, each its row and its column
    assert {t.name for t in fig.data[1:]} == {"previous-token heads", "induction heads"}
    assert role_tags(roles)[(1, 0)] == ["induction", "copying"]


def test_the_lines_are_the_tables():
    table = pd.DataFrame({"step": [0, 10], "q": [0.1, 0.2], "k": [0.3, 0.4], "v": [0.5, 0.6], "baseline": [0.125] * 2})
    fig = composition_training_figure(table, "m", "2-1")
    by_name = {t.name: t for t in fig.data}
    for kind in "qkv":
        assert list(by_name[f"{kind.upper()}-composition"].y) == list(table[kind])
    baseline = by_name["1/√d (random matrices)"]
    assert list(baseline.y) == [0.125, 0.125] and baseline.line.dash == "dash"
