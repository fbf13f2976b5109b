"""The long view's page data (METHODS §19): the window's keys (those its lines reach, the strongest when too many),
the grey levels of the reduced map, and the shapes it refuses."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from attnlib.views.long_view import gray_cells, long_view_html, window_lines


def payload(html: str) -> dict:
    match = re.search(r"<script type='application/json' id='data'>(.*?)</script>", html, re.S)
    assert match is not None
    return json.loads(match.group(1).replace("<\\/", "</"))


def test_window_keeps_the_keys_its_lines_reach_in_order():
    rows = np.zeros((2, 3, 10), np.float32)
    rows[0, 0, 7], rows[1, 2, 2], rows[0, 1, 5] = 0.5, 0.02, 0.009  # the last is below the 0.01 cut
    found = window_lines(rows, 4)
    assert (found.start, found.end, found.keys, found.reached) == (4, 7, [2, 7], 2)
    assert np.array_equal(found.maps, rows[:, :, [2, 7]])


def test_too_many_keys_keep_the_strongest_and_count_the_rest():
    rows = np.zeros((1, 1, 10), np.float32)
    rows[0, 0] = [0.3, 0.02, 0.5, 0.04, 0.0, 0.05, 0.0, 0.03, 0.0, 0.06]
    found = window_lines(rows, 0, max_keys=3)
    assert found.keys == [0, 2, 9] and found.reached == 7


def test_grey_levels_are_relative_to_the_largest_cell():
    assert gray_cells(np.array([[0.0, 0.1], [0.2, 0.4]]), 0.4).tolist() == [[0, 64], [128, 255]]
    assert gray_cells(np.zeros((2, 2)), 0.0).tolist() == [[0, 0], [0, 0]]


def test_page_data_of_a_window():
    n, heads = 40, [1, 3]
    pooled = np.random.default_rng(0).random((2, 20, 20)).astype(np.float32)
    rows = np.zeros((2, 4, n), np.float32)
    rows[:, :, 10] = 1.0
    data = payload(long_view_html(pooled, 2, [f"t{i}" for i in range(n)], heads, 1, rows, (8, 12)))
    assert (data["layer"], data["heads"], data["cell"], data["cells"], data["n"]) == (2, [2, 4], 2, 20, n)
    assert data["window"] == [8, 12] and data["leftPos"] == [9, 10, 11, 12] and data["right"] == ["t10"]
    assert data["lines"]["nnz"] == 8 and data["reached"] == 1
    with pytest.raises(ValueError, match="rows must be"):
        long_view_html(pooled, 2, [f"t{i}" for i in range(n)], heads, 1, rows[:, :3], (8, 12))
    with pytest.raises(ValueError, match="pooled must be"):
        long_view_html(pooled[0], 2, [f"t{i}" for i in range(n)], heads, 1)
