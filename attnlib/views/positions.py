"""Figures of the local-versus-global page: relative-position histograms, centres of mass, correlations, one example."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.positions import CORRELATIONS, PositionsResult
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

ATTENTION_COLOR = "#1f77b4"
ATTRIBUTION_COLOR = "#ff7f0e"
PREVIOUS_COLOR = "#2ca02c"


def _window(offsets: np.ndarray, max_offset: int) -> np.ndarray:
    """Which offsets lie within +-max_offset."""
    return np.abs(offsets) <= max_offset


@notebook_figure
def position_histograms(
    offsets: np.ndarray,
    attention: np.ndarray,
    attribution: np.ndarray | None,
    titles: Sequence[str],
    max_offset: int = 10,
    columns: int = 4,
    title: str = "",
    names: tuple[str, str] = ("attention", "input contribution (HTA)"),
    windows: Sequence[int | None] = (),
    attribution_errors: np.ndarray | None = None,
) -> go.Figure:
    """A grid of histograms over relative position, attention and input contribution side by side in each panel.

    attention, attribution: [panels, offsets] (attribution None: attention alone); all panels share the x and y axes;
    `names` labels the two series. `attribution_errors` ([panels, offsets], from sampled rows: METHODS §19) draws
    +-1 standard error on the input-contribution bars.
    `windows` (per panel, a local layer's half-width or None): a local panel's attention stops at +-w, where dotted
    lines mark the window, and its title says so.
    """
    keep = _window(offsets, max_offset)
    x = offsets[keep]
    series: list[tuple[np.ndarray, str, str, np.ndarray | None]] = [(attention, names[0], ATTENTION_COLOR, None)]
    series += [] if attribution is None else [(attribution, names[1], ATTRIBUTION_COLOR, attribution_errors)]
    panels = len(titles)
    columns = max(1, min(columns, panels))  # a model with fewer layers than columns: no empty column
    windows = [windows[p] if p < len(windows) else None for p in range(panels)]
    titles = [t if w is None else f"{t} (local ±{w})" for t, w in zip(titles, windows)]
    rows = math.ceil(panels / columns)
    fig = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=list(titles),
        shared_xaxes="all",
        shared_yaxes="all",
        horizontal_spacing=0.03,
        vertical_spacing=0.4 / max(rows, 1) if rows > 1 else 0.1,
    )
    for p in range(panels):
        r, c = divmod(p, columns)
        w = windows[p]
        outside = np.zeros(len(x), bool) if w is None else np.abs(x) > w
        for values, name, color, errors in series:
            y = np.asarray(values[p][keep], dtype=np.float64)
            if name == names[0] and w is not None:
                y = np.where(outside, np.nan, y)  # a local layer's attention has no weight beyond its window
            error = None if errors is None else np.asarray(errors[p][keep], dtype=np.float64)
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=y,
                    name=name,
                    marker_color=color,
                    legendgroup=name,
                    error_y=None if error is None else dict(type="data", array=error, visible=True, thickness=1),
                    customdata=error,
                    hovertemplate=f"{name}<br>offset %{{x}}: %{{y:.3f}}"
                    + ("" if error is None else " ± %{customdata:.3f}")
                    + "<extra></extra>",
                ),
                row=r + 1,
                col=c + 1,
            )
        if w is not None and w < max_offset:
            for edge in (-w - 0.5, w + 0.5):
                fig.add_vline(x=edge, line_dash="dot", line_color="#9467bd", line_width=1, row=r + 1, col=c + 1)
    # A colour key in the title instead of a legend, which themes place over the top row's panel titles.
    key = "   ".join(f"<span style='color:{color}'>■</span> {name}" for _, name, color, _ in series)
    if attribution_errors is not None and attribution is not None:
        key += "   (bars: ±1 standard error of the sampled rows)"
    fig.update_layout(
        title=f"{title}<br><sup>{key}</sup>" if title else key,
        barmode="group",
        bargap=0.1,
        showlegend=False,
        height=170 * rows + 140,
        margin=dict(l=10, r=10, t=90, b=40),
    )
    fig.update_xaxes(title_text="offset (key - query)", row=rows, dtick=max(1, max_offset // 5))
    return fig


@notebook_figure
def center_of_mass_chart(attention: np.ndarray, attribution: np.ndarray | None, title: str = "") -> go.Figure:
    """Centre of mass per layer (mean over heads) for attention and for input contribution (Pascual Fig. 4, 5; None:
    attention alone)."""
    fig = go.Figure()
    series = [(attention, "attention", ATTENTION_COLOR)]
    series += [] if attribution is None else [(attribution, "input contribution (HTA)", ATTRIBUTION_COLOR)]
    for values, name, color in series:
        fig.add_trace(layer_line(values, name, marker_color=color))
    fig.add_hline(y=0, line_dash="dot", line_color="gray")
    return per_layer_layout(fig, title, "centre of mass (offset)", 380)


@notebook_figure
def correlation_heatmaps(pearson: np.ndarray, spearman: np.ndarray, title: str = "") -> go.Figure:
    """Pearson and Spearman per head ([layers, heads]) as two heatmaps (x = layer, y = head), 1-based labels."""
    n_layers, n_heads = pearson.shape
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Pearson", "Spearman"], horizontal_spacing=0.08)
    for col, values in enumerate((pearson, spearman), start=1):
        fig.add_trace(
            go.Heatmap(
                z=values.T,
                x=list(range(1, n_layers + 1)),
                y=list(range(1, n_heads + 1)),
                zmin=-1,
                zmax=1,
                colorscale="RdBu",
                reversescale=False,
                showscale=col == 2,
                texttemplate="%{z:.2f}",
                textfont=dict(size=9),
                hovertemplate="layer %{x}, head %{y}: %{z:.3f}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    fig.update_xaxes(title_text="layer", dtick=1)
    fig.update_yaxes(title_text="head", dtick=1, autorange="reversed")
    fig.update_layout(title=title, height=120 + 26 * n_heads, margin=dict(l=10, r=10, t=70, b=40))
    return fig


@notebook_figure
def median_correlation_chart(medians: dict[str, np.ndarray], title: str = "") -> go.Figure:
    """Per-layer median over heads of each correlation (one line each)."""
    fig = go.Figure()
    for name, values in medians.items():
        dash = "dash" if name.startswith("spearman") else "solid"
        color = PREVIOUS_COLOR if name.endswith("previous") else ATTRIBUTION_COLOR
        fig.add_trace(layer_line(values, name.replace("_", " "), hover=name, line=dict(dash=dash, color=color)))
    return per_layer_layout(fig, title, "median over heads", 360, y_range=[-0.1, 1.05])


@notebook_figure
def example_rows_chart(
    tokens: Sequence[str],
    attention: np.ndarray,
    input_contribution: np.ndarray,
    previous: np.ndarray | None = None,
    title: str = "",
) -> go.Figure:
    """One query's attention row beside its attribution rows, over the input tokens."""
    x = list(range(len(tokens)))
    fig = go.Figure()
    series = [
        (attention, "attention", ATTENTION_COLOR),
        (input_contribution, "input contribution (HTA)", ATTRIBUTION_COLOR),
    ]
    if previous is not None:
        series.append((previous, "previous-layer contribution (HTA)", PREVIOUS_COLOR))
    for values, name, color in series:
        fig.add_trace(
            go.Bar(
                x=x,
                y=values,
                name=name,
                marker_color=color,
                customdata=list(tokens),
                hovertemplate=f"{name}<br>%{{customdata}}: %{{y:.3f}}<extra></extra>",
            )
        )
    fig.update_layout(
        title=title,
        barmode="group",
        height=380,
        margin=dict(l=10, r=10, t=60, b=80),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0),
        yaxis_title="share of the row",
    )
    fig.update_xaxes(tickmode="array", tickvals=x, ticktext=list(tokens), tickangle=-60)
    return fig


@notebook_figure
def compared_lines(
    solid: dict[str, dict[str, np.ndarray]],
    titles: dict[str, str],
    y_title: str,
    dashed: dict[str, dict[str, np.ndarray]] | None = None,
    styles: tuple[str, str] = ("", ""),
    title: str = "",
    columns: int = 3,
) -> go.Figure:
    """A panel per statistic (titles: key -> panel title) with a line per model in its colour, same axes.

    solid, dashed: model -> key -> [layers]; `styles` names the solid and dashed lines in the legend. When the models
    differ in depth the x axis is the relative depth l / n_layers."""
    models = list(solid)
    relative = differ_in_depth(len(next(iter(solid[m].values()))) for m in models)
    rows = math.ceil(len(titles) / columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=list(titles.values()), shared_yaxes="all")
    for k, key in enumerate(titles):
        r, c = divmod(k, columns)
        for i, model in enumerate(models):
            for part, dash, style in ((solid, "solid", styles[0]), (dashed, "dash", styles[1])):
                if part is None or key not in part[model]:
                    continue
                values = part[model][key]
                name = f"{model} {style}".strip()
                trace = layer_line(
                    values,
                    name,
                    hover=f"{name}<br>{titles[key]}",
                    x=layer_positions(len(values), relative),
                    legendgroup=name,
                    showlegend=k == 0,
                    line=dict(color=MODEL_COLOURS[i % 2], dash=dash),
                )
                fig.add_trace(trace, row=r + 1, col=c + 1)
    fig.update_xaxes(title_text=layer_axis_title(relative), row=rows)
    fig.update_yaxes(title_text=y_title, col=1)
    fig.update_layout(
        title=title,
        height=260 * rows + 120,
        margin=dict(l=10, r=10, t=80, b=40),
        legend=dict(orientation="h", y=-0.15, yanchor="top", x=0),
    )
    return fig


@notebook_figure
def compared_heatmaps(by_model: dict[str, np.ndarray], title: str = "", zmin: float = -1, zmax: float = 1) -> go.Figure:
    """Per-head maps ([layers, heads] each) of the models side by side; panel widths follow the number of layers."""
    models = list(by_model)
    depths = [by_model[m].shape[0] for m in models]
    fig = make_subplots(rows=1, cols=len(models), subplot_titles=models, column_widths=depths, horizontal_spacing=0.08)
    for i, model in enumerate(models):
        values = by_model[model]
        fig.add_trace(
            go.Heatmap(
                z=values.T,
                x=list(range(1, values.shape[0] + 1)),
                y=list(range(1, values.shape[1] + 1)),
                zmin=zmin,
                zmax=zmax,
                colorscale="RdBu",
                showscale=i == len(models) - 1,
                texttemplate="%{z:.2f}",
                textfont=dict(size=9),
                hovertemplate=f"{model}<br>layer %{{x}}, head %{{y}}: %{{z:.3f}}<extra></extra>",
            ),
            row=1,
            col=i + 1,
        )
    fig.update_xaxes(title_text="layer", dtick=1)
    fig.update_yaxes(title_text="head", dtick=1, autorange="reversed")
    n_heads = max(v.shape[1] for v in by_model.values())
    fig.update_layout(title=title, height=120 + 26 * n_heads, margin=dict(l=10, r=10, t=70, b=40))
    return fig


@draws(PositionsResult, compared=True)
def positions_figures(results: Mapping[str, PositionsResult]) -> list[go.Figure]:
    """Pascual Fig. 2-6 of one model's result (model -> result); for two, centres of mass and median correlations of
    both."""
    medians = {name: f"median {name.replace('_', ' ')}" for name in CORRELATIONS}
    if len(results) > 1:
        com = {"attention": "attention", "attribution": "input contribution (HTA)"}
        return [
            model_lines(
                {
                    model: {"attention": r.attention_center_of_mass, "attribution": r.attribution_center_of_mass}
                    for model, r in results.items()
                },
                com,
                "Centre of mass per layer (mean over heads)",
                "offset",
                cols=2,
            ),
            model_lines(
                {model: {n: r.median_correlation(n) for n in CORRELATIONS} for model, r in results.items()},
                medians,
                "Attention vs attribution: median correlation over the heads of each layer",
                "correlation",
                cols=4,
            ),
        ]
    r = next(iter(results.values()))
    n_layers = r.attention_histograms.shape[0]
    max_offset = max(1, min(10, int(r.offsets.max()) if len(r.offsets) else 1))
    return [
        center_of_mass_chart(r.attention_center_of_mass, r.attribution_center_of_mass, "Centre of mass per layer"),
        position_histograms(
            r.offsets,
            r.attention_histograms.mean(1),
            r.attribution_histograms.mean(1),
            [f"layer {l + 1}" for l in range(n_layers)],
            max_offset=max_offset,
            columns=min(n_layers, 3),
            title="Relative-position histograms per layer (mean over heads)",
        ),
        correlation_heatmaps(
            r.correlation["pearson_previous"],
            r.correlation["spearman_previous"],
            "Attention vs previous-layer contribution (local)",
        ),
        correlation_heatmaps(
            r.correlation["pearson_input"], r.correlation["spearman_input"], "Attention vs input contribution (global)"
        ),
        median_correlation_chart({n: r.median_correlation(n) for n in CORRELATIONS}, "Median over each layer's heads"),
    ]
