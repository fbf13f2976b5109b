"""The relative-position histograms on hand-made arrays: bars per offset window, and the standard errors of sampled
rows (METHODS §19) drawn on the input-contribution bars only."""

from __future__ import annotations

import numpy as np

from attnlib.views.positions import position_histograms

OFFSETS = np.arange(-3, 4)
ATTENTION = np.arange(14, dtype=np.float64).reshape(2, 7) / 100
ATTRIBUTION = ATTENTION[::-1] + 0.5
ERRORS = np.linspace(0.01, 0.14, 14).reshape(2, 7)


def _bars(fig, name):
    return [t for t in fig.data if t.name == name]


def test_error_bars_are_the_sampled_rows_standard_errors_within_the_window():
    fig = position_histograms(OFFSETS, ATTENTION, ATTRIBUTION, ["a", "b"], max_offset=2, attribution_errors=ERRORS)
    inside = np.abs(OFFSETS) <= 2  # offsets -2..2: columns 1..5
    for p, bars in enumerate(_bars(fig, "input contribution (HTA)")):
        np.testing.assert_array_equal(bars.x, OFFSETS[inside])
        np.testing.assert_array_equal(bars.y, ATTRIBUTION[p][inside])
        np.testing.assert_array_equal(bars.error_y.array, ERRORS[p][inside])
        assert "±" in bars.hovertemplate
    for bars in _bars(fig, "attention"):
        assert bars.error_y.array is None and "±" not in bars.hovertemplate
    assert "standard error" in fig.layout.title.text


def test_no_error_bars_without_sampled_rows():
    fig = position_histograms(OFFSETS, ATTENTION, ATTRIBUTION, ["a", "b"], max_offset=3)
    assert all(t.error_y.array is None for t in fig.data)
    assert "standard error" not in fig.layout.title.text


def test_two_layers_fill_the_width():
    # two panels in a grid of four columns would leave half the figure empty: the grid has two columns
    fig = position_histograms(OFFSETS, ATTENTION, ATTRIBUTION, ["a", "b"], columns=4)
    axes = sorted(name for name in fig.layout.to_plotly_json() if name.startswith("xaxis"))
    assert axes == ["xaxis", "xaxis2"]
    assert fig.layout.xaxis.domain[0] == 0 and fig.layout.xaxis2.domain[1] == 1
