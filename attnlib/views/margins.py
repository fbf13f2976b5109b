"""Margins that already hold a figure's legend, colour bar and axis labels, so that plotly lays it out once.

Where labels do not fit the margins a figure asks for, plotly's automargin widens them and draws the whole figure a
second time (40 % of its drawing time here, benchmarks/README.md "Classroom"). The widths are estimated from the
text, in the app's font: an estimate short of the need costs only that second pass (the labels are never cut), one
over it a little white space. Only the common cases are estimated (a legend or colour bar on the right, titled axes on the left and at
the bottom, labels written horizontally); anything else keeps the figure's own margins.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

# Advance widths of Source Sans, the app's font (ui/plotly_figure.APP_FONT), in em, as Chromium measures them.
_EM = dict(
    zip(
        " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~",
        [0.2, 0.29, 0.43, 0.5, 0.5, 0.82, 0.61, 0.25, 0.3, 0.3, 0.42, 0.5, 0.25, 0.31, 0.25, 0.35]
        + [0.5] * 10
        + [0.25, 0.25, 0.5, 0.5, 0.5, 0.42, 0.85]
        + [0.54, 0.59, 0.57, 0.61, 0.53, 0.49, 0.62, 0.65, 0.26, 0.48, 0.58, 0.49, 0.73]
        + [0.65, 0.66, 0.57, 0.66, 0.57, 0.53, 0.54, 0.64, 0.51, 0.79, 0.51, 0.48, 0.54]
        + [0.3, 0.35, 0.3, 0.5, 0.5, 0.54]
        + [0.5, 0.55, 0.46, 0.55, 0.5, 0.29, 0.5, 0.54, 0.25, 0.25, 0.49, 0.25, 0.83]
        + [0.55, 0.54, 0.55, 0.55, 0.35, 0.42, 0.34, 0.54, 0.47, 0.72, 0.45, 0.47, 0.42]
        + [0.3, 0.24, 0.3, 0.5],
        strict=True,
    )
)
OTHER_EM = 0.65  # a character outside ASCII (Greek, arrows, the minus sign's 0.5 rounded up)
DEFAULT_SIZE = 12  # plotly's font size
PLOTLY_MARGIN = {"l": 80, "r": 80, "t": 100, "b": 80}  # plotly's margins where a figure sets none
# Measured on the app's figures (Chromium, plotly.js 4.1.1), in px: what sits beside the text.
LEGEND_BESIDE = 56  # a legend's symbol, gaps and border beside its longest name
PAPER_GAP = 20  # a legend or colour bar stands at x = 1.02 of the plot: 2 % of a plot up to 1000 px wide
COLORBAR_BESIDE_LABELS = 60  # the bar, its padding and the gap before its tick labels
COLORBAR_BESIDE_TITLE = 40  # padding beside a colour bar's title, written above the bar
AXIS_TITLE_LEFT = 33  # a y title's standoff and line, plus half the font size (see left_margin)
AXIS_TITLE_BELOW = 33  # an x title's standoff and tick padding, plus 0.85 of the font size for its line
TICK_PAD = 14  # between tick labels and the figure's edge, on an axis without a title
LEGEND_ROW = 15  # a horizontal legend's padding, plus two font sizes for its row
ACROSS_AT_MOST = 500  # x tick labels wider than this together may be turned by plotly: not estimated


def text_width(text: str, size: float) -> float:
    """Width in px of one line of text at a font size (markup like <b> counts as text: a slight overestimate)."""
    lines = str(text).split("<br>")
    return max(sum(_EM.get(ch, OTHER_EM) for ch in line) for line in lines) * size


def _tick_step(span: float) -> float:
    """About six ticks over a span, on plotly's 1-2-5 steps."""
    raw = span / 6 if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= raw)


def number_labels(low: float, high: float) -> list[str]:
    """The widest tick labels plotly may write on a numeric axis from low to high (ends and a step in between)."""
    step = _tick_step(high - low)
    decimals = max(0, -math.floor(math.log10(step)))
    ends = [math.floor(low / step) * step, math.ceil(high / step) * step, math.floor(low / step) * step + step]
    written = [f"{v:.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{v:.0f}" for v in ends]
    return [("0" if w in ("-0", "") else w).replace("-", "\u2212") for w in written]


def as_array(value: Any) -> np.ndarray:
    """A data array as plotly's JSON holds it: a list, or a typed array {"dtype", "bdata": base64, "shape"}."""
    if isinstance(value, dict) and "bdata" in value:
        flat = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]).newbyteorder("<"))
        shape = value.get("shape")
        return flat.reshape([int(n) for n in str(shape).split(",")]) if shape is not None else flat
    try:
        return np.asarray(value)
    except ValueError:  # ragged lists
        return np.asarray(value, dtype=object)


def _values(trace: dict, coord: str) -> np.ndarray:
    """A trace's values along x or y (a heatmap's own coordinates, else its points), flattened."""
    values = trace.get(coord)
    if values is None:
        z = trace.get("z")
        if trace.get("type") == "heatmap" and z is not None:
            shape = as_array(z).shape
            return np.arange(shape[1] if coord == "x" else shape[0])
        return np.array([])
    return as_array(values).ravel()


def _as_numbers(values: np.ndarray) -> np.ndarray | None:
    """Values as floats (missing ones NaN), or None when some are text (a category axis)."""
    if values.dtype.kind in "iufb":
        return values.astype(float)
    try:
        return values.astype(float)  # None and numbers held as objects
    except (TypeError, ValueError):
        return None


def axis_labels(axis: dict, traces: Sequence[dict], coord: str) -> list[str] | None:
    """The tick labels an axis may show (None when they cannot be told from the figure, [] when it shows none)."""
    if axis.get("showticklabels") is False:
        return []
    if axis.get("tickangle") not in (None, 0):
        return None
    if axis.get("ticktext") is not None:
        return [str(t) for t in axis["ticktext"]]
    arrays = [a for a in (_values(t, coord) for t in traces) if a.size]
    converted = [_as_numbers(a) for a in arrays]
    if axis.get("type") == "category" or any(c is None for c in converted):
        return list(dict.fromkeys(str(v) for a in arrays for v in a if v is not None))  # each category once
    every = np.concatenate([c for c in converted if c is not None]) if converted else np.array([])
    numbers = every[np.isfinite(every)]
    fixed = axis.get("range")
    if fixed is not None and None not in fixed:
        low, high = (float(v) for v in fixed)
    elif numbers.size:
        low, high = float(numbers.min()), float(numbers.max())
        if any(t.get("type") == "bar" for t in traces):
            low, high = min(low, 0.0), max(high, 0.0)
    else:
        return []
    if fixed is None and high - low <= 30 and bool(np.all(numbers == np.round(numbers))):
        return [f"{int(v)}".replace("-", "\u2212") for v in (low, high)]  # the ends are the widest integers
    return number_labels(min(low, high), max(low, high))


def _on_axis(traces: Sequence[dict], name: str, coord: str) -> list[dict]:
    """The traces drawn against an axis (layout key xaxis2 -> trace xaxis "x2")."""
    ref = coord + name[len(coord) + 4 :]
    return [t for t in traces if t.get(coord + "axis", coord) == ref]


def _font_size(layout: dict, *keys: str) -> float:
    """The font size of a part of the layout (e.g. "legend"), else the figure's, else plotly's."""
    part: Any = layout
    for key in keys:
        part = part.get(key) or {}
    return float((part.get("font") or {}).get("size") or (layout.get("font") or {}).get("size") or DEFAULT_SIZE)


def _title(axis: dict) -> str:
    title = axis.get("title")
    return (title.get("text") if isinstance(title, dict) else title) or ""


def legend_right(data: Sequence[dict], layout: dict) -> float | None:
    """Width the legend takes right of the plot; None when there is no legend there."""
    legend = layout.get("legend") or {}
    if legend.get("orientation") == "h" or legend.get("x", 1.02) < 1:
        return None
    names = [t.get("name") or "" for t in data if t.get("showlegend") is not False]
    shown = layout.get("showlegend")
    if shown is False or (shown is None and len([n for n in names if n]) < 2):
        return None
    size = _font_size(layout, "legend")
    title = text_width(((legend.get("title") or {}).get("text")) or "", size) - LEGEND_BESIDE / 2  # no symbol beside
    return max([text_width(n, size) for n in names] + [title]) + LEGEND_BESIDE + PAPER_GAP


def colorbar_right(data: Sequence[dict], layout: dict) -> float | None:
    """Width a heatmap's colour bar takes right of the plot; None without one."""
    bars = [t for t in data if t.get("type") == "heatmap" and t.get("showscale") is not False and "coloraxis" not in t]
    if not bars:
        return None
    size = _font_size(layout)
    widths = []
    for trace in bars:
        z = as_array(trace.get("z")).astype(float)
        low = trace.get("zmin", np.nanmin(z) if z.size else 0.0)
        high = trace.get("zmax", np.nanmax(z) if z.size else 1.0)
        labels = number_labels(float(min(low, high)), float(max(low, high)))
        title = ((trace.get("colorbar") or {}).get("title") or {}).get("text") or ""
        widths.append(
            max(
                max(text_width(label, size) for label in labels) + COLORBAR_BESIDE_LABELS,
                text_width(title, size) + COLORBAR_BESIDE_TITLE,
            )
            + PAPER_GAP
        )
    return max(widths)


def _outer(layout: dict, name: str) -> bool:
    """Whether an axis stands on the figure's edge (a y axis in the first column, an x axis in the bottom row)."""
    axis = layout.get(name) or {}
    other = "x" if name.startswith("y") else "y"
    anchor = axis.get("anchor") or other
    anchor_axis = layout.get(f"{other}axis{anchor[1:]}") or {}
    return float((anchor_axis.get("domain") or [0.0])[0]) <= 0.01


def _axes(layout: dict, coord: str) -> list[tuple[str, dict]]:
    """The figure's x or y axes on its edge (left or bottom), by layout key."""
    far = "right" if coord == "y" else "top"
    return [
        (n, a)
        for n, a in layout.items()
        if n.startswith(coord + "axis")
        and isinstance(a, dict)
        and a.get("visible") is not False
        and a.get("side") != far
        and _outer(layout, n)
    ]


def left_margin(data: Sequence[dict], layout: dict) -> float | None:
    """What the y axes on the left need: their widest tick label, then the title and its standoff."""
    size = _font_size(layout)
    needs = []
    for name, axis in _axes(layout, "y"):
        labels = axis_labels(axis, _on_axis(data, name, "y"), "y")
        if labels is None:
            return None
        tick_size = float((axis.get("tickfont") or {}).get("size") or size)
        widest = max([text_width(label, tick_size) for label in labels] + [0])
        needs.append(widest + (AXIS_TITLE_LEFT + size / 2 if _title(axis) else TICK_PAD))
    return max(needs) if needs else None


def legend_below(layout: dict, bottom: float) -> float | None:
    """The bottom margin a one-row horizontal legend below the plot needs (it hangs -y of the plot's height below)."""
    legend = layout.get("legend") or {}
    y = float(legend.get("y", -0.1))
    if (
        legend.get("orientation") != "h"
        or y >= 0
        or legend.get("yanchor") not in (None, "top")
        or layout.get("showlegend") is False
    ):
        return None
    height = float(layout.get("height") or 450) - float((layout.get("margin") or {}).get("t", 100))
    return max(bottom, (-y * height + LEGEND_ROW + 2 * _font_size(layout, "legend")) / (1 - y))


def bottom_margin(layout: dict, x_labels: dict[str, list[str] | None]) -> float | None:
    """What the x axes at the bottom need: a line of tick labels written across, then the title and its standoff
    (x_labels: each x axis's tick labels, by layout key)."""
    size = _font_size(layout)
    needs = []
    for name, axis in _axes(layout, "x"):
        labels = x_labels[name]
        if labels is None or sum(text_width(label, size) for label in labels) > ACROSS_AT_MOST:
            return None  # turned by plotly, or unknown
        line = size if labels else 0.0
        needs.append(
            line + (AXIS_TITLE_BELOW + 0.85 * size if _title(axis) else TICK_PAD + (size * 0.2 if labels else 0))
        )
    need = max(needs) if needs else 0.0
    below = legend_below(layout, need)
    return below if below is not None else (need or None)


def label_overhang(layout: dict, x_labels: dict[str, list[str] | None]) -> float | None:
    """How far the last tick label of an x axis at the right edge reaches past it (a label is centred on its tick)."""
    size = _font_size(layout)
    halves = []
    for name, labels in x_labels.items():
        axis = layout[name]
        if axis.get("visible") is not False and float((axis.get("domain") or [0.0, 1.0])[1]) >= 0.99:
            halves.append(max([text_width(label, size) for label in labels or []] + [0]) / 2 + 3)
    return max(halves) if halves else None


def fitted_margins(spec: dict) -> dict:
    """The figure's margins (plotly JSON: data, layout), each side widened to the estimate where one is made."""
    data, layout = spec.get("data") or [], spec.get("layout") or {}
    margin = {**PLOTLY_MARGIN, **(layout.get("margin") or {})}
    x_labels = {
        name: axis_labels(axis, _on_axis(data, name, "x"), "x")
        for name, axis in layout.items()
        if name.startswith("xaxis") and isinstance(axis, dict)
    }
    rights = (legend_right(data, layout), colorbar_right(data, layout), label_overhang(layout, x_labels))
    right = max([w for w in rights if w is not None], default=None)
    for side, need in (("l", left_margin(data, layout)), ("r", right), ("b", bottom_margin(layout, x_labels))):
        if need is not None:
            margin[side] = max(math.ceil(need), int(margin.get(side, 0)))
    return margin
