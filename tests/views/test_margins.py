"""attnlib/views/margins: margins estimated from a figure's text, worked out by hand from the font's widths (the browser
test in test_browser_figures checks plotly then widens nothing)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pytest

from attnlib.views.margins import (
    COLORBAR_BESIDE_LABELS,
    LEGEND_BESIDE,
    PAPER_GAP,
    as_array,
    colorbar_right,
    fitted_margins,
    legend_right,
    number_labels,
    text_width,
)


def _spec(fig: go.Figure) -> tuple[list, dict]:
    spec = fig.to_plotly_json()
    return spec["data"], spec["layout"]


def test_text_width_adds_the_fonts_widths_and_takes_the_widest_line():
    # o .54, t .34, h .54, e .5, r .35, space .2, t .34, o .54, k .49, e .5, n .55, s .42 (em): 5.31 em
    assert text_width("other tokens", 12) == pytest.approx(5.31 * 12)
    assert text_width("[CLS]", 10) == pytest.approx((0.3 + 0.57 + 0.49 + 0.53 + 0.3) * 10)
    assert text_width("ab<br>other tokens", 12) == text_width("other tokens", 12)
    assert text_width("\u03b1", 10) == pytest.approx(6.5)  # outside ASCII: 0.65 em


def test_number_labels_are_the_widest_plotly_writes():
    assert number_labels(0, 1) == ["0", "1", "0.2"]  # about six ticks: a step of 0.2
    assert number_labels(-0.5, 0.5) == ["\u22120.6", "0.6", "\u22120.4"]  # plotly writes a minus sign
    assert number_labels(0, 100) == ["0", "100", "20"]
    assert number_labels(0, 0.3) == ["0", "0.3", "0.05"]  # a step of 0.05


def test_typed_arrays_are_read_as_plotly_sends_them():
    values = np.array([[0.5, 0.25, 0.125], [1.0, 2.0, 4.0]])
    z = _spec(go.Figure(go.Heatmap(z=values)))[0][0]["z"]
    assert isinstance(z, dict) and "bdata" in z  # plotly's JSON holds numpy arrays as base64
    np.testing.assert_array_equal(as_array(z), values)
    np.testing.assert_array_equal(as_array([1, 2]), np.array([1, 2], dtype=object))


def test_a_legend_on_the_right_holds_its_longest_name():
    fig = go.Figure([go.Scatter(y=[1, 2], name="[CLS]"), go.Scatter(y=[2, 1], name="other tokens")])
    assert legend_right(*_spec(fig)) == pytest.approx(text_width("other tokens", 12) + LEGEND_BESIDE + PAPER_GAP)
    fig.update_layout(legend_font_size=18)
    assert legend_right(*_spec(fig)) == pytest.approx(text_width("other tokens", 18) + LEGEND_BESIDE + PAPER_GAP)
    assert legend_right(*_spec(go.Figure(go.Scatter(y=[1], name="alone")))) is None  # plotly shows no legend
    assert legend_right(*_spec(fig.update_layout(legend_orientation="h"))) is None  # below, not beside


def test_a_colour_bar_holds_its_tick_labels_or_its_title():
    fig = go.Figure(go.Heatmap(z=[[0.1, 0.9]], zmin=0, zmax=1))
    widest = text_width("0.2", 12)  # of "0", "1", "0.2"
    assert colorbar_right(*_spec(fig)) == pytest.approx(widest + COLORBAR_BESIDE_LABELS + PAPER_GAP)
    assert colorbar_right(*_spec(go.Figure(go.Heatmap(z=[[1, 2]], showscale=False)))) is None


def test_margins_only_widen_and_a_bare_figure_keeps_its_own():
    bare = go.Figure(go.Scatter(x=[1, 2], y=[3, 4])).update_layout(margin=dict(l=5, r=5, t=5, b=5))
    assert fitted_margins(bare.to_plotly_json()) == {"l": 5, "r": 5, "t": 5, "b": 5}
    titled = go.Figure(go.Scatter(x=[1, 2, 3], y=[0.0, 0.5, 1.0])).update_layout(
        margin=dict(l=10, r=10, t=60, b=10), xaxis_title="layer", yaxis_title="share"
    )
    fitted = fitted_margins(titled.to_plotly_json())
    assert fitted["t"] == 60 and fitted["l"] > 10 + text_width("0.2", 12) and fitted["b"] > 12 * 2
    wide = titled.update_layout(margin=dict(l=200, b=200))
    assert fitted_margins(wide.to_plotly_json())["l"] == 200 and fitted_margins(wide.to_plotly_json())["b"] == 200
    assert wide.layout.margin.l == 200  # the caller's figure is left alone


def test_axis_labels_follow_the_range_the_data_or_the_categories():
    from attnlib.views.margins import axis_labels

    assert axis_labels({"range": [0, 1]}, [{"y": [5.0, 7.0]}], "y") == number_labels(0, 1)  # the range wins
    assert axis_labels({"range": [None, 1]}, [{"y": [0.0, 0.5]}], "y") == number_labels(0, 0.5)  # half a range: data
    assert axis_labels({}, [{"y": [-3, 12]}], "y") == ["\u22123", "12"]  # integers: the ends
    assert axis_labels({}, [{"x": ["[CLS]", "the"]}], "x") == ["[CLS]", "the"]
    assert axis_labels({"showticklabels": False}, [{"y": [1, 2]}], "y") == []
    assert axis_labels({"tickangle": -60}, [{"x": ["a"]}], "x") is None  # turned labels: not estimated
