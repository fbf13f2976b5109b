"""The Live page's head finder: every head scored for each attention pattern over the classroom set, the best ones
as buttons and links that open them in the head view."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.core.batches import accumulate
from attnlib.core.corpus import CorpusInput, read_text_corpus
from attnlib.core.model import ModelFacts
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE
from attnlib.stats.patterns import PATTERN_HELP, PATTERNS, PatternAccumulator, rank_heads
from ui.sources.model_sidebar import model_named
from ui.widgets.data_table import data_table
from ui.widgets.progress import progress

TOP_PICKS = 3


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


def finder_buttons(acc: PatternAccumulator, picks: list, on_pick: Callable[[int, int], None]) -> None:
    """One row per pattern: its best heads, each a button that calls on_pick(layer, head) (0-based)."""
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
                on_click=on_pick,
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
    data_table(table.rename(columns={"open": "link"}), key="finder_table", links={"link": "open"})
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


def show_finder(facts: ModelFacts, text_a: str, text_b: str, on_pick: Callable[[int, int], None]) -> None:
    """The head finder: the best heads for each pattern over the classroom set, each a button (on_pick) and a link
    into the head view of this model and text."""
    fingerprint, inputs = classroom_inputs()
    acc = head_finder(facts.name, fingerprint, inputs)
    scores = acc.scores()
    st.subheader(f"Head finder: {facts.name}")
    st.caption(
        f"Scores over the classroom set ({len(inputs)} inputs: single sentences and pairs), mean over inputs. "
        "Click a head to open it in the head view. Heads are numbered from 1 (layer-head)."
    )
    picks = rank_heads(scores, top=TOP_PICKS)
    finder_buttons(acc, picks, on_pick)
    finder_tables(facts, scores, picks, text_a, text_b)
