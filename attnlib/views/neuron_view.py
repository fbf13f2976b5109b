"""Neuron view: for one head and query token, the query vector, each key vector, q×k, the scores and their softmax.

The scores are the logits the model's softmax reads: scale * q·k (scale 1/√d, DeBERTa's 1/√(d (1 + terms))), plus the
family's relative terms where it adds them (DeBERTa's c2p + p2c, MPNet's position bias); keys outside a local
layer's window (ModernBERT) get weight 0."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from .canvas_html import html_page, round_list, view_script


@dataclass
class NeuronScores:
    """The arithmetic of one attention row, from the captured query and key vectors."""

    query: np.ndarray  # [d]
    keys: np.ndarray  # [n, d]
    products: np.ndarray  # [n, d] elementwise q × k
    scores: np.ndarray  # [n] scale * q·k + relative
    softmax: np.ndarray  # [n], 0 outside the window
    scale: float  # the factor of q·k
    relative: np.ndarray | None = None  # [n] the family's relative terms of this row, or None
    allowed: np.ndarray | None = None  # [n] bool: keys inside a local layer's window, or None (every key)

    @property
    def label(self) -> str:
        """How the scores are made, in words."""
        d = self.query.size
        scale = f"q·k / √{d}" if abs(self.scale * np.sqrt(d) - 1) < 1e-6 else f"q·k × {self.scale:.4g}"
        return scale + (" + relative" if self.relative is not None else "")


def score_terms(
    qk_scale: np.ndarray | None, score_bias: np.ndarray | None, layer: int, head: int, query: int, window: int | None
) -> dict:
    """neuron_scores' scale, relative and window arguments for one row of a run (RunResult.qk_scale [layers],
    .score_bias [layers, heads, n, n] or None; the layer's window, ModelFacts.window)."""
    return {
        "scale": None if qk_scale is None else float(qk_scale[layer]),
        "relative": None if score_bias is None else score_bias[layer, head, query],
        "window": window,
    }


def neuron_scores(
    queries: np.ndarray,
    keys: np.ndarray,
    query_index: int,
    scale: float | None = None,
    relative: np.ndarray | None = None,
    window: int | None = None,
) -> NeuronScores:
    """q×k, the scores scale * q·k + relative (scale 1/√d unless given) and their softmax over the keys with
    |i - j| <= window (all when None) for query position `query_index` of one head's [n, d] queries and keys."""
    q = np.asarray(queries[query_index], dtype=np.float64)
    k = np.asarray(keys, dtype=np.float64)
    products = k * q
    scale = 1 / np.sqrt(q.size) if scale is None else float(scale)
    scores = products.sum(axis=1) * scale
    if relative is not None:
        relative = np.asarray(relative, dtype=np.float64)
        scores = scores + relative
    allowed = None if window is None else np.abs(np.arange(len(k)) - query_index) <= window
    kept = scores if allowed is None else np.where(allowed, scores, -np.inf)
    e = np.exp(kept - kept.max())
    return NeuronScores(q, k, products, scores, e / e.sum(), scale, relative, allowed)


def neuron_view_html(
    queries: np.ndarray,
    keys: np.ndarray,
    labels: Sequence[str],
    query_index: int,
    layer: int,
    head: int,
    attention_row: np.ndarray | None = None,
    title: str = "",
    scale: float | None = None,
    relative: np.ndarray | None = None,
    window: int | None = None,
) -> str:
    """Self-contained HTML of the neuron view of one head ([n, d] queries and keys; 0-based layer, head, query;
    scale, relative and window as neuron_scores takes them)."""
    ns = neuron_scores(queries, keys, query_index, scale, relative, window)
    payload = {
        "label": ns.label,
        "window": window,
        "title": title,
        "layer": layer + 1,
        "head": head + 1,
        "labels": list(labels),
        "qi": query_index,
        "d": int(ns.query.size),
        "q": round_list(ns.query, 3),
        "k": round_list(ns.keys.reshape(-1), 3),
        "scores": round_list(ns.scores, 3),
        "softmax": round_list(ns.softmax, 4),
        "attn": round_list(attention_row, 4) if attention_row is not None else None,
        "diff": float(np.abs(ns.softmax - attention_row).max()) if attention_row is not None else None,
    }
    body = (
        "<div class='bar'><b id='ttl'></b><button id='png'>Save PNG</button></div><div class='note' id='hint'></div>"
        "<div class='scroll' style='max-height:680px'><canvas id='cv'></canvas></div>"
    )
    return html_page(title or f"Neuron view {layer + 1}-{head + 1}", payload, body, view_script("neuron_view.js"))


def value_norm_figure(value_norm: np.ndarray, labels: Sequence[str], layer: int, head: int) -> go.Figure:
    """Bars of ||f_h(x_j)|| (METHODS §11) for each token j of one head ([n]; 0-based layer, head; 1-based labels)."""
    names = [f"{j + 1}: {label}" for j, label in enumerate(labels)]
    fig = go.Figure(
        go.Bar(
            x=np.asarray(value_norm, dtype=np.float64),
            y=names,
            orientation="h",
            marker_color="#2ca02c",
            hovertemplate="%{y}<br>value norm %{x:.3f}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), type="category")
    fig.update_xaxes(title_text="‖f(x)‖", rangemode="tozero")
    fig.update_layout(
        title=dict(text=f"Value norms, head {layer + 1}-{head + 1}", font=dict(size=13)),
        height=120 + 18 * len(names),
        margin=dict(l=10, r=10, t=40, b=40),
    )
    return fig
