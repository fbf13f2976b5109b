"""Figures of activation patching and composition (METHODS §22): every head's score, the heads x positions and
layers x positions grids, attribution patching beside the exact scores with their correlation, a pair file's means
with standard-error bars, and each kind of composition as a sender x receiver heatmap. Layers and heads from 1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnlib.analyses.compose import CompositionResult
from attnlib.analyses.patch import PatchResult
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.heatmap import attention_heatmap
from attnlib.views.importance import effect_heatmap
from attnlib.views.inputs import prettified
from attnlib.views.special import head_label

PART_TITLES = {"encoder": "", "decoder": " (decoder self-attention)", "cross": " (cross-attention)"}
DIRECTION_WORDS = {"denoise": "denoising: clean value into the corrupted run",
                   "noise": "noising: corrupted value into the clean run"}  # fmt: skip


def _head_labels(n_layers: int, n_heads: int) -> list[str]:
    return [head_label(l, h) for l in range(n_layers) for h in range(n_heads)]


@notebook_figure
def signed_grid(values: np.ndarray, rows: Sequence[str], columns: Sequence[str], title: str,
                row_title: str, column_title: str) -> go.Figure:  # fmt: skip
    """A grid of scores that may be negative, on a diverging scale centred on 0."""
    values = np.asarray(values, float)
    finite = values[np.isfinite(values)]
    top = float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=list(range(len(columns))),
            y=list(range(len(rows))),
            zmin=-top,
            zmax=top,
            colorscale="RdBu_r",
            customdata=np.dstack(np.meshgrid(list(columns), list(rows))),
            hovertemplate="%{customdata[1]}, %{customdata[0]}: %{z:.3f}<extra></extra>",
            colorbar={"title": {"text": "score", "side": "right"}, "thickness": 12},
        )
    )
    fig.update_xaxes(title=column_title, tickmode="array", tickvals=list(range(len(columns))), ticktext=list(columns),
                     tickangle=-60, tickfont={"size": 10})  # fmt: skip
    fig.update_yaxes(title=row_title, tickmode="array", tickvals=list(range(len(rows))), ticktext=list(rows),
                     autorange="reversed", tickfont={"size": 10})  # fmt: skip
    height = min(1200, max(280, 140 + 18 * len(rows)))  # a few rows (the layers of a small model) stay readable
    fig.update_layout(title=title, height=height, margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return fig


@notebook_figure
def attribution_scatter(exact: np.ndarray, estimate: np.ndarray, r: float | None) -> go.Figure:
    """Each head's attribution-patching estimate (y) against its exact score (x), with the line y = x and Pearson's r."""
    exact, estimate = np.ravel(exact).astype(float), np.ravel(estimate).astype(float)
    low = float(min(exact.min(), estimate.min(), 0.0))
    high = float(max(exact.max(), estimate.max(), 0.0))
    fig = go.Figure(
        [
            go.Scatter(
                x=[low, high],
                y=[low, high],
                mode="lines",
                line={"dash": "dash", "color": "#999"},
                name="y = x",
                hoverinfo="skip",
            ),
            go.Scatter(
                x=exact,
                y=estimate,
                mode="markers",
                name="heads",
                text=None,
                hovertemplate="exact %{x:.3f}, estimate %{y:.3f}<extra></extra>",
            ),
        ]
    )
    said = "" if r is None or not np.isfinite(r) else f" (Pearson r = {r:.3f})"
    fig.update_xaxes(title="exact activation patching score")
    fig.update_yaxes(title="attribution patching estimate")
    fig.update_layout(title=f"Attribution patching against the exact scores{said}", height=420,
                      margin={"l": 10, "r": 10, "t": 60, "b": 10})  # fmt: skip
    return fig


@notebook_figure
def mean_bars(means: np.ndarray, errors: np.ndarray, n_pairs: int, title: str) -> go.Figure:
    """Every head's mean score over the pairs with its standard error as bars, in layer and head order."""
    n_layers, n_heads = means.shape
    fig = go.Figure(
        go.Bar(
            x=_head_labels(n_layers, n_heads),
            y=np.ravel(means),
            error_y={"type": "data", "array": np.nan_to_num(np.ravel(errors)), "visible": True},
            hovertemplate="head %{x}: %{y:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title="head (layer-head)", tickangle=-60)
    fig.update_yaxes(title=f"mean score over {n_pairs} pairs (± s.e.)")
    fig.update_layout(title=title, height=400, margin={"l": 10, "r": 10, "t": 60, "b": 10})
    return fig


@draws(PatchResult)
def patch_figures(result: PatchResult, model: str) -> list:
    """Heads heatmaps (or the pair file's means with error bars), the grids asked for, attribution beside the exact."""
    how = DIRECTION_WORDS.get(result.direction, result.direction)
    figures = []
    for part, table in result.heads.items():
        title = f"{model}: activation patching of every head{PART_TITLES[part]} ({how})"
        if result.pairs is not None:
            figures.append(effect_heatmap(table, f"{title}, mean of {result.pairs} pairs", "mean score"))
            figures.append(mean_bars(table, result.heads_se[part], result.pairs, title))
        else:
            figures.append(effect_heatmap(table, title, "score"))
    tokens = prettified((result.clean or {}).get("tokens", []))  # as readers expect them (no byte-level 'Ġ')
    for part, grid in (result.heads_positions or {}).items():
        L, H, n = grid.shape
        columns = [f"{q}: {tokens[q]}" if part == "encoder" and q < len(tokens) else str(q) for q in range(n)]
        figures.append(signed_grid(grid.reshape(L * H, n), _head_labels(L, H), columns,
                                   f"{model}: every head at one position{PART_TITLES[part]} ({how})", "head",
                                   "position"))  # fmt: skip
    if result.residual is not None:
        L, n = result.residual.shape
        columns = [f"{q}: {tokens[q]}" if q < len(tokens) else str(q) for q in range(n)]
        figures.append(signed_grid(result.residual, [str(l + 1) for l in range(L)], columns,
                                   f"{model}: the residual stream patched at each layer's input and position ({how})",
                                   "layer", "position"))  # fmt: skip
    if result.attribution is not None:
        for part, table in result.attribution.items():
            figures.append(effect_heatmap(table, f"{model}: attribution patching{PART_TITLES[part]}", "estimate"))
        exact = np.concatenate([t.ravel() for t in result.heads.values()])
        estimate = np.concatenate([t.ravel() for t in result.attribution.values()])
        figures.append(attribution_scatter(exact, estimate, result.attribution_r))
    return figures


@notebook_figure
def composition_heatmap(scores: np.ndarray, kind: str, model: str) -> go.Figure:
    """One kind of composition [layers, heads, layers, heads] as a sender x receiver heatmap (0 where the receiver is
    not later)."""
    L, H = scores.shape[:2]
    labels = _head_labels(L, H)
    fig = attention_heatmap(scores.reshape(L * H, L * H), labels, labels,
                            f"{model}: {kind.upper()}-composition (rows: sender heads, columns: receiver heads)")  # fmt: skip
    fig.update_traces(hovertemplate="from %{customdata[1]} into %{customdata[0]}: %{z:.3f}<extra></extra>")
    return fig


@draws(CompositionResult)
def composition_figures(result: CompositionResult, model: str) -> list:
    """Q-, K- and V-composition, each a sender x receiver heatmap."""
    return [composition_heatmap(getattr(result, kind), kind, model) for kind in ("q", "k", "v")]
