"""The Live page of an encoder-decoder (T5, BART, Marian): a source and a target text, a switch between the encoder's,
the decoder's and the cross attention (as in bertviz), the head, model and neuron views of the part chosen (the
encoder's neuron view from its stack's run; the decoder's and cross-attention's from the queries and keys of the whole
model's forward pass; cross: target tokens left, source tokens right; each with the value norms of its keys beside
it), all kept in the URL."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app_pages.live.neuron import neuron_notes, neuron_part
from app_pages.live.shows import QUANTITY, SHOW, SHOWS
from attnlib.analyses.norms import row_normalised, value_norms_from_values, weighted_norms
from attnlib.core.model import ModelFacts
from attnlib.core.runner import InputError
from attnlib.core.seq2seq import PART_NAMES, PARTS, TARGET_FROM_TEXT, Part, Seq2SeqMaps, run_seq2seq
from attnlib.views.head_view import head_view
from attnlib.views.model_view import model_view
from attnlib.views.neuron_view import neuron_scores, neuron_view_html, seq2seq_terms, value_norm_figure
from ui.sources.compare import compared_model
from ui.sources.live_inputs import cached_run, cached_seq2seq, pretty_token, text_options
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind, publish
from ui.widgets.family_notes import explain_unsupported, unsupported_for
from ui.widgets.plotly_figure import plotly_figure

VIEWS = {"head": "Head view", "model": "Model view", "neuron": "Neuron view"}
PART_LABELS: dict[Part, str] = {"encoder": "Encoder", "decoder": "Decoder", "cross": "Cross"}
VIEW = Option("live_view", "view", "head", list(VIEWS))  # the Live page's own view option, without the head finder
PART = Option("live_part", "part", "encoder", list(PARTS))
TARGET = Option("live_target", "target", "")
LAYER = Option("live_layer", "layer", 1, lo=1)
HEAD = Option("live_head", "head", 1, lo=1)
TOKEN = Option("live_token", "token", 0, lo=0, omit_default=True)  # the neuron view's query token, 1-based; 0: first
NORMS_KEY = "live_value_norms"  # the chart's key, as the encoder's neuron view names its own
OPTIONS = [VIEW, PART, SHOW, LAYER, HEAD, TOKEN]  # bound after the text boxes (TARGET is bound with the source)
QUERY_HELP: dict[Part, str] = {
    "encoder": "Positions of the source, numbered from 1.",
    "decoder": "Positions of the target (the decoder's start token first), numbered from 1; each attends to itself "
    "and the target's earlier tokens.",
    "cross": "Positions of the target (the decoder's start token first), numbered from 1: the queries, drawn on the "
    "left; the source's tokens are the keys, on the right.",
}
PART_NORMS: dict[Part, str] = {
    "decoder": "Value norms ‖f(x_j)‖ (METHODS §11): the decoder's own values of the target's tokens.",
    "cross": "Value norms ‖f(x_j)‖ (METHODS §11) of the source's tokens: cross-attention's values are made from the "
    "encoder's output. Its residual (the target token's own) and rollouts have no meaning over the source (METHODS "
    "§18).",
}


@st.cache_data(max_entries=4, show_spinner=False)
def cached_part_heads(model_name: str, source: str, target: str, part: Part, norms: bool) -> Seq2SeqMaps:
    """The attentions with one part's queries and keys (and its values, for norms), once per (model, source, target,
    part): the target as the decoder read it (the given one, or the model's own output already made)."""
    return run_seq2seq(model_named(model_name), source, target, qk=part, norms=part if norms else None)


def part_value_norms(maps: Seq2SeqMaps) -> np.ndarray:
    """||f_h(x_j)|| [layers, heads, n_key] of the part whose values the run captured (METHODS §11)."""
    assert maps.values is not None, "run_seq2seq with norms"
    return value_norms_from_values(maps.values.values, maps.values.weights.out_gram)


@st.cache_data(max_entries=4, show_spinner=False)
def cached_norm_rows(model_name: str, source: str, target: str, part: Part) -> np.ndarray:
    """Each row of a part's weighted_norm A[i,j] ||f_h(x_j)|| (METHODS §11; cross: the source's values, from the
    encoder's output) normalised to sum 1, [layers, heads, n_query, n_key], once per (model, source, target, part)."""
    maps = run_seq2seq(model_named(model_name), source, target, norms=part)
    return row_normalised(weighted_norms(maps.part(part)[0], part_value_norms(maps))).astype(np.float32)


def source_and_target() -> tuple[str, str]:
    """The source (sentence A's box and URL key, so a link or another page keeps it) and the target, in the URL."""
    option_a, _ = text_options()
    values = bind([option_a, TARGET])
    left, right = st.columns(2)
    left.text_area("Source (the encoder's input)", key=option_a.key, height=80)
    right.text_area(
        "Target (the decoder's input)",
        key=TARGET.key,
        height=80,
        help="The decoder reads its start token, then the target's tokens, as in training. Left empty, the target is "
        "the model's own greedy output for the source.",
    )
    return values[option_a.param], values[TARGET.param]


def clamp(n_layers: int, n_heads: int, n_queries: int) -> None:
    """Keep the layer, head and query token inside the part and its queries (the source's tokens, or the target's for
    the decoder and cross parts; a link made for a larger one may name more)."""
    state = st.session_state
    state[LAYER.key] = min(max(int(state[LAYER.key]), 1), n_layers)
    state[HEAD.key] = min(max(int(state[HEAD.key]), 1), n_heads)
    if not 0 <= int(state[TOKEN.key]) <= n_queries:
        state[TOKEN.key] = 0


def query_token(labels: list[str], part: Part) -> int:
    """The neuron view's query token (0-based; the first when none is chosen), chosen among a part's query tokens."""
    st.selectbox(
        "Query token",
        list(range(0, len(labels) + 1)),
        key=TOKEN.key,
        format_func=lambda i: "none (first token)" if i == 0 else f"{i}: {labels[i - 1]}",
        help=QUERY_HELP[part],
    )
    return max(int(st.session_state[TOKEN.key]) - 1, 0)


def encoder_neuron_view(facts: ModelFacts, source: str, layer: int, head: int) -> None:
    """The encoder's neuron view over the source tokens, as an encoder's: a run of the encoder stack alone, whose
    queries and keys (T5's relative position bias and scale 1 included) reproduce its self-attention."""
    result = cached_run(facts.name, source, "")
    labels = [pretty_token(t) for t in result.tokens]
    query = query_token(labels, "encoder")
    neuron_part(facts, result, labels, (source, ""), (layer, head, query))


def decoder_neuron_view(facts: ModelFacts, source: str, target: str, part: Part, where: tuple[int, int]) -> None:
    """The decoder's (causal) or cross-attention's neuron view: the queries and keys that the decoder stack's attention
    modules computed in the model's forward pass (cross: the target's queries, the source's keys) and the logits
    rebuilt from them (T5: q·k plus the decoder's relative position bias, none in cross-attention; BART, Marian:
    q·k/√d), beside the model's own attention row of the same pass; `target` as the decoder read it."""
    layer, head = where
    no_norms = unsupported_for(facts.name, "norms", part)
    maps = cached_part_heads(facts.name, source, target, part, no_norms is None)
    heads = maps.heads
    assert heads is not None, "run_seq2seq with qk"
    attentions, query_tokens, key_tokens = maps.part(part)
    query_labels, labels = [pretty_token(t) for t in query_tokens], [pretty_token(t) for t in key_tokens]
    query = query_token(query_labels, part)
    q, k = heads.queries[layer, head], heads.keys[layer, head]
    terms = seq2seq_terms(heads, layer, head, query)
    row = attentions[layer, head, query]
    cross = query_labels if part == "cross" else None
    left, right = st.columns([4, 1])
    left.iframe(neuron_view_html(q, k, labels, query, layer, head, row, query_labels=cross, **terms), height="content")
    with right:
        if no_norms is None:
            plotly_figure(value_norm_figure(part_value_norms(maps)[layer, head], labels, layer, head), key=NORMS_KEY)
            st.caption(PART_NORMS[part])
        else:
            st.caption(f"No value norms: {no_norms}")
    ns = neuron_scores(q, k, query, **terms)
    neuron_notes(float(abs(ns.softmax - row).max()), ns.label)


def encoder_decoder_live(facts: ModelFacts) -> None:
    """The whole Live page of an encoder-decoder."""
    source, target = source_and_target()
    bind(OPTIONS)
    if compared_model() is not None:
        st.caption("A second model is not drawn beside an encoder-decoder.")
    try:
        maps = cached_seq2seq(facts.name, source, target)
    except InputError as exc:
        st.warning(str(exc))
        return
    if maps.target.source != "given":
        st.info(f"Target: {TARGET_FROM_TEXT[maps.target.source]}: “{maps.target.text}”. Type a target to change it.")
    if maps.source.truncated or maps.target.truncated:
        st.warning(f"The source or the target was truncated to the {facts.max_length} tokens the model takes.")
    st.caption(
        f"{maps.source.n} source tokens, {len(maps.target.tokens)} target tokens (the decoder's start token first). "
        "Layers and heads are numbered from 1 on this page."
    )
    view = st.radio("View", list(VIEWS), format_func=VIEWS.get, horizontal=True, key=VIEW.key)
    part = st.radio(
        "Attention",
        list(PARTS),
        format_func=PART_LABELS.get,
        horizontal=True,
        key=PART.key,
        help="Encoder: the source's self-attention. Decoder: the target's causal self-attention. Cross: each target "
        "token (left) to the source's tokens (right).",
    )
    shows = st.radio(
        "Shows",
        list(SHOWS),
        format_func=SHOWS.get,
        horizontal=True,
        key=SHOW.key,
        disabled=view == "neuron",
        help="Weights: the attention α. Norms: ‖α f(x_j)‖ (METHODS §11), each query's row normalised to sum 1: how "
        "much each key actually moves into the query (cross: the source's values, made from the encoder's output). "
        "The neuron view shows weights, value norms beside it.",
    )
    attentions, _, _ = maps.part(part)
    clamp(attentions.shape[0], attentions.shape[1], attentions.shape[2])
    c_layer, c_head = st.columns([3, 1])
    layer = int(c_layer.slider("Layer", 1, attentions.shape[0], key=LAYER.key)) - 1
    head = int(c_head.selectbox("Head", list(range(1, attentions.shape[1] + 1)), key=HEAD.key)) - 1
    publish(OPTIONS)
    st.caption(f"{PART_LABELS[part]}: {PART_NAMES[part]}.")
    if view == "neuron":
        if explain_unsupported(facts, "queries_keys", part):
            return
        if part == "encoder":
            encoder_neuron_view(facts, source, layer, head)
        else:
            decoder_neuron_view(facts, source, maps.target.text, part, (layer, head))
        return
    shows = "weights" if shows == "norms" and explain_unsupported(facts, "norms", part) else shows
    drawn_maps = attentions if shows == "weights" else cached_norm_rows(facts.name, source, maps.target.text, part)
    parts = {
        f"{part}_attention": drawn_maps,
        "encoder_tokens": maps.source.tokens,
        "decoder_tokens": maps.target.tokens,
    }
    norms = ", norms ‖α f(x)‖ per row" if shows == "norms" else ""
    quantity = QUANTITY[shows]
    if view == "head":
        title = f"Head view, layer {layer + 1}{norms}" if norms else ""
        drawn = head_view(
            **parts, layer=layer, html_action="return", display_mode="light", title=title, quantity=quantity
        )
    else:
        title = f"Model view{norms}" if norms else ""
        drawn = model_view(
            **parts, layer=layer, head=head, html_action="return", display_mode="light", title=title, quantity=quantity
        )
    st.iframe(drawn.html, height="content")
