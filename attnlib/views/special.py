"""Figures of the special-tokens page (Clark et al. 2019, Fig. 2, 3, 4, 6); layers and heads labelled from 1."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.labels import NORM_NAMES, STAT_NAMES
from attnlib.analyses.special import SpecialTokens
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.layers import (
    MODEL_COLOURS,
    differ_in_depth,
    layer_axis_title,
    layer_line,
    layer_positions,
    model_lines,
    per_layer_layout,
)

COLOURS = {
    "cls": "#d62728",
    "sep": "#1f77b4",
    "punct": "#2ca02c",
    "other": "#7f7f7f",
    "prev": "#9467bd",
    "self": "#8c564b",
    "next": "#ff7f0e",
    "sep_to_sep": "#1f77b4",
    "rest_to_sep": "#17becf",
}
BEHAVIOUR_COLOURS = {
    "next": "#ff7f0e",
    "prev": "#9467bd",
    "broad": "#bcbd22",
    "[CLS]": "#d62728",
    "[SEP]": "#1f77b4",
    "punctuation": "#2ca02c",
    "other": "#c7c7c7",
}

SHARES = ("cls", "sep", "punct", "other")
NEARBY = ("prev", "self", "next")
TO_SEP = ("sep_to_sep", "rest_to_sep")
STAT_DASHES = ("solid", "dash", "dot", "dashdot")
STAT_SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def head_label(layer: int, head: int) -> str:
    """'layer-head', 1-based, from 0-based indices (Clark's notation)."""
    return f"{layer + 1}-{head + 1}"


def _head_labels(n_layers: int, n_heads: int) -> np.ndarray:
    return np.array([[head_label(l, h) for h in range(n_heads)] for l in range(n_layers)])


@notebook_figure
def layer_lines_with_head_dots(
    per_head: dict[str, np.ndarray],
    names: dict[str, str],
    title: str,
    y_title: str,
    y_range: Sequence[float] | None = (0, 1),
) -> go.Figure:
    """One line per statistic through the per-layer means over heads, with every head as a dot (Clark Fig. 2)."""
    fig = go.Figure()
    for i, (key, values) in enumerate(per_head.items()):
        n_layers, n_heads = values.shape
        layers = np.arange(1, n_layers + 1)
        colour = COLOURS.get(key)
        offset = (i - (len(per_head) - 1) / 2) * 0.06  # keep the dots of different series apart
        fig.add_trace(
            go.Scatter(
                x=np.repeat(layers, n_heads) + offset,
                y=values.ravel(),
                mode="markers",
                legendgroup=key,
                showlegend=False,
                marker=dict(color=colour, size=6, opacity=0.45),
                customdata=_head_labels(n_layers, n_heads).ravel(),
                name=names[key],
                hovertemplate=f"{names[key]}<br>head %{{customdata}}: %{{y:.3f}}<extra></extra>",
            )
        )
        with warnings.catch_warnings():  # a class that no input has (T5's and Marian's CLS): its layer line stays empty
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(values, axis=1)
        fig.add_trace(
            layer_line(mean, names[key], hover=f"{names[key]} mean", legendgroup=key, line=dict(color=colour, width=3))
        )
    fig.update_xaxes(title="layer", tickmode="linear", dtick=1)
    fig.update_yaxes(title=y_title, range=y_range)
    fig.update_layout(title=title, height=420, margin=dict(l=10, r=10, t=60, b=10), hovermode="closest")
    return fig


@notebook_figure
def head_heatmaps(
    per_head: dict[str, np.ndarray], names: dict[str, str], title: str, zmax: float | None = 1.0, cols: int = 2
) -> go.Figure:
    """A layer-by-head heatmap per statistic, on one colour scale."""
    keys = list(per_head)
    rows = -(-len(keys) // cols)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=[names[k] for k in keys],
        horizontal_spacing=0.06,
        vertical_spacing=0.12 if rows > 1 else 0.0,
    )
    top = zmax if zmax is not None else float(max(np.nanmax(v) for v in per_head.values()))
    for i, key in enumerate(keys):
        values = per_head[key]
        n_layers, n_heads = values.shape
        fig.add_trace(
            go.Heatmap(
                z=values,
                x=np.arange(1, n_heads + 1),
                y=np.arange(1, n_layers + 1),
                zmin=0,
                zmax=top,
                colorscale="Blues",
                showscale=i == 0,
                customdata=_head_labels(n_layers, n_heads),
                hovertemplate=f"{names[key]}<br>head %{{customdata}}: %{{z:.3f}}<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(tickmode="linear", dtick=1)
    fig.update_yaxes(tickmode="linear", dtick=1, autorange="reversed")
    for col in range(1, cols + 1):
        fig.update_xaxes(title="head", row=rows, col=col)
    for row in range(1, rows + 1):
        fig.update_yaxes(title="layer", row=row, col=1)
    fig.update_layout(title=title, height=300 * rows + 60, margin=dict(l=10, r=10, t=80, b=10))
    return fig


@notebook_figure
def entropy_figure(entropy: np.ndarray, cls_entropy: np.ndarray, uniform: float) -> go.Figure:
    """Mean row entropy per head, and the entropy of the [CLS] row, with uniform attention's ln n (Clark Fig. 4)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        subplot_titles=["all query rows", "[CLS] row (row 0)"],
        horizontal_spacing=0.05,
    )
    n_layers, n_heads = entropy.shape
    labels = _head_labels(n_layers, n_heads).ravel()
    layers = np.arange(1, n_layers + 1)
    for col, (values, colour) in enumerate([(entropy, "#1f77b4"), (cls_entropy, "#d62728")], start=1):
        fig.add_trace(
            go.Scatter(
                x=np.repeat(layers, n_heads),
                y=values.ravel(),
                mode="markers",
                customdata=labels,
                showlegend=False,
                marker=dict(color=colour, size=6, opacity=0.5),
                hovertemplate="head %{customdata}: %{y:.3f} nats<extra></extra>",
            ),
            row=1,
            col=col,
        )
        mean_line = layer_line(
            values.mean(axis=1), "mean over heads", showlegend=col == 1, line=dict(color="black", width=2)
        )
        fig.add_trace(mean_line, row=1, col=col)
        fig.add_trace(
            go.Scatter(
                x=[0.6, n_layers + 0.4],
                y=[uniform, uniform],
                mode="lines",
                showlegend=col == 1,
                name=f"uniform attention (mean ln n = {uniform:.2f})",
                line=dict(color="grey", dash="dash"),
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )
    fig.update_xaxes(title="layer", tickmode="linear", dtick=1)
    fig.update_yaxes(title="entropy (nats)", row=1, col=1, rangemode="tozero")
    fig.update_layout(
        title="Attention entropy per head",
        height=420,
        margin=dict(l=10, r=10, t=80, b=10),
        legend=dict(orientation="h", y=-0.2),
    )
    return fig


@notebook_figure
def head_map_figure(
    coords: np.ndarray, layers: np.ndarray, heads: np.ndarray, labels: Sequence[str] | np.ndarray
) -> go.Figure:
    """The heads embedded in 2-D by their JS distances, coloured by behaviour (Clark Fig. 6)."""
    fig = go.Figure()
    label_array = np.asarray(labels)
    for behaviour, colour in BEHAVIOUR_COLOURS.items():
        idx = np.flatnonzero(label_array == behaviour)
        if not len(idx):
            continue
        names = [head_label(int(l), int(h)) for l, h in zip(layers[idx], heads[idx])]
        fig.add_trace(
            go.Scatter(
                x=coords[idx, 0],
                y=coords[idx, 1],
                mode="markers",
                name=behaviour,
                text=names,
                marker=dict(color=colour, size=11, line=dict(color="white", width=1)),
                hovertemplate=f"head %{{text}}<br>{behaviour}<extra></extra>",
            )
        )
    fig.update_xaxes(showticklabels=False, zeroline=False, title="MDS 1")
    fig.update_yaxes(showticklabels=False, zeroline=False, title="MDS 2", scaleanchor="x")
    fig.update_layout(
        title="Map of the heads by Jensen-Shannon distance", height=560, margin=dict(l=10, r=10, t=60, b=10)
    )
    return fig


@notebook_figure
def gradient_figure(sep: np.ndarray, all_keys: np.ndarray) -> go.Figure:
    """Mean |dLoss/dA| per layer for attention to [SEP] and to all tokens (Clark Fig. 3)."""
    fig = go.Figure(
        [
            layer_line(sep, "to [SEP]", value_format=".3g", line=dict(color=COLOURS["sep"], width=3)),
            layer_line(all_keys, "to all tokens", value_format=".3g", line=dict(color="black", width=3, dash="dot")),
        ]
    )
    fig.update_yaxes(rangemode="tozero")
    return per_layer_layout(fig, "Gradient importance of attention", "mean |dLoss / d attention|", 400)


def add_model_lines(
    fig: go.Figure,
    per_model: dict[str, dict[str, np.ndarray]],
    names: dict[str, str],
    row: int | None = None,
    col: int | None = None,
    showlegend: bool = True,
) -> None:
    """Per-layer means over heads ({model: {key: [layers, heads]}}): one colour per model, one dash per statistic."""
    relative = models_differ_in_depth(per_model)
    for m, (model, stats) in enumerate(per_model.items()):
        for s, (key, values) in enumerate(stats.items()):
            name = f"{names[key]} ({model})"
            trace = layer_line(
                np.nanmean(values, axis=1),
                name,
                x=layer_positions(values.shape[0], relative),
                legendgroup=name,
                showlegend=showlegend,
                line=dict(color=MODEL_COLOURS[m % 2], width=3, dash=STAT_DASHES[s % 4]),
                marker=dict(symbol=STAT_SYMBOLS[s % 4], size=8),
            )
            fig.add_trace(trace, row=row, col=col)


def models_differ_in_depth(per_model: dict[str, dict[str, np.ndarray]]) -> bool:
    """Whether the models' statistics ({model: {key: [layers, ...]}}) need a relative-depth axis."""
    return differ_in_depth(v.shape[0] for stats in per_model.values() for v in stats.values())


@notebook_figure
def layer_lines_by_model(
    per_model: dict[str, dict[str, np.ndarray]],
    names: dict[str, str],
    title: str,
    y_title: str,
    y_range: Sequence[float] | None = (0, 1),
) -> go.Figure:
    """Two (or more) models' per-layer means overlaid on one axis ({model: {key: [layers, heads]}})."""
    fig = go.Figure()
    add_model_lines(fig, per_model, names)
    relative = models_differ_in_depth(per_model)
    fig.update_xaxes(title=layer_axis_title(relative), **({} if relative else dict(tickmode="linear", dtick=1)))
    fig.update_yaxes(title=y_title, range=y_range)
    fig.update_layout(title=title, height=460, margin=dict(l=10, r=10, t=60, b=10), legend=dict(font=dict(size=11)))
    return fig


def _by_keys(values: dict[str, np.ndarray], keys: Sequence[str]) -> dict[str, np.ndarray]:
    return {k: values[k] for k in keys}


@draws(SpecialTokens, compared=True)
def special_figures(results: Mapping[str, SpecialTokens]) -> list[go.Figure]:
    """Clark Fig. 2, 4, 6 of one model's special-tokens result (model -> result); of two, per-layer lines of both."""
    from attnlib.views.norms import value_norm_figure, weights_vs_norms_figure

    if len(results) > 1:
        layers = {m: r.special.layers for m, r in results.items()}
        norms = {m: r.norms.layers for m, r in results.items() if r.norms is not None}
        return [
            model_lines(
                {m: _by_keys(v, SHARES + NEARBY) for m, v in layers.items()},
                STAT_NAMES,
                "Share of attention per layer (mean over heads)",
                "share",
                cols=4,
            ),
            model_lines(
                {m: _by_keys(v, TO_SEP + ("entropy", "cls_entropy")) for m, v in layers.items()},
                STAT_NAMES,
                "[SEP] as a no-op, and entropy",
                "value",
                cols=4,
                shared_y=False,
            ),
            model_lines(
                norms,
                NORM_NAMES,
                "Value-weighted norm shares and value norms ||f(x)|| per layer (mean over heads)",
                "value",
                cols=4,
                shared_y=False,
            ),
        ]
    found = next(iter(results.values()))
    stats, hm, norms_found = found.special, found.head_map, found.norms
    figures = [
        layer_lines_with_head_dots(_by_keys(stats.heads, SHARES), STAT_NAMES, "Share of attention per layer", "share"),
        layer_lines_with_head_dots(_by_keys(stats.heads, NEARBY), STAT_NAMES, "Attention to nearby tokens", "share"),
        layer_lines_with_head_dots(_by_keys(stats.heads, TO_SEP), STAT_NAMES, "Attention to [SEP]", "mass to [SEP]"),
        entropy_figure(stats.heads["entropy"], stats.heads["cls_entropy"], stats.uniform_entropy),
    ]
    if hm is not None:
        figures.append(head_map_figure(hm.coords, hm.layer, hm.head, hm.labels))
    if norms_found is None:  # a notebook's run without norms=True (the report always has them)
        return figures
    return figures + [
        weights_vs_norms_figure(
            stats.heads, norms_found.heads, "Attention weights vs value-weighted norms per token class"
        ),
        value_norm_figure(norms_found.heads),
    ]
