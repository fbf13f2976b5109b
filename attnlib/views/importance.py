"""Figures of head importance (METHODS §15): a layer-by-head heatmap of an effect, the no-op scatter of the
[CLS]+[SEP] share against each change's effect, and the pruning curve. Layers and heads are numbered from 1."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from attnlib.analyses.importance import HeadImportance
from attnlib.views.canvas_html import head_color
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.special import head_label

CHANGE_NAMES = {"ablate": "ablation", "drop": "[CLS]/[SEP] dropped", "renormalise": "renormalised without them"}
MEASURE_NAMES = {
    "embedding": "1 − cos of the sentence embedding",
    "hidden": "relative change of the last hidden states",
    "mlm": "change of the masked-LM loss",
}
# a decoder's (METHODS §18): knockouts of the first token (and the end token), the next-token loss, the sink test
DECODER_CHANGE_NAMES = {**CHANGE_NAMES, "drop": "first token dropped"}
DECODER_MEASURE_NAMES = {**MEASURE_NAMES, "mlm": "change of the next-token loss"}


def change_names(causal: bool) -> dict[str, str]:
    """The changes' names for an encoder, or for a decoder (causal)."""
    return DECODER_CHANGE_NAMES if causal else CHANGE_NAMES


def measure_names(causal: bool) -> dict[str, str]:
    """The measures' names for an encoder, or for a decoder (causal)."""
    return DECODER_MEASURE_NAMES if causal else MEASURE_NAMES


def share_title(causal: bool) -> str:
    """What special_share is: the CLS+SEP share (§2), or a decoder's first_share (§18)."""
    return "Share of attention to the first token (first_share)" if causal else "Share of attention to [CLS] and [SEP]"


def _labels(n_layers: int, n_heads: int) -> np.ndarray:
    return np.array([[head_label(l, h) for h in range(n_heads)] for l in range(n_layers)])


@notebook_figure
def effect_heatmap(values: np.ndarray, title: str, what: str, height: int = 330) -> go.Figure:
    """One [layers, heads] statistic as a heatmap (layer 1 on top); a diverging scale when it has negative values."""
    n_layers, n_heads = values.shape
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    signed = low < 0
    top = max(abs(low), abs(high)) if signed else high
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=np.arange(1, n_heads + 1),
            y=np.arange(1, n_layers + 1),
            zmin=-top if signed else min(low, 0.0),
            zmax=top if top > 0 else 1.0,
            colorscale="RdBu_r" if signed else "Blues",
            customdata=_labels(n_layers, n_heads),
            colorbar={"title": {"text": what, "side": "right"}, "thickness": 12},
            hovertemplate="head %{customdata}: %{z:.4g}<extra></extra>",
        )
    )
    fig.update_xaxes(title="head", tickmode="linear", dtick=1)
    fig.update_yaxes(title="layer", tickmode="linear", dtick=1, autorange="reversed")
    fig.update_layout(title=title, height=height, margin=dict(l=10, r=10, t=60, b=10))
    return fig


@notebook_figure
def no_op_scatter(
    share: np.ndarray, effects: Mapping[str, np.ndarray], rho: Mapping[str, float], measure: str, causal: bool = False
) -> go.Figure:
    """Each head's [CLS]+[SEP] share (a decoder's first_share: the sink test) (x) against its effect under each
    change (y, one colour per change), with Spearman's rho over all heads in the legend."""
    names = change_names(causal)
    n_layers, n_heads = share.shape
    labels = _labels(n_layers, n_heads).ravel()
    fig = go.Figure()
    for k, (change, effect) in enumerate(effects.items()):
        r = rho.get(change, float("nan"))
        fig.add_trace(
            go.Scatter(
                x=share.ravel(),
                y=effect.ravel(),
                mode="markers",
                name=f"{names[change]} (ρ = {r:.2f})" if np.isfinite(r) else names[change],
                marker={"color": head_color(k), "size": 8, "opacity": 0.8},
                customdata=labels,
                hovertemplate="head %{customdata}<br>share %{x:.3f}<br>effect %{y:.4g}<extra></extra>",
            )
        )
    shared = (
        "first_share: attention to the first token (§18)" if causal else "share of attention to [CLS] and [SEP] (§2)"
    )
    fig.update_xaxes(title=shared)
    fig.update_yaxes(title=measure_names(causal).get(measure, measure))
    fig.update_layout(
        title="Is the attention sink a no-op? first_share against effect, every head"
        if causal
        else "Does attention to [CLS]/[SEP] matter? Share against effect, every head",
        height=440,
        legend={"orientation": "h", "y": -0.2},
        margin=dict(l=10, r=10, t=60, b=10),
    )
    return fig


@notebook_figure
def pruning_figure(
    curves: Mapping[str, tuple[list[int], np.ndarray]], n_heads: Mapping[str, int], measure: str
) -> go.Figure:
    """The measure after removing each tenth of the heads, least important first; one line per model
    ({model: (heads removed, effect)}), the x axis the fraction of heads removed."""
    fig = go.Figure()
    for k, (model, (removed, effect)) in enumerate(curves.items()):
        total = n_heads[model]
        fig.add_trace(
            go.Scatter(
                x=[0.0] + [r / total for r in removed],
                y=[0.0, *np.asarray(effect, float)],
                mode="lines+markers",
                name=model,
                line={"color": head_color(k)},
                customdata=[0, *removed],
                hovertemplate="%{customdata} heads removed<br>effect %{y:.4g}<extra></extra>",
            )
        )
    fig.update_xaxes(title="fraction of heads removed (least important first)", tickformat=".0%", range=[0, 1.02])
    fig.update_yaxes(title=MEASURE_NAMES.get(measure, measure))
    fig.update_layout(title="Pruning curve", height=420, legend={"orientation": "h", "y": -0.2},
                      margin=dict(l=10, r=10, t=60, b=10))  # fmt: skip
    return fig


@draws(HeadImportance, compared=True)
def importance_figures(results: Mapping[str, HeadImportance]) -> list[go.Figure]:
    """Per model (model -> result): the single-head ablation effect per head and the no-op scatter; the pruning curves
    together."""
    figures = []
    for model, result in results.items():
        effect = result.effect("ablate", "embedding")
        assert effect is not None  # every encoder has the embedding measure
        figures.append(effect_heatmap(effect, f"{model}: effect of switching each head off", "1 − cos"))
        effects = {c: e for c in ("ablate", "drop", "renormalise") if (e := result.effect(c, "embedding")) is not None}
        test = result.no_op("embedding")
        figures.append(no_op_scatter(result.special_share, effects, test.overall, "embedding", result.causal))
    curves = {model: r.pruning["embedding"] for model, r in results.items() if r.pruning}
    if curves:
        drawn = {m: (c.removed, c.effect) for m, c in curves.items()}
        figures.append(
            pruning_figure(drawn, {model: r.special_share.size for model, r in results.items()}, "embedding")
        )
    return figures
