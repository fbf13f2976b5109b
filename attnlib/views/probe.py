"""Attention probe figures: every head's learned weight, UAS per relation against the best head, a test sentence."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.probe import ProbeResult
from attnlib.views.deps import DIRECTION_TITLES, arc_diagram
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.layers import MODEL_COLOURS

SERIES = (("uas", "probe", "#1f3b73"), ("best_head_accuracy", "best single head", "#2a9d47"))
BASELINE = ("baseline_accuracy", "best fixed offset", "#b8bec9")


@notebook_figure
def weight_heatmaps(grid: np.ndarray, title: str = "Learned weight of every head") -> go.Figure:
    """Weights [L, H, 2] (direction last, 0 = dep->head) as two layer x head panels, 0 white, layers and heads 1-based."""
    n_layers, n_heads, _ = grid.shape
    fig = make_subplots(rows=1, cols=2, subplot_titles=DIRECTION_TITLES, horizontal_spacing=0.08)
    bound = float(np.abs(grid).max()) or 1.0
    layers = [str(layer) for layer in range(1, n_layers + 1)]
    heads = [str(head) for head in range(1, n_heads + 1)]
    for d in range(2):
        fig.add_trace(
            go.Heatmap(
                z=grid[:, :, d],
                x=heads,
                y=layers,
                zmin=-bound,
                zmax=bound,
                colorscale="RdBu",
                reversescale=True,
                colorbar=dict(title="weight"),
                showscale=d == 1,
                hovertemplate="head %{y}-%{x} (layer-head): weight %{z:.3f}<extra></extra>",
            ),
            row=1,
            col=d + 1,
        )
    fig.update_xaxes(title_text="head", type="category")
    fig.update_yaxes(title_text="layer", type="category", autorange="reversed")
    fig.update_layout(title=title, height=160 + 34 * n_layers, showlegend=False, margin=dict(l=10, r=10, t=90, b=10))
    return fig


@notebook_figure
def relation_bars(
    uas_by_relation: Mapping[str, Mapping[str, float]], min_count: int = 1, max_relations: int = 20
) -> go.Figure:
    """UAS of the probe, the best single head and the best fixed offset per relation (percent), most frequent first."""
    rows = [(r, v) for r, v in uas_by_relation.items() if v["count"] >= min_count][:max_relations]
    labels = [f"{r} ({int(v['count'])})" for r, v in rows]
    fig = go.Figure()
    for key, name, color in (*SERIES, BASELINE):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[100 * v[key] for _, v in rows],
                name=name,
                marker_color=color,
                hovertemplate="%{x}: %{y:.1f}%<extra>" + name + "</extra>",
            )
        )
    fig.update_layout(
        barmode="group",
        title="Accuracy per relation (dependents in brackets; punctuation excluded)",
        yaxis=dict(title="correct heads %", range=[0, 100]),
        legend=dict(orientation="h", y=1.08),
        height=420,
        margin=dict(l=10, r=10, t=90, b=10),
    )
    return fig


@notebook_figure
def probe_sentence(
    words: Sequence[str],
    heads: Sequence[int],
    deprels: Sequence[str],
    predicted: Sequence[int],
    title: str = "",
    excluded: str = "punct",
) -> go.Figure:
    """Gold arcs above, the probe's predictions below (green right, red wrong, ROOT from below); punctuation unscored."""
    scored = [r != excluded for r in deprels]
    return arc_diagram(
        words, heads, deprels, predicted, scored, title, predicts_root=True, focus_name="gold arc (scored word)"
    )


@draws(ProbeResult, compared=True)
def probe_figures(results: Mapping[str, ProbeResult]) -> list[go.Figure]:
    """Each model's learned head weights (model -> result); UAS per relation (one model: against best head and
    offset; two: both UAS)."""
    figures = [
        weight_heatmaps(r.weight_grid(), f"{model}: learned weight of every head") for model, r in results.items()
    ]
    if len(results) == 1:
        return figures + [relation_bars(next(iter(results.values())).uas_by_relation)]
    fig = go.Figure()
    for m, (model, r) in enumerate(results.items()):
        by_relation = r.uas_by_relation
        fig.add_trace(
            go.Bar(
                x=list(by_relation),
                y=[v["uas"] for v in by_relation.values()],
                name=model,
                marker_color=MODEL_COLOURS[m % len(MODEL_COLOURS)],
                hovertemplate="%{x}: %{y:.3f}<extra>" + html.escape(model) + "</extra>",
            )
        )
    fig.update_layout(
        title="Probe UAS per relation", barmode="group", height=420, yaxis=dict(title="UAS", range=[0, 1])
    )
    return figures + [fig]
