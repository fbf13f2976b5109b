"""The Live page's "Find similar tokens in a corpus" (METHODS §16, exBERT): the selected token's vector searched in a
corpus's index (built on first use with a progress bar, shared by the server's sessions), the matches as sentences
with one head's attention from each, bar charts of their UPOS, DEPREL and what they attend to most; for a second
model the same query against its own index. Nothing here runs, nor is imported by the page, until the section is
switched on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import pandas as pd
import streamlit as st

from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from attnlib.core.runner import InputError, RunResult, run_batches
from attnlib.results.shipped import EWT_DEV, TREEBANKS
from attnlib.search.by_example import (
    CorpusIndex,
    IndexOptions,
    Query,
    SearchError,
    SearchResult,
    build_index,
    query_of,
)
from attnlib.views.search import attends_to_bars, count_bars, index_caption, match_caption, match_strip
from ui.sources.corpus_picker import CorpusChoice, corpus_picker
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.progress import progress
from ui.widgets.side_by_side import model_columns

VECTORS = {
    "hidden": "Layer output (hidden state)",
    "heads": "Heads shown (context vectors)",
    "embeddings": "Embedding output",
}
VECTOR_KIND = Option("live_find_vectors", "fvec", "hidden", list(VECTORS))
K = Option("live_find_k", "k", 20, lo=1, hi=200)
DRAWN_HEAD = Option("live_find_head", "fhead", 1, lo=1)
OPTIONS = [VECTOR_KIND, K, DRAWN_HEAD]
DEFAULT_CORPUS = next(label for label, path in TREEBANKS.items() if path == EWT_DEV)  # gold UPOS and DEPREL
OpenMatch = Callable[[str, str, int], None]  # (text A, text B, 0-based token) -> show it in the head view


@dataclass(frozen=True)
class Ask:
    """What the page asks: the query (typed text, 0-based piece), the layer (0-based) and the heads shown."""

    text_a: str
    text_b: str
    token: int
    layer: int
    heads: tuple[int, ...]


@st.cache_resource(max_entries=3, show_spinner=False)
def corpus_index(model_name: str, fingerprint: str, options: IndexOptions, _choice: CorpusChoice) -> CorpusIndex:
    """The index of a chosen corpus (fingerprint: its content and limit), built once per server for every visitor,
    with a progress bar while it is built."""
    with progress(f"Indexing {_choice.label} for {options.describe()} ({model_name}, once)") as report:
        index = build_index(model_named(model_name), _choice.inputs, options, progress=report)
    index.meta["corpus"] = _choice.described()
    return index


@st.cache_data(max_entries=8, show_spinner=False)
def match_rows(model_name: str, fingerprint: str, layer: int | None, wanted: tuple, _inputs: Sequence[CorpusInput]):
    """Per match (input, position): its pieces, which are special, and the attention rows [heads, n] of its piece
    in the layer (None for the embedding output), from one batched run of the matched inputs."""
    inputs = sorted({i for i, _ in wanted})
    runs: dict[int, RunResult] = dict(
        zip(inputs, run_batches(model_named(model_name), ((_inputs[i].text_a, _inputs[i].text_b) for i in inputs)))
    )
    out = []
    for i, position in wanted:
        r = runs[i]
        rows = None if layer is None else r.attentions[layer, :, position]
        out.append((list(r.tokens), list(r.word_ids), rows))
    return out


def query_token(lm: LoadedModel, ask: Ask, result: RunResult | None) -> int | None:
    """The query's piece in this model: the page's own for the first, the first piece of the same word (or the same
    special token, or position) for a second model, whose pieces differ."""
    if result is None:
        return ask.token
    from attnlib.core.runner import encode

    mine = encode(lm, ask.text_a, ask.text_b.strip() or None)
    word = result.word_ids[ask.token] if ask.token < result.n else None
    if word is not None and word in mine.word_ids:
        return mine.word_ids.index(word)
    return ask.token if ask.token < mine.n else None


@st.cache_data(max_entries=8, show_spinner="Computing the query's vector…")
def cached_query(model_name: str, text_a: str, text_b: str, token: int, options: IndexOptions) -> Query:
    """query_of a typed text's piece (block-wise for a long input), once per (model, text, piece, options)."""
    return query_of(model_named(model_name), text_a, text_b or None, token, options)


def search_one(lm: LoadedModel, choice: CorpusChoice, ask: Ask, kind: str, k: int, first: RunResult | None):
    """(index, result) of one model's search, or None after saying why it cannot be made."""
    options = IndexOptions(
        layer=0 if kind == "embeddings" else min(ask.layer, lm.facts.n_layers - 1),
        embeddings=kind == "embeddings",
        heads="all" if kind == "heads" else "",
    )
    heads = [h for h in ask.heads if h < lm.facts.n_heads] if kind == "heads" else None
    if heads == []:
        st.info(f"{lm.facts.name} has none of the heads shown.")
        return None
    token = query_token(lm, ask, first)
    if token is None:
        st.info(f"The selected token has no counterpart in {lm.facts.name}'s pieces.")
        return None
    try:
        index = corpus_index(lm.facts.name, choice.fingerprint, options, choice)
        query = cached_query(lm.facts.name, ask.text_a, ask.text_b, token, index.options)
        return index, index.search(query, k, heads)
    except (SearchError, InputError) as exc:
        st.warning(f"{lm.facts.name}: {exc}")
        return None


def show_matches(
    lm: LoadedModel,
    index: CorpusIndex,
    result: SearchResult,
    choice: CorpusChoice,
    head: int,
    on_open: OpenMatch,
    key: str,
) -> None:
    """Each match: its caption, its sentence with the matched piece boxed and the drawn head's attention from it,
    and a button that opens it in the head view."""
    layer = None if index.options.embeddings else index.options.layer
    wanted = tuple((m.input, m.position) for m in result.matches)
    rows = match_rows(lm.facts.name, choice.fingerprint, layer, wanted, choice.inputs)
    for rank, (match, (tokens, word_ids, attention)) in enumerate(zip(result.matches, rows), start=1):
        item = choice.inputs[match.input]
        row = None if attention is None else attention[min(head, len(attention) - 1)]
        left, right = st.columns([6, 1], vertical_alignment="center")
        left.markdown(
            f"<div style='font-size: 0.85em; color: #555'>{match_caption(rank, match)}</div>"
            + match_strip(tokens, word_ids, match.position, row, head),
            unsafe_allow_html=True,
        )
        text_a = item.text_a if isinstance(item.text_a, str) else " ".join(item.text_a)
        text_b = "" if item.text_b is None else item.text_b if isinstance(item.text_b, str) else " ".join(item.text_b)
        right.button(
            "Open",
            key=f"{key}_open_{rank}",
            on_click=on_open,
            args=(text_a, text_b, match.position),
            help="Show this sentence in the head view, this token selected.",
        )


def show_summaries(index: CorpusIndex, result: SearchResult, name: str, key: str) -> None:
    """Bar charts of the matches' UPOS and DEPREL (gold CoNLL-U) and of what each head makes them attend to most."""
    summary = result.summary
    if summary.upos is None:
        st.caption(
            "This corpus has no gold UPOS or DEPREL (a CoNLL-U treebank has): only the token classes are counted."
        )
    else:
        chart(count_bars(summary.upos, "UPOS of the matches"), f"{name}-upos", f"{key}_upos")
        chart(count_bars(summary.deprel or {}, "DEPREL of the matches", "#f58518"), f"{name}-deprel", f"{key}_deprel")
    if summary.attends_to:
        chart(attends_to_bars(result, index.options.layer), f"{name}-attends-to", f"{key}_targets")


def search_json(lm: LoadedModel, result: SearchResult) -> dict:
    """The download: what `attnlib search --json` prints."""
    return {"model": lm.facts.name, **result.to_json()}


def matches_table(result: SearchResult) -> pd.DataFrame:
    """The matches as a table (0-based input and position, as the command line prints them)."""
    return pd.DataFrame([vars(m) for m in result.matches])


def find_similar(
    first: LoadedModel, second: LoadedModel | None, ask: Ask | None, result: RunResult | None, on_open: OpenMatch
):
    """The section's controls and, for a selected token, each model's search side by side (`result`: the first
    model's run, which places the query in a second model; None for a long input, which has no second model)."""
    bind(OPTIONS)
    choice = corpus_picker("live_find", "any", default_limit=100_000, sidebar=False, default=DEFAULT_CORPUS)
    c_kind, c_k, c_head = st.columns([3, 1, 1])
    kind = c_kind.radio(
        "Vectors",
        list(VECTORS),
        format_func=VECTORS.get,
        horizontal=True,
        key=VECTOR_KIND.key,
        help="METHODS §16. Hidden state: the layer's output at the token. Heads shown: the concatenated context "
        "vectors of the heads chosen above (the other heads left out). Embedding output: before any layer.",
    )
    k = int(c_k.number_input("Matches (k)", 1, 200, key=K.key))
    head = int(c_head.number_input("Attention drawn: head", 1, first.facts.n_heads, key=DRAWN_HEAD.key)) - 1
    if choice is None:
        return
    if ask is None:
        st.info(
            "Pick a token: click it in the head view (Head view, Tokens level), or choose it under *Selected token*."
        )
        return
    models = [first] + ([second] if second is not None and second.facts.name != first.facts.name else [])
    headers = [f"**{lm.facts.name}**" for lm in models]
    where = "layer output" if kind == "hidden" else "embedding output" if kind == "embeddings" else "heads shown"
    st.caption(
        f"Query: piece {ask.token + 1} of the input above, {where}"
        + (f", layer {ask.layer + 1}" if kind != "embeddings" else "")
        + (f", heads {', '.join(str(h + 1) for h in ask.heads)}" if kind == "heads" else "")
        + f"; the {k} most similar positions of {choice.label} by cosine. Shading: attention of head "
        f"{ask.layer + 1}-{head + 1} from the matched piece (boxed), darkest = its largest weight."
    )
    for n, (column, lm) in enumerate(zip(model_columns(headers), models)):
        with column:
            found = search_one(lm, choice, ask, kind, k, None if n == 0 else result)
            if found is None:
                continue
            index, searched = found
            name = f"{lm.facts.name.replace('/', '_')}-similar-tokens"
            if len(models) == 1:
                left, right = st.columns([3, 2])
            else:
                left, right = st.container(), st.container()
            with left:
                st.caption(index_caption(index.options, index.n_inputs, len(index), choice.label))
                show_matches(lm, index, searched, choice, min(head, lm.facts.n_heads - 1), on_open, f"find{n}")
                c_csv, c_json = st.columns(2)
                with c_csv:
                    download_table(matches_table(searched), name, f"find{n}_csv")
                with c_json:
                    download_json(partial(search_json, lm, searched), name, f"find{n}_json")
            with right:
                show_summaries(index, searched, name, f"find{n}")


def first_piece(result: RunResult, selected: int | None, level: str) -> int | None:
    """The page's selected unit as a piece position: a word's first piece at word level."""
    if selected is None:
        return None
    if level == "token":
        return selected
    from attnlib.core.words import word_groups

    groups = word_groups(result.word_ids)
    return groups[selected][0] if selected < len(groups) else None
