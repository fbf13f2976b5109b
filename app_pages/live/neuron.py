"""The Live page's neuron view of one head and query token: the view, the value norms beside it and whether the
softmax of its scores reproduces the model's attention row; for encoders, decoders and an encoder-decoder's encoder."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attnlib.core.families import score_cap_text
from attnlib.core.model import ModelFacts
from attnlib.core.runner import RunResult
from attnlib.views.neuron_view import neuron_scores, neuron_view_html, score_terms, value_norm_figure
from ui.sources.live_inputs import value_norm
from ui.widgets.family_notes import unsupported_for
from ui.widgets.plotly_figure import plotly_figure


def neuron_part(
    facts: ModelFacts,
    result: RunResult,
    labels: list[str],
    texts: tuple[str, str],
    where: tuple[int, int, int],
    two: bool = False,
    chart_key: str = "live_value_norms",
) -> tuple[str, dict, dict]:
    """One model's neuron view of (layer, head, query), 0-based, and its value norms (beside it; below it when two
    models share the width), and whether softmax(scores) reproduces its row; returns (html, CSV columns, JSON fields)."""
    layer, head, query = where
    assert result.queries is not None and result.keys is not None, "a run with capture_qk"
    q, k = result.queries[layer, head], result.keys[layer, head]
    terms = score_terms(
        result.qk_scale, result.score_bias, layer, head, query, facts.window(layer), facts.causal, result.score_cap
    )
    ns = neuron_scores(q, k, query, **terms)
    row = result.attentions[layer, head, query]
    title = f"{facts.name} · Neuron view" if two else ""
    html = neuron_view_html(q, k, labels, query, layer, head, row, title=title, **terms)
    no_norms = unsupported_for(facts.name, "norms")
    norms = None if no_norms else value_norm(facts.name, *texts)[layer, head]
    left, right = (st.container(), st.container()) if two else st.columns([4, 1])
    with left:
        st.iframe(html, height="content")
    with right:
        if norms is None:
            st.caption(f"No value norms: {no_norms}")
        else:
            plotly_figure(value_norm_figure(norms, labels, layer, head), key=chart_key)
    neuron_notes(float(np.abs(ns.softmax - row).max()), ns.label, ns.cap)
    table = {"key_index": np.arange(result.n), "key": labels, "score": ns.scores, "softmax": ns.softmax}
    fields = {
        "head": head,
        "query_index": query,
        "query": ns.query.tolist(),
        "keys": ns.keys.tolist(),
        "scores": ns.scores.tolist(),
        "softmax": ns.softmax.tolist(),
        "model_attention": row.astype(np.float64).tolist(),
    }
    columns = table | {"model_attention": row}
    if norms is not None:
        fields["value_norm"] = norms.astype(np.float64).tolist()
        columns["value_norm"] = norms
    return html, columns, fields


def neuron_notes(diff: float, label: str, cap: float | None = None) -> None:
    """Whether the softmax of the scores of the captured vectors reproduces the model's attention row; and, for
    soft-capped scores (Gemma 2), that q·k is the score before capping."""
    if diff > 1e-4:
        st.warning(
            f"For this model softmax({label}) differs from the returned attention by up to {diff:.2g}: "
            "its attention adds terms that the query and key vectors do not show."
        )
    else:
        st.caption(
            f"softmax({label}) of the captured vectors equals the model's attention row (max difference {diff:.1e}). "
            "The neuron view is always at token level."
        )
    capped = score_cap_text(cap)
    if capped:
        st.caption(capped)
