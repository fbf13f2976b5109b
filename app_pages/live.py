"""Live attention: head view, model view and neuron view of any sentence or pair, a head finder, and exports."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.corpus import CorpusInput, read_text_corpus
from attnlib.engine import accumulate
from attnlib.export import attention_table
from attnlib.model import ModelFacts
from attnlib.patterns import PATTERN_HELP, PATTERNS, PatternAccumulator, rank_heads
from attnlib.runner import RunResult
from attnlib.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE
from attnlib.words import ROW_RULES, unit_labels, word_groups, word_level_attention
from figures.head_view import MIN_WEIGHT as HEAD_MIN_WEIGHT
from figures.head_view import PAIR_FILTERS, head_view_data, head_view_html
from figures.model_view import LINES_MAX_TOKENS, model_view_html
from figures.neuron_view import neuron_scores, neuron_view_html
from ui.live_inputs import cached_run, run_or_explain, text_inputs
from ui.model_sidebar import current_model, model_named
from ui.page_state import Option, bind, publish, set_value
from ui.progress import progress

VIEWS = {"head": "Head view", "model": "Model view", "neuron": "Neuron view", "finder": "Head finder"}
LEVELS = {"token": "Tokens", "word": "Words"}
FILTER_PARAMS = {"all": "All", "aa": "A→A", "bb": "B→B", "ab": "A→B", "ba": "B→A"}
TOP_PICKS = 3

VIEW = Option("live_view", "view", "head", list(VIEWS))
LEVEL = Option("live_level", "level", "token", list(LEVELS))
RULE = Option("live_rule", "rule", "mean", list(ROW_RULES))
LAYER = Option("live_layer", "layer", 1, lo=1)
HEAD = Option("live_head", "head", 1, lo=1)
HEADS = Option("live_heads", "heads", None)  # None: every head
TOKEN = Option("live_token", "token", 0, lo=0, omit_default=True)  # 0: no token selected
PAIR_FILTER = Option("live_filter", "filter", "All", FILTER_PARAMS)
OPTIONS = [VIEW, LEVEL, RULE, LAYER, HEAD, HEADS, TOKEN, PAIR_FILTER]


@dataclass
class Shown:
    """What the views draw: the run, its units (tokens or words) and the chosen layer, head and token (0-based)."""

    facts: ModelFacts
    text_a: str
    text_b: str
    result: RunResult
    level: str
    rule: str
    attn: np.ndarray  # [layers, heads, u, u]
    labels: list[str]
    segments: np.ndarray  # [u]
    layer: int
    head: int
    selected: int | None

    @property
    def stem(self) -> str:
        """The start of download file names."""
        return f"{self.facts.name.replace('/', '_')}-L{self.layer + 1}"

    @property
    def level_title(self) -> str:
        return LEVELS[self.level] + (f" (word rows: {self.rule})" if self.level == "word" else "")

    def export(self, **extra) -> dict:
        """The JSON download: where the attention comes from, 0-based indices, and the view's own fields."""
        origin = {"model": self.facts.name, "text_a": self.text_a, "text_b": self.text_b or None}
        return {**origin, "indices": "0-based", "layer": self.layer, "labels": self.labels, **extra}


def clamp_options(n_layers: int, n_heads: int, n_units: int) -> None:
    """Keep the controls inside the model's layers and heads and the input's positions."""
    state = st.session_state
    state[LAYER.key] = min(max(int(state[LAYER.key]), 1), n_layers)
    state[HEAD.key] = min(max(int(state[HEAD.key]), 1), n_heads)
    heads = state[HEADS.key]
    state[HEADS.key] = sorted({h for h in (heads if heads is not None else range(1, n_heads + 1)) if 1 <= h <= n_heads})
    if not 0 <= int(state[TOKEN.key]) <= n_units:
        state[TOKEN.key] = 0


def _open_head(layer: int, head: int) -> None:
    """Button callback of the head finder: show one head (0-based) in the head view."""
    for option, value in [(VIEW, "head"), (LAYER, layer + 1), (HEAD, head + 1), (HEADS, [head + 1]), (TOKEN, 0)]:
        set_value(option, value)
    set_value(PAIR_FILTER, "All")


def _reset_token() -> None:
    """A new level numbers the positions differently: forget the selected one."""
    st.session_state[TOKEN.key] = 0


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
    lm = model_named(model_name)
    acc = PatternAccumulator(lm.facts.n_layers, lm.facts.n_heads)
    with progress("Head finder: running the classroom set") as report:
        accumulate(lm, _inputs, [acc], progress=report)
    return acc


def classroom_inputs() -> tuple[str, list[CorpusInput]]:
    """The classroom set (single sentences, then pairs) and a fingerprint of its content."""
    paths = (CLASSROOM_SINGLE, CLASSROOM_PAIRS)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()[:16]
    return digest, [item for path in paths for item in read_text_corpus(path)]


def export_buttons(
    name: str, csv_maker: Callable[[], pd.DataFrame], json_maker: Callable[[], dict], html: str, key: str
):
    """CSV and JSON of the current attention (made on click) and the figure as offline HTML."""
    c1, c2, c3 = st.columns(3)
    csv = lambda: csv_maker().to_csv(index=False).encode()  # noqa: E731
    c1.download_button("Download attention (CSV)", csv, f"{name}.csv", "text/csv", key=f"{key}_csv", on_click="ignore")
    as_json = lambda: json.dumps(json_maker()).encode()  # noqa: E731
    c2.download_button(
        "Download attention (JSON)", as_json, f"{name}.json", "application/json", key=f"{key}_json", on_click="ignore"
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


def finder_buttons(acc: PatternAccumulator, picks: list) -> None:
    """One row per pattern: its best heads, each a button that opens it in the head view."""
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


def finder_link(facts: ModelFacts, text_a: str, text_b: str, layer: int, head: int) -> str:
    """A link (query string) that opens one head (0-based) in the head view of this model and text."""
    params = {"view": "head", "layer": layer + 1, "head": head + 1, "heads": head + 1, "model": facts.name, "a": text_a}
    return "?" + urlencode({**params, **({"b": text_b} if text_b.strip() else {})})


def finder_tables(facts: ModelFacts, scores: np.ndarray, picks: list, text_a: str, text_b: str) -> None:
    """The best heads as a table of links, and every head's scores as a CSV download."""
    table = pd.DataFrame(
        [
            {
                "pattern": PATTERNS[p.pattern],
                "rank": p.rank,
                "layer_head": p.label,
                "score": round(p.score, 4),
                "open": finder_link(facts, text_a, text_b, p.layer, p.head),
            }
            for p in picks
        ]
    )
    link = st.column_config.LinkColumn("link", display_text="open")
    st.dataframe(table, hide_index=True, column_config={"open": link})
    layer, head = np.divmod(np.arange(facts.n_layers * facts.n_heads), facts.n_heads)
    every = pd.DataFrame(
        [
            {"pattern": name, "layer": l, "head": h, "layer_head": f"{l + 1}-{h + 1}", "score": float(scores[k, l, h])}
            for k, name in enumerate(PATTERNS)
            for l, h in zip(layer, head)
        ]
    )
    name = f"head-finder-{facts.name.replace('/', '_')}.csv"
    csv = every.to_csv(index=False).encode()
    st.download_button("Download every head's scores (CSV)", csv, name, "text/csv", key="finder_csv", on_click="ignore")


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
    finder_buttons(acc, picks)
    finder_tables(facts, scores, picks, text_a, text_b)


def level_controls(view: str, result: RunResult, facts: ModelFacts, texts: tuple[str, str], columns) -> tuple:
    """Token or word level and the word row rule; returns (level, rule, attention, labels, segments)."""
    c_level, c_rule = columns
    c_level.radio(
        "Level",
        list(LEVELS),
        format_func=LEVELS.get,
        horizontal=True,
        key=LEVEL.key,
        on_change=_reset_token,
        disabled=view == "neuron",
        help="Words: METHODS §6 (attention to a word = sum over its pieces; from a word = the row rule). "
        "The neuron view is always at token level.",
    )
    rule = c_rule.selectbox(
        "Word rows",
        ROW_RULES,
        key=RULE.key,
        disabled=st.session_state[LEVEL.key] != "word" or view == "neuron",
        help="How the rows of a word's pieces merge: mean (default), first piece, or max renormalised.",
    )
    level = "token" if view == "neuron" else st.session_state[LEVEL.key]
    return level, rule, *units(result, level, facts.name, *texts, rule)


def head_controls(view: str, facts: ModelFacts, c_layer, c_head) -> tuple[int, int]:
    """The layer slider, and the heads shown (head view) or the one head (other views); 0-based."""
    layer = int(c_layer.slider("Layer", 1, facts.n_layers, key=LAYER.key)) - 1
    state = st.session_state
    if view == "head":
        st.pills(
            "Heads shown",
            list(range(1, facts.n_heads + 1)),
            selection_mode="multi",
            key=HEADS.key,
            help="Heads drawn in the head view, one colour each (click a number inside the figure to hide it too).",
        )
        if len(state[HEADS.key]) == 1:
            state[HEAD.key] = state[HEADS.key][0]
    else:
        c_head.selectbox("Head", list(range(1, facts.n_heads + 1)), key=HEAD.key)
    return layer, int(state[HEAD.key]) - 1


def token_controls(view: str, labels: list[str], is_pair: bool) -> int | None:
    """The selected (or query) token and, for a pair in the head view, the pair filter; the token 0-based or None."""
    c_token, c_filter = st.columns([2, 3])
    if view != "model":
        none = "none (first token)" if view == "neuron" else "none"
        c_token.selectbox(
            "Query token" if view == "neuron" else "Selected token",
            list(range(0, len(labels) + 1)),
            key=TOKEN.key,
            format_func=lambda i: none if i == 0 else f"{i}: {labels[i - 1]}",
            help="Positions are numbered from 1. In the head view only this token's lines are drawn.",
        )
    if view == "head" and is_pair:
        c_filter.radio(
            "Pair filter",
            list(PAIR_FILTERS),
            horizontal=True,
            key=PAIR_FILTER.key,
            help="Queries of one sentence to keys of the other (or the same); weights are not renormalised.",
        )
    token = st.session_state[TOKEN.key]
    return int(token) - 1 if token else None


def controls(view: str, facts: ModelFacts, result: RunResult, text_a: str, text_b: str) -> Shown:
    """Every control of the three views, kept in the URL; what they choose."""
    c_level, c_rule, c_layer, c_head = st.columns([1.2, 1, 2.2, 1.2])
    level, rule, attn, labels, segments = level_controls(view, result, facts, (text_a, text_b), (c_level, c_rule))
    clamp_options(facts.n_layers, facts.n_heads, len(labels))
    layer, head = head_controls(view, facts, c_layer, c_head)
    selected = token_controls(view, labels, bool(text_b.strip()))
    publish(OPTIONS)
    return Shown(facts, text_a, text_b, result, level, rule, attn, labels, segments, layer, head, selected)


def head_view_section(s: Shown) -> None:
    """The head view of the chosen heads of one layer, and its exports."""
    heads = [h - 1 for h in st.session_state[HEADS.key]]
    pair_filter = st.session_state[PAIR_FILTER.key] if s.text_b.strip() else "All"
    if not heads:
        st.info("Choose at least one head.")
        return
    html = head_view_html(
        s.attn[s.layer], s.labels, heads, s.layer, s.segments, pair_filter, s.selected, title=s.level_title
    )
    show(html)
    words = f" Word level: rows merged by **{s.rule}**, columns summed (METHODS §6)." if s.level == "word" else ""
    st.caption(f"Lines below {HEAD_MIN_WEIGHT} are not drawn." + words)
    data = head_view_data(s.attn[s.layer], heads, s.segments, pair_filter)
    export_buttons(
        f"{s.stem}-heads",
        lambda: attention_table(data.maps, s.layer, heads, data.left, data.right, s.labels),
        lambda: s.export(
            level=s.level,
            rule=s.rule,
            pair_filter=pair_filter,
            heads=heads,
            query_index=data.left,
            key_index=data.right,
            attention=np.round(data.maps.astype(np.float64), 6).tolist(),
        ),
        html,
        "live_head_export",
    )


def model_view_section(s: Shown) -> None:
    """Every head of every layer as thumbnails, the chosen one enlarged, and the chosen layer's exports."""
    n_units = len(s.labels)
    if n_units > LINES_MAX_TOKENS:
        st.caption(f"More than {LINES_MAX_TOKENS} {s.level}s: thumbnails are heatmaps so they stay readable.")
    html = model_view_html(s.attn, s.labels, (s.layer, s.head), title=s.level_title)
    show(html)
    every = list(range(n_units))
    export_buttons(
        f"{s.stem}-all-heads",
        lambda: attention_table(s.attn[s.layer], s.layer, list(range(s.facts.n_heads)), every, every, s.labels),
        lambda: s.export(
            level=s.level, rule=s.rule, attention=np.round(s.attn[s.layer].astype(np.float64), 6).tolist()
        ),
        html,
        "live_model_export",
    )
    st.caption("The downloads hold the chosen layer (all heads); the enlarged head is the chosen layer and head.")


def neuron_view_section(s: Shown) -> None:
    """Query and key vectors of one head and query token, their softmax against the model's row, and exports."""
    r, layer, head = s.result, s.layer, s.head
    query = s.selected if s.selected is not None else 0
    q, k = r.queries[layer, head], r.keys[layer, head]
    ns = neuron_scores(q, k, query)
    row = r.attentions[layer, head, query]
    diff = float(np.abs(ns.softmax - row).max())
    html = neuron_view_html(q, k, s.labels, query, layer, head, row)
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
    table = {"key_index": np.arange(r.n), "key": s.labels, "score": ns.scores, "softmax": ns.softmax}
    vectors = {"query": ns.query.tolist(), "keys": ns.keys.tolist(), "scores": ns.scores.tolist()}
    export_buttons(
        f"{s.stem}-H{head + 1}-neuron",
        lambda: pd.DataFrame({**table, "model_attention": row}),
        lambda: s.export(
            head=head,
            query_index=query,
            **vectors,
            softmax=ns.softmax.tolist(),
            model_attention=row.astype(np.float64).tolist(),
        ),
        html,
        "live_neuron_export",
    )


SECTIONS = {"head": head_view_section, "model": model_view_section, "neuron": neuron_view_section}

st.title("Live attention")
facts = current_model().facts
text_a, text_b = text_inputs()
result = run_or_explain(facts.name, text_a, text_b)
bind(OPTIONS)
if result is None:
    st.stop()
st.caption(
    f"{result.n} tokens. Layers, heads and token positions are numbered from 1 on this page "
    '("layer-head" as in Clark et al. 2019, so 3-10 is layer 3, head 10).'
)
view = st.radio("View", list(VIEWS), format_func=VIEWS.get, horizontal=True, key=VIEW.key)
if view == "finder":
    clamp_options(facts.n_layers, facts.n_heads, result.n)
    publish(OPTIONS)
    show_finder(facts, text_a, text_b)
else:
    SECTIONS[view](controls(view, facts, result, text_a, text_b))
