"""Live attention: head view, model view and neuron view of any sentence or pair, a head finder, and exports."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.corpus import CorpusInput, read_text_corpus
from attnlib.engine import accumulate
from attnlib.model import ModelFacts
from attnlib.patterns import PATTERN_HELP, PATTERNS, PatternAccumulator, rank_heads
from attnlib.runner import RunResult
from attnlib.words import ROW_RULES, unit_labels, word_groups, word_level_attention
from figures.head_view import MIN_WEIGHT as HEAD_MIN_WEIGHT
from figures.head_view import PAIR_FILTERS, head_view_data, head_view_html
from figures.model_view import LINES_MAX_TOKENS, model_view_html
from figures.neuron_view import neuron_scores, neuron_view_html
from ui.live_inputs import cached_run, run_or_explain, text_inputs
from ui.model_sidebar import cached_model, current_model, local_models_allowed

ROOT = Path(__file__).resolve().parents[1]
CLASSROOM = (ROOT / "data" / "classroom_single.txt", ROOT / "data" / "classroom_pairs.tsv")
VIEWS = {"head": "Head view", "model": "Model view", "neuron": "Neuron view", "finder": "Head finder"}
LEVELS = {"token": "Tokens", "word": "Words"}
FILTER_PARAMS = {"All": "all", "A→A": "aa", "B→B": "bb", "A→B": "ab", "B→A": "ba"}
TOP_PICKS = 3


# ---------- state kept in the URL ----------------------------------------------------------------------------------


def _parse_int_list(raw: str) -> list[int]:
    return [int(x) for x in raw.split(",") if x.strip()]


# session key -> (URL parameter, parse from text, default)
URL_STATE = {
    "live_view": ("view", lambda s: s if s in VIEWS else "head", "head"),
    "live_level": ("level", lambda s: s if s in LEVELS else "token", "token"),
    "live_rule": ("rule", lambda s: s if s in ROW_RULES else "mean", "mean"),
    "live_layer": ("layer", int, 1),
    "live_head": ("head", int, 1),
    "live_heads": ("heads", _parse_int_list, None),  # None: every head
    "live_token": ("token", int, 0),  # 0: no token selected
    "live_filter": ("filter", lambda s: {v: k for k, v in FILTER_PARAMS.items()}.get(s, "All"), "All"),
}


def _restore_state() -> None:
    """Give every control its value: kept from earlier in the session, else from the URL, else the default."""
    state = st.session_state
    for key, (param, parse, default) in URL_STATE.items():
        if key in state:
            continue
        if "_" + key in state:  # the widget was not drawn on the last run, so Streamlit dropped its value
            state[key] = state["_" + key]
            continue
        raw = st.query_params.get(param)
        try:
            state[key] = parse(raw) if raw is not None else default
        except ValueError:
            state[key] = default


def _clamp_state(n_layers: int, n_heads: int, n_units: int) -> None:
    """Keep the controls inside the model's layers and heads and the input's positions."""
    state = st.session_state
    state.live_layer = min(max(int(state.live_layer), 1), n_layers)
    state.live_head = min(max(int(state.live_head), 1), n_heads)
    heads = state.live_heads
    heads = [h for h in (heads if heads is not None else range(1, n_heads + 1)) if 1 <= h <= n_heads]
    state.live_heads = sorted(set(heads))
    if not 0 <= int(state.live_token) <= n_units:
        state.live_token = 0


def _write_state(n_heads: int) -> None:
    """Remember every control for this session and write it into the URL, so a link reopens the same view."""
    state = st.session_state
    for key, (param, _, default) in URL_STATE.items():
        value = state.get(key, state.get("_" + key, default))
        state["_" + key] = value
        if key == "live_heads":
            value = None if value is None or len(value) in (0, n_heads) else ",".join(map(str, value))
        elif key == "live_filter":
            value = FILTER_PARAMS.get(value, "all")
        elif key == "live_token" and not value:
            value = None
        if value is None:
            if param in st.query_params:
                del st.query_params[param]
        else:
            st.query_params[param] = str(value)


def _open_head(layer: int, head: int) -> None:
    """Button callback of the head finder: show one head (0-based) in the head view."""
    state = st.session_state
    state.live_view = "head"
    state.live_layer, state.live_head, state.live_heads = layer + 1, head + 1, [head + 1]
    state.live_token = 0
    state.live_filter = "All"


def _reset_token() -> None:
    """A new level numbers the positions differently: forget the selected one."""
    st.session_state.live_token = 0


# ---------- data ---------------------------------------------------------------------------------------------------


def pretty_token(token: str) -> str:
    """A token as readers expect it: byte-level BPE's space marks removed."""
    return token.replace("Ġ", " ").replace("▁", " ").strip() or token


@st.cache_data(max_entries=4, show_spinner=False)
def word_level(model_name: str, text_a: str, text_b: str, rule: str) -> np.ndarray:
    """Word-level attention [layers, heads, u, u] of a cached run (METHODS §6), once per text and row rule."""
    r = cached_run(model_name, text_a, text_b)
    return word_level_attention(r.attentions, r.word_ids, rule).astype(np.float32)


def units(result: RunResult, level: str, model_name: str, text_a: str, text_b: str, rule: str):
    """(attention [L, H, u, u], labels, segments) at token or word level."""
    if level == "token":
        return result.attentions, [pretty_token(t) for t in result.tokens], result.segments
    groups = word_groups(result.word_ids)
    labels = unit_labels([pretty_token(t) for t in result.tokens], result.words, result.word_ids)
    segments = np.array([result.segments[g[0]] for g in groups], np.int8)
    return word_level(model_name, text_a, text_b, rule), labels, segments


@st.cache_data(max_entries=8, show_spinner=False)
def head_finder(model_name: str, fingerprint: str, _inputs: list[CorpusInput]) -> PatternAccumulator:
    """Pattern scores of every head over the classroom set, once per model."""
    lm = cached_model(model_name, local_models_allowed())
    acc = PatternAccumulator(lm.facts.n_layers, lm.facts.n_heads)
    bar = st.progress(0.0, text="Head finder: running the classroom set…")
    accumulate(
        lm,
        _inputs,
        [acc],
        progress=lambda done, total: bar.progress(done / max(total, 1), text=f"Head finder: {done} of {total} inputs"),
    )
    bar.empty()
    return acc


def classroom_inputs() -> tuple[str, list[CorpusInput]]:
    """The classroom set (single sentences, then pairs) and a fingerprint of its content."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in CLASSROOM)).hexdigest()[:16]
    return digest, [item for path in CLASSROOM for item in read_text_corpus(path)]


def attention_table(
    maps: np.ndarray, layer: int, heads: list[int], rows: list[int], cols: list[int], labels: list[str]
) -> pd.DataFrame:
    """Long table of maps [heads, rows, cols] of one layer, 0-based indices plus the 1-based layer-head label."""
    h, i, j = np.meshgrid(np.arange(len(heads)), np.arange(len(rows)), np.arange(len(cols)), indexing="ij")
    h, i, j = h.ravel(), i.ravel(), j.ravel()
    head_ids, row_ids, col_ids = np.array(heads)[h], np.array(rows)[i], np.array(cols)[j]
    return pd.DataFrame(
        {
            "layer": layer,
            "head": head_ids,
            "layer_head": pd.Series(head_ids).map({x: f"{layer + 1}-{x + 1}" for x in heads}),
            "query_index": row_ids,
            "query": np.array(labels, dtype=object)[row_ids],
            "key_index": col_ids,
            "key": np.array(labels, dtype=object)[col_ids],
            "weight": np.round(maps.reshape(-1).astype(np.float64), 6),
        }
    )


def export_buttons(name: str, csv_maker, json_maker, html: str, key: str) -> None:
    """CSV and JSON of the current attention (made on click) and the figure as offline HTML."""
    c1, c2, c3 = st.columns(3)
    c1.download_button(
        "Download attention (CSV)",
        lambda: csv_maker().to_csv(index=False).encode(),
        f"{name}.csv",
        "text/csv",
        key=f"{key}_csv",
        on_click="ignore",
    )
    c2.download_button(
        "Download attention (JSON)",
        lambda: json.dumps(json_maker()).encode(),
        f"{name}.json",
        "application/json",
        key=f"{key}_json",
        on_click="ignore",
    )
    c3.download_button(
        "Download figure (HTML)",
        html.encode(),
        f"{name}.html",
        "text/html",
        key=f"{key}_html",
        on_click="ignore",
        help="A standalone page that opens offline (no CDN).",
    )
    st.caption(
        "PNG: the **Save PNG** button inside the figure. Downloads use 0-based indices; "
        "`layer_head` is the 1-based label shown on the page."
    )


def show(html: str) -> None:
    """Embed a self-contained view; the iframe takes the height of its content (the views scroll inside)."""
    st.iframe(html, height="content")


def show_finder(facts: ModelFacts, text_a: str, text_b: str) -> None:
    """The head finder: the best heads for each pattern over the classroom set, each a button into the head view."""
    fingerprint, inputs = classroom_inputs()
    acc = head_finder(facts.name, fingerprint, inputs)
    scores = acc.scores()
    st.subheader(f"Head finder: {facts.name}")
    st.caption(
        f"Scores over the classroom set ({len(inputs)} inputs: single sentences and pairs), mean over inputs. "
        "Click a head to open it in the head view. Heads are numbered from 1 (layer-head)."
    )
    picks = rank_heads(scores, top=TOP_PICKS)
    for name, title in PATTERNS.items():
        row = [p for p in picks if p.pattern == name]
        cols = st.columns([2.2] + [1] * TOP_PICKS)
        scored_on = acc.counts[list(PATTERNS).index(name)]
        cols[0].markdown(f"**{title}**", help=f"{PATTERN_HELP[name]}. Scored on {scored_on} inputs.")
        if not row:
            cols[1].caption("no input to score this on")
        for col, p in zip(cols[1:], row):
            col.button(
                f"{p.label} · {p.score:.3f}",
                key=f"pick_{name}_{p.rank}",
                on_click=_open_head,
                args=(p.layer, p.head),
                help=f"Open head {p.label} in the head view",
            )
    table = pd.DataFrame(
        [
            {
                "pattern": PATTERNS[p.pattern],
                "rank": p.rank,
                "layer_head": p.label,
                "score": round(p.score, 4),
                "open": "?"
                + urlencode(
                    {
                        "view": "head",
                        "layer": p.layer + 1,
                        "head": p.head + 1,
                        "heads": p.head + 1,
                        "model": facts.name,
                        "a": text_a,
                        **({"b": text_b} if text_b.strip() else {}),
                    }
                ),
            }
            for p in picks
        ]
    )
    st.dataframe(
        table, hide_index=True, column_config={"open": st.column_config.LinkColumn("link", display_text="open")}
    )
    every = pd.DataFrame(
        [
            {"pattern": name, "layer": l, "head": h, "layer_head": f"{l + 1}-{h + 1}", "score": float(scores[k, l, h])}
            for k, name in enumerate(PATTERNS)
            for l in range(facts.n_layers)
            for h in range(facts.n_heads)
        ]
    )
    st.download_button(
        "Download every head's scores (CSV)",
        every.to_csv(index=False).encode(),
        f"head-finder-{facts.name.replace('/', '_')}.csv",
        "text/csv",
        key="finder_csv",
        on_click="ignore",
    )


# ---------- page ---------------------------------------------------------------------------------------------------

st.title("Live attention")
lm = current_model()
facts = lm.facts
text_a, text_b = text_inputs()
result = run_or_explain(facts.name, text_a, text_b)
_restore_state()
if result is None:
    st.stop()

state = st.session_state
is_pair = bool(text_b.strip())
st.caption(
    f"{result.n} tokens. Layers, heads and token positions are numbered from 1 on this page "
    '("layer-head" as in Clark et al. 2019, so 3-10 is layer 3, head 10).'
)

view = st.radio("View", list(VIEWS), format_func=VIEWS.get, horizontal=True, key="live_view")
if view == "finder":
    _clamp_state(facts.n_layers, facts.n_heads, result.n)
    _write_state(facts.n_heads)
    show_finder(facts, text_a, text_b)
    st.stop()

c_level, c_rule, c_layer, c_head = st.columns([1.2, 1, 2.2, 1.2])
c_level.radio(
    "Level",
    list(LEVELS),
    format_func=LEVELS.get,
    horizontal=True,
    key="live_level",
    on_change=_reset_token,
    disabled=view == "neuron",
    help="Words: METHODS §6 (attention to a word = sum over its pieces; from a word = the row rule). "
    "The neuron view is always at token level.",
)
c_rule.selectbox(
    "Word rows",
    ROW_RULES,
    key="live_rule",
    disabled=state.live_level != "word" or view == "neuron",
    help="How the rows of a word's pieces merge: mean (default), first piece, or max renormalised.",
)
rule = state.live_rule
level = "token" if view == "neuron" else state.live_level
attn, labels, segments = units(result, level, facts.name, text_a, text_b, rule)
_clamp_state(facts.n_layers, facts.n_heads, len(labels))

layer = int(c_layer.slider("Layer", 1, facts.n_layers, key="live_layer")) - 1
if view == "head":
    st.pills(
        "Heads shown",
        list(range(1, facts.n_heads + 1)),
        selection_mode="multi",
        key="live_heads",
        help="Heads drawn in the head view, one colour each (click a number inside the figure to hide it too).",
    )
    if len(state.live_heads) == 1:
        state.live_head = state.live_heads[0]
else:
    c_head.selectbox("Head", list(range(1, facts.n_heads + 1)), key="live_head")
head = int(state.live_head) - 1

n_units = len(labels)
token_options = list(range(0, n_units + 1))
c_token, c_filter = st.columns([2, 3])
if view != "model":
    c_token.selectbox(
        "Query token" if view == "neuron" else "Selected token",
        token_options,
        key="live_token",
        format_func=lambda i: (
            ("none (first token)" if view == "neuron" else "none") if i == 0 else f"{i}: {labels[i - 1]}"
        ),
        help="Positions are numbered from 1. In the head view only this token's lines are drawn.",
    )
selected = int(state.live_token) - 1 if state.live_token else None
if view == "head" and is_pair:
    c_filter.radio(
        "Pair filter",
        list(PAIR_FILTERS),
        horizontal=True,
        key="live_filter",
        help="Queries of one sentence to keys of the other (or the same); weights are not renormalised.",
    )
_write_state(facts.n_heads)

stem = f"{facts.name.replace('/', '_')}-L{layer + 1}"
level_title = LEVELS[level] + (f" (word rows: {rule})" if level == "word" else "")
if view == "head":
    heads = [h - 1 for h in state.live_heads]
    pair_filter = state.live_filter if is_pair else "All"
    if not heads:
        st.info("Choose at least one head.")
        st.stop()
    html = head_view_html(attn[layer], labels, heads, layer, segments, pair_filter, selected, title=level_title)
    show(html)
    st.caption(
        f"Lines below {HEAD_MIN_WEIGHT} are not drawn."
        + (f" Word level: rows merged by **{rule}**, columns summed (METHODS §6)." if level == "word" else "")
    )
    data = head_view_data(attn[layer], heads, segments, pair_filter)
    export_buttons(
        f"{stem}-heads",
        lambda: attention_table(data.maps, layer, heads, data.left, data.right, labels),
        lambda: {
            "model": facts.name,
            "text_a": text_a,
            "text_b": text_b or None,
            "level": level,
            "rule": rule,
            "pair_filter": pair_filter,
            "indices": "0-based",
            "layer": layer,
            "heads": heads,
            "query_index": data.left,
            "key_index": data.right,
            "labels": labels,
            "attention": np.round(data.maps.astype(np.float64), 6).tolist(),
        },
        html,
        "live_head_export",
    )
elif view == "model":
    if n_units > LINES_MAX_TOKENS:
        st.caption(f"More than {LINES_MAX_TOKENS} {level}s: thumbnails are heatmaps so they stay readable.")
    html = model_view_html(attn, labels, (layer, head), title=level_title)
    show(html)
    export_buttons(
        f"{stem}-all-heads",
        lambda: attention_table(
            attn[layer], layer, list(range(facts.n_heads)), list(range(n_units)), list(range(n_units)), labels
        ),
        lambda: {
            "model": facts.name,
            "text_a": text_a,
            "text_b": text_b or None,
            "level": level,
            "rule": rule,
            "indices": "0-based",
            "layer": layer,
            "labels": labels,
            "attention": np.round(attn[layer].astype(np.float64), 6).tolist(),
        },
        html,
        "live_model_export",
    )
    st.caption("The downloads hold the chosen layer (all heads); the enlarged head is the chosen layer and head.")
else:
    query = selected if selected is not None else 0
    q, k = result.queries[layer, head], result.keys[layer, head]
    ns = neuron_scores(q, k, query)
    row = result.attentions[layer, head, query]
    diff = float(np.abs(ns.softmax - row).max())
    html = neuron_view_html(q, k, labels, query, layer, head, row)
    show(html)
    if diff > 1e-4:
        st.warning(
            f"For this model softmax(q·k/√d) differs from the returned attention by up to {diff:.2g}: "
            "its attention adds terms that the query and key vectors do not show."
        )
    else:
        st.caption(
            f"softmax(q·k/√d) of the captured vectors equals the model's attention row (max difference {diff:.1e}). "
            "The neuron view is always at token level."
        )
    export_buttons(
        f"{stem}-H{head + 1}-neuron",
        lambda: pd.DataFrame(
            {
                "key_index": np.arange(result.n),
                "key": labels,
                "score": ns.scores,
                "softmax": ns.softmax,
                "model_attention": row,
            }
        ),
        lambda: {
            "model": facts.name,
            "text_a": text_a,
            "text_b": text_b or None,
            "indices": "0-based",
            "layer": layer,
            "head": head,
            "query_index": query,
            "labels": labels,
            "query": ns.query.tolist(),
            "keys": ns.keys.tolist(),
            "scores": ns.scores.tolist(),
            "softmax": ns.softmax.tolist(),
            "model_attention": row.astype(np.float64).tolist(),
        },
        html,
        "live_neuron_export",
    )
