"""Figures of value-weighted norms and their aggregation (Kobayashi et al. 2020 Fig. 2; GlobEnc); layers from 1."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.labels import CLASS_NAMES
from attnlib.analyses.norms import InputNorms
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.heatmap import attention_heatmap
from attnlib.views.layers import MARGIN, layer_axis_title, layer_line, per_layer_layout
from attnlib.views.positions import ATTENTION_COLOR, ATTRIBUTION_COLOR, compared_lines
from attnlib.views.special import (
    COLOURS,
    add_model_lines,
    layer_lines_by_model,
    layer_lines_with_head_dots,
    models_differ_in_depth,
)

MEASURE_NAMES = {
    "attention": "attention (mean over heads)",
    "layer_norm": "norm N",
    "residual_ln": "norm N_ResLN",
    "attention_rollout": "attention rollout",
    "residual_ln_rollout": "N_ResLN rollout (GlobEnc)",
    "attribution": "layer-output attribution",
}
MEASURE_COLOURS = {
    "attention": ATTENTION_COLOR,
    "layer_norm": "#2ca02c",
    "residual_ln": "#d62728",
    "attention_rollout": "#9467bd",
    "residual_ln_rollout": "#8c564b",
    "attribution": ATTRIBUTION_COLOR,
}

WEIGHTS_NORMS_TITLES = ["attention weights", "norms ||αf(x)||"]  # short: the two panels share half a page in the Tour


@notebook_figure
def weights_vs_norms_figure(
    weights: dict[str, np.ndarray], norms: dict[str, np.ndarray], title: str = "", names: dict[str, str] = CLASS_NAMES
) -> go.Figure:
    """Share per layer (mean over heads of [layers, heads]) of each token class: weights left, norms right (Kobayashi Fig. 2);
    names: each class's label (a decoder's first and end tokens)."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=WEIGHTS_NORMS_TITLES, horizontal_spacing=0.1)
    for col, per_head in enumerate((weights, norms), start=1):
        for key, name in names.items():
            line = dict(color=COLOURS[key], width=3, dash="solid" if col == 1 else "dash")
            trace = layer_line(np.nanmean(per_head[key], axis=1), name, legendgroup=key, showlegend=col == 1, line=line)
            fig.add_trace(trace, row=1, col=col)
    fig.update_xaxes(title_text="layer", dtick=1)
    fig.update_yaxes(title_text="share", range=[0, 1], row=1, col=1)
    fig.update_layout(title=title, height=420, margin=dict(MARGIN, t=70))
    return fig


@notebook_figure
def value_norm_figure(
    per_head: dict[str, np.ndarray],
    title: str = "Value norm ||f(x)|| by token class",
    names: dict[str, str] = CLASS_NAMES,
) -> go.Figure:
    """Mean ||f_h(x_j)|| per token class and layer, every head as a dot; per_head keys value_cls ... value_other."""
    renamed = {key: per_head[f"value_{key}"] for key in names}
    return layer_lines_with_head_dots(renamed, names, title, "||f(x)||", y_range=None)


@notebook_figure
def weights_vs_norms_by_model(
    per_model: dict[str, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]],
    title: str = "",
    names: dict[str, str] = CLASS_NAMES,
) -> go.Figure:
    """Two models overlaid: {model: (weights, norms)}, each {class: [layers, heads]}; one colour per model."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=WEIGHTS_NORMS_TITLES, horizontal_spacing=0.1)
    for part, col in ((0, 1), (1, 2)):
        stats = {model: {key: shares[part][key] for key in names} for model, shares in per_model.items()}
        add_model_lines(fig, stats, names, row=1, col=col, showlegend=col == 1)
    fig.update_xaxes(title_text=layer_axis_title(models_differ_in_depth(stats)))
    fig.update_yaxes(title_text="share", range=[0, 1], row=1, col=1)
    fig.update_layout(title=title, height=460, margin=dict(MARGIN, t=70))
    return fig


@notebook_figure
def value_norms_by_model(
    per_model: dict[str, dict[str, np.ndarray]],
    title: str = "Value norm ||f(x)|| by token class",
    names: dict[str, str] = CLASS_NAMES,
) -> go.Figure:
    """Two models' mean ||f_h(x_j)|| per token class and layer overlaid; per_model: {model: {value_cls: ...}}."""
    renamed = {model: {key: heads[f"value_{key}"] for key in names} for model, heads in per_model.items()}
    return layer_lines_by_model(renamed, names, title, "||f(x)||", y_range=None)


@notebook_figure
def agreement_figure(pearson: dict[str, np.ndarray], spearman: dict[str, np.ndarray], title: str = "") -> go.Figure:
    """Per-layer agreement with layer-output attribution: a line per measure, Spearman solid and Pearson dashed."""
    fig = go.Figure()
    for label, values_by_measure, dash in (("Spearman", spearman, "solid"), ("Pearson", pearson, "dash")):
        for measure, values in values_by_measure.items():
            line = dict(color=MEASURE_COLOURS[measure], dash=dash)
            fig.add_trace(layer_line(values, f"{MEASURE_NAMES[measure]} ({label})", legendgroup=measure, line=line))
    return per_layer_layout(fig, title, "correlation with layer-output attribution", 420, y_range=[-0.2, 1.05])


@notebook_figure
def measure_center_of_mass_figure(center_of_mass: dict[str, np.ndarray], title: str = "") -> go.Figure:
    """Centre of mass per layer of each measure, next to layer-output attribution's (thicker line)."""
    fig = go.Figure()
    for measure, values in center_of_mass.items():
        line = dict(color=MEASURE_COLOURS[measure], width=4 if measure == "attribution" else 2)
        fig.add_trace(layer_line(values, MEASURE_NAMES[measure], line=line))
    fig.add_hline(y=0, line_dash="dot", line_color="gray")
    return per_layer_layout(fig, title, "centre of mass (offset)", 400)


@notebook_figure
def agreement_comparison_figure(
    pearson: dict[str, dict[str, np.ndarray]], spearman: dict[str, dict[str, np.ndarray]], title: str = ""
) -> go.Figure:
    """Two models' agreement with their own layer-output attribution: a panel per measure, a colour per model.

    pearson, spearman: model -> measure -> [layers]; Spearman solid, Pearson dashed."""
    measures = next(iter(spearman.values()))
    return compared_lines(
        spearman,
        {m: MEASURE_NAMES[m] for m in measures},
        "correlation with attribution",
        dashed=pearson,
        styles=("Spearman", "Pearson"),
        title=title,
    )


@notebook_figure
def center_of_mass_comparison_figure(center_of_mass: dict[str, dict[str, np.ndarray]], title: str = "") -> go.Figure:
    """Two models' centres of mass per layer: a panel per measure and one for attribution, a colour per model."""
    measures = next(iter(center_of_mass.values()))
    return compared_lines(center_of_mass, {m: MEASURE_NAMES[m] for m in measures}, "centre of mass", title=title)


@draws(InputNorms)
def norms_figures(norms: InputNorms, model: str) -> list:
    """Both rollouts at the last layer (METHODS §12-13); cross-attention, which has none: its last layer's norms
    ||sum_h A f_h(x_j)|| (METHODS §11-12), target tokens to source tokens."""
    if norms.attention_rollout is None or norms.residual_ln_rollout is None:
        title = f"{model}: ‖Σ_h α f(x)‖, layer {len(norms.layer_norm)}"
        return [attention_heatmap(norms.layer_norm[-1], norms.tokens, norms.key_tokens, title)]
    return [
        attention_heatmap(norms.attention_rollout[-1], norms.tokens, norms.tokens, f"{model}: attention rollout"),
        attention_heatmap(
            norms.residual_ln_rollout[-1], norms.tokens, norms.tokens, f"{model}: residual+LayerNorm rollout"
        ),
    ]
