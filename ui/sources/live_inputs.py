"""Sentence A / B inputs kept in the URL (`a`, `b`), the cached run of the model on them, and the cached maps the Live
page's views draw from it (weights or norm rows, token or word level)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attnlib.analyses.attention import ATTENTION, AttentionOptions
from attnlib.analyses.base import run_analysis
from attnlib.analyses.importance import ABLATE, AblateOptions, InputAblation
from attnlib.analyses.norms import row_normalised, weighted_norms
from attnlib.core.runner import InputError, RunResult, run
from attnlib.core.seq2seq import Seq2SeqMaps, run_seq2seq
from attnlib.core.words import RowRule, unit_labels, word_groups, word_level_attention
from attnlib.results.shipped import TUTORIAL_A, TUTORIAL_B
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind

DEFAULT_A, DEFAULT_B = TUTORIAL_A, TUTORIAL_B


def text_options() -> tuple[Option, Option]:
    """Sentence A and B; a link without `a` opens the tutorial pair, a link with `a` and no `b` a single sentence."""
    return Option("text_a", "a", DEFAULT_A), Option("text_b", "b", "" if "a" in st.query_params else DEFAULT_B)


def text_inputs() -> tuple[str, str]:
    """Sentence A and optional B, kept across pages and in the URL (?a=...&b=...)."""
    values = bind(text_options())
    left, right = st.columns(2)
    left.text_area("Sentence A", key="text_a", height=80)
    right.text_area("Sentence B (optional, makes a pair)", key="text_b", height=80)
    return values["a"], values["b"]


# Small: a 512-token result holds about 85 MB of attention, queries and keys, and the cache is shared by every visitor.
@st.cache_data(max_entries=4, show_spinner=False)
def cached_run(model_name: str, text_a: str, text_b: str) -> RunResult:
    """Run the model on a sentence or pair once per (model, text)."""
    return run(model_named(model_name), text_a, text_b.strip() or None, capture_qk=True)


@st.cache_data(max_entries=16, show_spinner=False)
def cached_ablation(model_name: str, text_a: str, text_b: str, heads: str) -> InputAblation:
    """The input with these heads (0-based 'layer-head,...') switched off, once per (model, text, heads)."""
    options = AblateOptions(heads=heads)
    return run_analysis(ABLATE, model_named(model_name), options, text=text_a, pair=text_b.strip() or None).result


@st.cache_data(max_entries=4, show_spinner="Computing the window's rows…")
def cached_window(model_name: str, text_a: str, text_b: str, layer: int, start: int, end: int) -> np.ndarray:
    """Rows start:end (0-based, half-open) of every head of one layer, [heads, rows, n], computed block-wise."""
    options = AttentionOptions(layers=str(layer), rows=f"{start}:{end}")
    found = run_analysis(ATTENTION, model_named(model_name), options, text=text_a, pair=text_b.strip() or None)
    return found.result.attentions[0]


@st.cache_data(max_entries=4, show_spinner=False)
def cached_seq2seq(model_name: str, source: str, target: str) -> Seq2SeqMaps:
    """An encoder-decoder's three attentions once per (model, source, target); a blank target: the model's own
    output."""
    return run_seq2seq(model_named(model_name), source, target.strip() or None)


def run_or_explain(model_name: str, text_a: str, text_b: str) -> RunResult | None:
    """The run, or None after showing why it could not be made; long inputs get a truncation notice."""
    try:
        result = cached_run(model_name, text_a, text_b)
    except InputError as exc:
        st.warning(str(exc))
        return None
    if result.truncated:
        st.warning(
            f"The input has {result.n_tokens_full} tokens; the model takes {result.n}, "
            "so it was truncated to the first tokens that fit."
        )
    return result


def pretty_token(token: str) -> str:
    """A token as readers expect it: byte-level BPE's space marks removed."""
    return token.replace("Ġ", " ").replace("▁", " ").strip() or token


@st.cache_data(max_entries=4, show_spinner=False)
def value_norm(model_name: str, text_a: str, text_b: str) -> np.ndarray:
    """||f_h(x_j)|| [layers, heads, n] of a sentence or pair (METHODS §11), from a run that captures value vectors."""
    r = run(model_named(model_name), text_a, text_b.strip() or None, capture_norms=True)
    if r.value_norm is None:
        raise ValueError("The run captured no value vectors.")
    return r.value_norm


@st.cache_data(max_entries=2, show_spinner=False)
def norm_rows(model_name: str, text_a: str, text_b: str) -> np.ndarray:
    """Each row of weighted_norm = A * value_norm (METHODS §11) normalised to sum 1: [layers, heads, n, n]."""
    attentions = cached_run(model_name, text_a, text_b).attentions
    return row_normalised(weighted_norms(attentions, value_norm(model_name, text_a, text_b))).astype(np.float32)


def token_maps(model_name: str, text_a: str, text_b: str, show: str) -> np.ndarray:
    """What the views draw at token level [layers, heads, n, n]: attention weights or row-normalised norms."""
    return (
        norm_rows(model_name, text_a, text_b) if show == "norms" else cached_run(model_name, text_a, text_b).attentions
    )


@st.cache_data(max_entries=4, show_spinner=False)
def word_level(model_name: str, text_a: str, text_b: str, rule: RowRule, show: str = "weights") -> np.ndarray:
    """Word-level maps [layers, heads, u, u] (METHODS §6) of the weights or norm rows, once per text and row rule."""
    r = cached_run(model_name, text_a, text_b)
    return word_level_attention(token_maps(model_name, text_a, text_b, show), r.word_ids, rule).astype(np.float32)


def units(result: RunResult, level: str, model_name: str, texts: tuple[str, str], rule: RowRule, show: str):
    """(maps [L, H, u, u], labels, segments) at token or word level, of the weights or the norm rows."""
    if level == "token":
        return token_maps(model_name, *texts, show), [pretty_token(t) for t in result.tokens], result.segments
    groups = word_groups(result.word_ids)
    labels = unit_labels([pretty_token(t) for t in result.tokens], result.words, result.word_ids)
    segments = np.array([result.segments[g[0]] for g in groups], np.int8)
    return word_level(model_name, *texts, rule, show), labels, segments
