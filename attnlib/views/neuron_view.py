"""Neuron view: for one head and query token, the query vector, each key vector, q×k, the scores and their softmax.

The scores are the logits the model's softmax reads: scale * q·k (scale 1/√d, DeBERTa's 1/√(d (1 + terms)), T5's 1),
plus the family's relative terms where it adds them (DeBERTa's c2p + p2c, MPNet's and T5's position bias); keys
outside a local layer's window (ModernBERT) or after the query (decoders) get weight 0. An encoder-decoder's
cross-attention draws the target's tokens (queries) on the left and the source's (keys) on the right, as bertviz's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go

from attnlib.core.runner import RunResult
from attnlib.core.seq2seq import PartHeads, Seq2SeqMaps
from attnlib.views.canvas_html import html_page, round_list, view_script
from attnlib.views.display import View
from attnlib.views.figure import notebook_figure
from attnlib.views.inputs import attention_of, check_index, per_layer, tokens_of


@dataclass
class NeuronScores:
    """The arithmetic of one attention row, from the captured query and key vectors."""

    query: np.ndarray  # [d]
    keys: np.ndarray  # [n, d]
    products: np.ndarray  # [n, d] elementwise q × k
    scores: np.ndarray  # [n] scale * q·k + relative (soft-capped: c tanh(that / c))
    softmax: np.ndarray  # [n], 0 outside the window
    scale: float  # the factor of q·k
    relative: np.ndarray | None = None  # [n] the family's relative terms of this row, or None
    allowed: np.ndarray | None = None  # [n] bool: keys inside a local layer's window, or None (every key)
    cap: float | None = None  # c of soft-capped scores (Gemma 2), or None

    @property
    def label(self) -> str:
        """How the scores are made, in words."""
        d = self.query.size
        scale = f"q·k / √{d}" if abs(self.scale * np.sqrt(d) - 1) < 1e-6 else f"q·k × {self.scale:.4g}"
        score = scale + (" + relative" if self.relative is not None else "")
        return score if self.cap is None else f"{self.cap:g}·tanh(({score}) / {self.cap:g})"


def score_terms(
    qk_scale: np.ndarray | None,
    score_bias: np.ndarray | None,
    layer: int,
    head: int,
    query: int,
    window: int | None,
    causal: bool = False,
    score_cap: np.ndarray | None = None,
) -> dict:
    """neuron_scores' scale, relative, window, causal and cap arguments for one row of a run (RunResult.qk_scale
    [layers], .score_bias [layers, heads, n, n] or None; the layer's window, ModelFacts.window; a decoder's causal
    mask; RunResult.score_cap [layers] or None)."""
    cap = None if score_cap is None else float(score_cap[layer])
    return {
        "scale": None if qk_scale is None else float(qk_scale[layer]),
        "relative": None if score_bias is None else score_bias[layer, head, query],
        "window": window,
        "causal": causal,
        "cap": cap if cap is not None and np.isfinite(cap) else None,
    }


def neuron_scores(
    queries: np.ndarray,
    keys: np.ndarray,
    query_index: int,
    scale: float | None = None,
    relative: np.ndarray | None = None,
    window: int | None = None,
    causal: bool = False,
    cap: float | None = None,
) -> NeuronScores:
    """q×k, the scores scale * q·k + relative (scale 1/√d unless given; soft-capped to cap tanh(s / cap) where a cap is
    given, as Gemma 2's) and their softmax over the keys with |i - j| <= window (all when None), and j <= i when causal
    (a decoder), for query position `query_index` of one head's [n, d] queries and keys."""
    q = np.asarray(queries[query_index], dtype=np.float64)
    k = np.asarray(keys, dtype=np.float64)
    products = k * q
    scale = 1 / np.sqrt(q.size) if scale is None else float(scale)
    scores = products.sum(axis=1) * scale
    if relative is not None:
        relative = np.asarray(relative, dtype=np.float64)
        scores = scores + relative
    if cap is not None:
        scores = cap * np.tanh(scores / cap)
    positions = np.arange(len(k))
    allowed = None if window is None else np.abs(positions - query_index) <= window
    if causal:
        allowed = (positions <= query_index) & (True if allowed is None else allowed)
    kept = scores if allowed is None else np.where(allowed, scores, -np.inf)
    e = np.exp(kept - kept.max())
    return NeuronScores(q, k, products, scores, e / e.sum(), scale, relative, allowed, cap)


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
    causal: bool = False,
    query_labels: Sequence[str] | None = None,
    shown: tuple[int, int] | None = None,
    cap: float | None = None,
) -> str:
    """Self-contained HTML of the neuron view of one head ([n_query, d] queries, [n, d] keys; 0-based layer, head,
    query; scale, relative, window, causal and cap as neuron_scores takes them); `labels` are the keys' tokens,
    `query_labels` the queries' where they differ (cross-attention's target tokens, drawn on the left).

    `shown` (0-based, half-open; it holds the query): draw only those keys (a window of a long input), with the
    softmax over all n keys, so their weights sum to the mass the row gives them (`mass`), not to 1."""
    ns = neuron_scores(queries, keys, query_index, scale, relative, window, causal, cap)
    lo, hi = (0, len(ns.keys)) if shown is None else shown
    if shown is not None and not 0 <= lo <= query_index < hi <= len(ns.keys):
        raise ValueError(f"shown keys {lo}:{hi} must hold the query {query_index} and lie in the {len(ns.keys)} keys")
    diff = float(np.abs(ns.softmax - attention_row).max()) if attention_row is not None else None
    cut = slice(lo, hi)
    payload = {
        "label": ns.label,
        "window": window,
        "causal": causal,
        "title": title,
        "layer": layer + 1,
        "head": head + 1,
        "labels": list(labels[cut]),
        "query_labels": None if query_labels is None else list(query_labels),
        "qi": query_index - lo,
        "first": lo,
        "n_keys": len(ns.keys),
        "mass": None if shown is None else float(ns.softmax[lo:hi].sum()),
        "d": int(ns.query.size),
        "q": round_list(ns.query, 3),
        "k": round_list(ns.keys[cut].reshape(-1), 3),
        "scores": round_list(ns.scores[cut], 3),
        "softmax": round_list(ns.softmax[cut], 4),
        "attn": round_list(attention_row[cut], 4) if attention_row is not None else None,
        "diff": diff,
    }
    body = (
        "<div class='bar'><b id='ttl'></b><button id='png'>Save PNG</button></div><div class='note' id='hint'></div>"
        "<div class='scroll' style='max-height:680px'><canvas id='cv'></canvas></div>"
    )
    return html_page(title or f"Neuron view {layer + 1}-{head + 1}", payload, body, view_script("neuron_view.js"))


@notebook_figure
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


def result_terms(result: RunResult, layer: int, head: int, query: int) -> dict:
    """A run's scale, relative and cap terms for one row (the scale left to its default where it is float32's 1/√d)."""
    terms = score_terms(result.qk_scale, result.score_bias, layer, head, query, None, score_cap=result.score_cap)
    d = result.queries.shape[-1] if result.queries is not None else 1
    if terms["scale"] is not None and abs(terms["scale"] * np.sqrt(d) - 1) < 1e-6:
        terms["scale"] = None
    return {key: terms[key] for key in ("scale", "relative", "cap")}


def seq2seq_terms(heads: PartHeads, layer: int, head: int, query: int) -> dict:
    """neuron_scores' scale, relative, window and causal arguments for one row of an encoder-decoder's part (the
    decoder's self-attention is causal)."""
    return score_terms(heads.qk_scale, heads.score_bias, layer, head, query, None, heads.part == "decoder")


def neuron_view(
    queries: RunResult | Seq2SeqMaps | Any,
    keys: Any = None,
    tokens: Sequence[str] | None = None,
    *,
    layer: int = 0,
    head: int = 0,
    query: int = 0,
    attention: Any = None,
    title: str = "",
) -> View:
    """The neuron view of one head and query position (0-based); shows itself in a notebook and has .save_html(path).

    `queries`: a RunResult (run with capture_qk=True, the default of `run`), which has the keys, tokens, attention and
    the logits' scale and relative terms too (an encoder-decoder's: `run(lm, source)`, its encoder stack); or
    `run_seq2seq(lm, source, target, qk=part)`, the queries and keys of an encoder-decoder's encoder, decoder or cross
    attention (cross: the target's tokens are the queries, the source's the keys); or the queries of any model,
    [layers, heads, n, d] or a list of per-layer [(1,) heads, n, d], with `keys` of the same shape and `tokens`, and
    optionally its `attention` (as head_view takes it) to set the model's own row beside softmax(q·k/√d)."""
    maps: np.ndarray | None
    query_labels: list[str] | None = None
    terms: dict = {}
    if isinstance(queries, Seq2SeqMaps):
        if queries.heads is None:
            raise ValueError(
                "queries: these run_seq2seq maps hold no queries and keys: run it with qk='encoder', 'decoder' or "
                "'cross' (or pass run(lm, source), the encoder stack's RunResult)."
            )
        part = queries.heads.part
        q, k = queries.heads.queries, queries.heads.keys
        maps, query_tokens, key_tokens = queries.part(part)
        labels = list(key_tokens)
        query_labels = list(query_tokens) if part == "cross" else None
    elif isinstance(queries, RunResult):
        if queries.queries is None or queries.keys is None:
            raise ValueError("queries: this RunResult holds no queries and keys (run it with capture_qk=True).")
        q, k, maps = queries.queries, queries.keys, queries.attentions
    else:
        if keys is None:
            raise ValueError("keys: give the keys with the queries.")
        q, k = per_layer(queries, "queries", "d"), per_layer(keys, "keys", "d")
        maps = None if attention is None else attention_of(attention)
    n_layers, n_heads, n_query, _ = q.shape
    n = k.shape[2]
    if query_labels is None and k.shape != q.shape:
        raise ValueError(f"keys: shape {k.shape} differs from the queries' {q.shape}.")
    if maps is not None and maps.shape[:4] != (n_layers, n_heads, n_query, n):
        raise ValueError(f"attention: shape {maps.shape} does not match the queries' {q.shape}.")
    if not isinstance(queries, Seq2SeqMaps):
        labels = tokens_of(queries, tokens, n)
    layer, head = check_index(layer, n_layers, "layer"), check_index(head, n_heads, "head")
    query = check_index(query, n_query, "query")
    row = None if maps is None else maps[layer, head, query]
    if isinstance(queries, RunResult):
        terms = result_terms(queries, layer, head, query)
    elif isinstance(queries, Seq2SeqMaps) and queries.heads is not None:
        terms = seq2seq_terms(queries.heads, layer, head, query)
    html = neuron_view_html(
        q[layer, head], k[layer, head], labels, query, layer, head, row, title=title, query_labels=query_labels, **terms
    )
    rows = max(n, n_query)
    height = 90 + min(682, 66 + (12 if rows > 120 else 16) * rows)  # neuron_view.js: its rows in a 680 px scroll box
    return View(html, height, f"Neuron view: layer {layer}, head {head}, query {query} of {n_query} tokens")
