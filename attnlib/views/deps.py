"""Dependency-head figures: accuracy of every head for one relation, and a sentence's gold vs predicted arcs."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.deps import ALL, DIRECTIONS, DepsResult
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.layers import MODEL_COLOURS

DIRECTION_TITLES = ("dep->head: the dependent attends to its head", "head<-dep: the head attends to its dependent")
GOLD_FOCUS, GOLD_OTHER, HIT, MISS = "#1f3b73", "#b8bec9", "#2a9d47", "#d1343b"


@notebook_figure
def head_accuracy_heatmaps(grid: np.ndarray, relation: str, best: tuple[int, int, int] | None = None) -> go.Figure:
    """Accuracy [L, H, 2] of every layer and head, one panel per direction; layers and heads labelled 1-based."""
    n_layers, n_heads, _ = grid.shape
    fig = make_subplots(rows=1, cols=2, subplot_titles=DIRECTION_TITLES, horizontal_spacing=0.08)
    layers = [str(layer) for layer in range(1, n_layers + 1)]
    heads = [str(head) for head in range(1, n_heads + 1)]
    zmax = float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0
    for d in range(2):
        fig.add_trace(
            go.Heatmap(
                z=grid[:, :, d] * 100,
                x=heads,
                y=layers,
                zmin=0,
                zmax=zmax * 100,
                colorscale="Viridis",
                colorbar=dict(title="accuracy %"),
                showscale=d == 1,
                hovertemplate="head %{y}-%{x} (layer-head): %{z:.1f}%<extra></extra>",
            ),
            row=1,
            col=d + 1,
        )
    if best is not None:
        layer, head, direction = best
        fig.add_trace(
            go.Scatter(
                x=[str(head + 1)],
                y=[str(layer + 1)],
                mode="markers",
                name="best head",
                marker=dict(symbol="square-open", size=22, color="#ff4b4b", line=dict(width=3)),
                hovertemplate=f"best: {layer + 1}-{head + 1}<extra></extra>",
            ),
            row=1,
            col=direction + 1,
        )
    fig.update_xaxes(title_text="head", type="category")
    fig.update_yaxes(title_text="layer", type="category", autorange="reversed")
    fig.update_layout(
        title=f"Accuracy of every head on '{relation}' (layers and heads numbered from 1)",
        height=160 + 34 * n_layers,
        showlegend=False,
        margin=dict(l=10, r=10, t=90, b=10),
    )
    return fig


def word_positions(words: Sequence[str]) -> np.ndarray:
    """x of each word's centre, spaced by word length so that the words do not overlap."""
    widths = np.array([max(len(w), 1) + 2.5 for w in words], dtype=float)
    return np.cumsum(widths) - widths / 2


def arc_levels(arcs: Sequence[tuple[int, int]]) -> list[int]:
    """Height level of each arc (word indices): one above the highest arc nested inside it, so arcs never cross at the top."""
    spans = [(min(a, b), max(a, b)) for a, b in arcs]
    levels = [0] * len(spans)
    for k in sorted(range(len(spans)), key=lambda k: spans[k][1] - spans[k][0]):
        lo, hi = spans[k]
        inner = [levels[j] for j, (a, b) in enumerate(spans) if j != k and lo <= a and b <= hi and (a, b) != (lo, hi)]
        levels[k] = 1 + max(inner, default=0)
    return levels


def _arc(start: float, end: float, height: float, points: int = 24) -> tuple[list[float], list[float]]:
    """A half-ellipse from start to end at the given height (negative: below the words)."""
    t = np.linspace(np.pi, 0, points) if end > start else np.linspace(0, np.pi, points)
    centre, radius = (start + end) / 2, abs(end - start) / 2
    return list(centre + radius * np.cos(t)), list(height * np.sin(t))


def _arc_trace(arcs: list[tuple[float, float, float]], color: str, name: str, width: float) -> go.Scatter:
    """One trace for many arcs (x of head, x of dependent, height), with an arrowhead at each dependent."""
    xs: list[float | None] = []
    ys: list[float | None] = []
    sizes: list[float] = []
    for head, dependent, height in arcs:
        x, y = _arc(head, dependent, height)
        xs += x + [None]
        ys += y + [None]
        sizes += [0] * (len(x) - 1) + [11, 0]
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines+markers",
        name=name,
        line=dict(color=color, width=width),
        marker=dict(symbol="arrow", size=sizes, angleref="previous", color=color),
        hoverinfo="skip",
        legendgroup=name,
        showlegend=bool(arcs),
    )


def _root_arrow(fig: go.Figure, x: float, y: float, tail_y: float, color: str, font: dict) -> None:
    """An arrow labelled "root" from (x, tail_y) to the word at (x, y): a word whose head is ROOT."""
    fig.add_annotation(
        x=x,
        y=y,
        ax=x,
        ay=tail_y,
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        text="root",
        showarrow=True,
        arrowhead=2,
        arrowcolor=color,
        font=font,
    )


@notebook_figure
def arc_diagram(
    words: Sequence[str],
    gold_heads: Sequence[int],
    gold_labels: Sequence[str],
    predicted_heads: Sequence[int] | np.ndarray,
    focus: Sequence[bool],
    title: str = "",
    predicts_root: bool = False,
    focus_name: str = "gold arc (chosen relation)",
) -> go.Figure:
    """Gold arcs above the words (focus relation dark), the head's predicted arcs below: green hits, red misses.

    Heads are 1-based (0 = root); predictions are drawn for the words marked in `focus`, none for -1. With
    predicts_root (a predictor that can choose ROOT, such as the probe), a predicted 0 is an arrow up from below.
    """
    m = len(words)
    x = word_positions(words)
    gold = [(h, i + 1) for i, h in enumerate(gold_heads) if h > 0]
    gold_levels = arc_levels(gold)
    predicted = [(int(p), i + 1) for i, p in enumerate(predicted_heads) if focus[i] and p > 0]
    predicted_levels = arc_levels(predicted)
    step = 1.0

    def placed(arcs, levels, sign):
        return [(x[h - 1], x[d - 1], sign * step * level) for (h, d), level in zip(arcs, levels)]

    gold_placed = placed(gold, gold_levels, 1)
    is_focus = [focus[d - 1] for _, d in gold]
    hit = [p == gold_heads[d - 1] for p, d in predicted]
    pred_placed = placed(predicted, predicted_levels, -1)
    fig = go.Figure()
    fig.add_trace(_arc_trace([a for a, f in zip(gold_placed, is_focus) if not f], GOLD_OTHER, "gold arc", 1.5))
    fig.add_trace(_arc_trace([a for a, f in zip(gold_placed, is_focus) if f], GOLD_FOCUS, focus_name, 2.5))
    fig.add_trace(_arc_trace([a for a, ok in zip(pred_placed, hit) if ok], HIT, "predicted: hit", 2.5))
    fig.add_trace(_arc_trace([a for a, ok in zip(pred_placed, hit) if not ok], MISS, "predicted: miss", 2.5))
    fig.add_trace(
        go.Scatter(
            x=[(a + b) / 2 for a, b, _ in gold_placed],
            y=[y for _, _, y in gold_placed],
            mode="text",
            text=[gold_labels[d - 1] for _, d in gold],
            textposition="top center",
            textfont=dict(size=10, color="#444"),
            showlegend=False,
            hoverinfo="skip",
        )
    )
    top = step * (max(gold_levels, default=0) + 1.2)
    low = -step * (max(predicted_levels, default=0) + (1.2 if predicts_root else 0.6))
    for i, h in enumerate(gold_heads):
        if h == 0:
            _root_arrow(fig, x[i], 0.25, top - 0.2, GOLD_OTHER, dict(size=10))
    if predicts_root:
        for i, p in enumerate(predicted_heads):
            if focus[i] and p == 0:
                color = HIT if gold_heads[i] == 0 else MISS
                _root_arrow(fig, x[i], -0.25, low + 0.2, color, dict(size=10, color=color))
    fig.add_trace(
        go.Scatter(
            x=list(x),
            y=[0] * m,
            mode="text",
            text=list(words),
            textfont=dict(size=14),
            customdata=[[i + 1, gold_heads[i], gold_labels[i], predicted_heads[i]] for i in range(m)],
            hovertemplate="%{text} (word %{customdata[0]}): gold head %{customdata[1]} (%{customdata[2]}), "
            "predicted %{customdata[3]}<extra></extra>",
            showlegend=False,
        )
    )
    fig.update_xaxes(visible=False, range=[0, float(x[-1] + x[0])])
    fig.update_yaxes(visible=False, range=[low, top])
    fig.update_layout(
        title=title,
        height=int(140 + 38 * (top - low)),
        legend=dict(orientation="h", y=-0.02),
        margin=dict(l=10, r=10, t=60, b=10),
        plot_bgcolor="white",
    )
    return fig


@notebook_figure
def best_head_bars(tables: Mapping[str, pd.DataFrame], title: str) -> go.Figure:
    """Best-head accuracy per relation for each model (one colour each), with its best-offset baseline as a mark."""
    fig = go.Figure()
    for m, (model, frame) in enumerate(tables.items()):
        colour = MODEL_COLOURS[m % len(MODEL_COLOURS)]
        heads = [
            f"{layer}-{head} {direction}"
            for layer, head, direction in zip(frame["layer"], frame["head"], frame["direction"])
        ]
        fig.add_trace(
            go.Bar(
                x=frame["relation"],
                y=frame["accuracy"],
                name=f"{model}: best head",
                marker_color=colour,
                offsetgroup=str(m),
                customdata=heads,
                hovertemplate="%{x}: %{y:.3f} (head %{customdata})<extra>" + html.escape(model) + "</extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=frame["relation"],
                y=frame["baseline_accuracy"],
                mode="markers",
                name=f"{model}: best offset",
                marker=dict(color=colour, symbol="line-ew-open", size=18, line=dict(width=3)),
                customdata=frame["baseline_offset"],
                hovertemplate="%{x}: %{y:.3f} (offset %{customdata:+d})<extra>" + html.escape(model) + "</extra>",
            )
        )
    fig.update_layout(
        title=title,
        barmode="group",
        height=420,
        yaxis=dict(title="accuracy", range=[0, 1]),
        margin=dict(l=10, r=10, t=60, b=10),
    )
    return fig


@draws(DepsResult, compared=True)
def deps_figures(results: Mapping[str, DepsResult]) -> list[go.Figure]:
    """Accuracy per relation (bars, baseline marks) of each model (model -> result); for one model also every head's
    accuracy on all relations."""
    figures = [
        best_head_bars(
            {model: next(iter(r.tables(model).values())) for model, r in results.items()},
            "Best head per relation against the best fixed offset",
        )
    ]
    if len(results) == 1:
        found = next(iter(results.values()))
        counts, table = found.counts, found.table
        best = next(((r.layer, r.head, DIRECTIONS.index(r.direction)) for r in table.rows if r.relation == ALL), None)
        if best is not None:
            figures.append(head_accuracy_heatmaps(counts.accuracy_grid("all"), "all", best))
    return figures
