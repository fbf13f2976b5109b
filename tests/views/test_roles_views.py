"""The head roles figures (attnlib/views/roles.py) on hand-made scores."""

from __future__ import annotations

import numpy as np

from attnlib.views.roles import causal_bars, checkpoint_lines, main_roles, role_map, role_thresholds

THRESHOLDS = {"previous": 0.4, "duplicate": 0.4, "induction": 0.4, "copying": 0.5, "sink": 0.3}
SCORES = {  # 2 layers x 2 heads, worked by hand below
    "previous": np.array([[0.9, 0.1], [0.1, 0.1]]),
    "duplicate": np.array([[0.0, 0.0], [0.5, 0.1]]),
    "induction": np.array([[0.0, 0.0], [0.8, 0.1]]),
    "copying": None,
    "first_share": np.array([[0.0, 0.6], [0.0, 0.2]]),
}


def test_each_head_takes_the_role_it_passes_by_the_largest_factor():
    # 0-0: previous 0.9 / 0.4; 0-1: sink 0.6 / 0.3; 1-0: induction 0.8 / 0.4 beats duplicate 0.5 / 0.4; 1-1: none
    roles = main_roles(SCORES, role_thresholds(THRESHOLDS))
    assert roles.tolist() == [["previous", "first_share"], ["induction", "none"]]


def test_the_role_map_colours_each_head_by_its_role_and_hovers_its_scores():
    fig = role_map(SCORES, role_thresholds(THRESHOLDS))
    heatmap = fig.data[0]
    names = list(heatmap.colorbar.ticktext)
    assert names == ["none", "previous-token", "duplicate-token", "induction", "sink"]  # copying: no score, no colour
    assert [[names[int(z)] for z in row] for row in heatmap.z] == [
        ["previous-token", "sink"],
        ["induction", "none"],
    ]
    assert heatmap.customdata.tolist() == [[0, 1], [2, 3]]  # a click names the head: l * heads + h
    assert "head 2-1: induction" in heatmap.text[1][0] and "duplicate-token 0.500" in heatmap.text[1][0]
    stops = heatmap.colorscale  # one flat band per role: role i's colour from i / k to (i + 1) / k
    k = len(names)
    assert [(round(a[0] * k, 6), round(b[0] * k, 6), a[1] == b[1]) for a, b in zip(stops[::2], stops[1::2])] == [
        (i, i + 1, True) for i in range(k)
    ]


def test_causal_bars_and_lines_hold_the_given_numbers():
    causal = {"induction": {"heads": [[1, 0]], "gain_ablated": 0.05, "control_gain": 1.2}}
    bars = causal_bars(causal, 1.3)
    assert list(bars.data[0].y) == [0.05] and list(bars.data[1].y) == [1.2] and bars.data[0].customdata[0] == "2-1"
    lines = checkpoint_lines([0, 100, 400], {"induction": [0.02, 0.1, 0.7]}, [0.0, None, 1.5])
    assert list(lines.data[0].x) == [0, 100, 400] and list(lines.data[0].y) == [0.02, 0.1, 0.7]
    assert np.isnan(lines.data[1].y[1]) and lines.data[1].yaxis == "y2"
