"""The Live page's head finder: every head scored for each attention pattern over the classroom set, the best ones
as buttons and links that open them in the head view."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.analyses.roles import (
    PATTERN_HELP,
    PATTERNS,
    PatternAccumulator,
    detection_scores,
    head_patterns,
    probe_text,
    rank_heads,
)
from attnlib.core.corpus import CorpusInput, read_text_corpus
from attnlib.core.model import ModelFacts
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE
from ui.sources.live_inputs import cached_run, text_options
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind, set_value
from ui.widgets.data_table import data_table
from ui.widgets.progress import progress

TOP_PICKS = 3
ROLE_PATTERNS = {"previous": "previous token (detected)", "duplicate": "duplicate token", "induction": "induction"}
ROLE_HELP = {
    "previous": "the share of attention on the key just before the query",
    "duplicate": "the share of attention on earlier occurrences of the query's token",
    "induction": "the share of attention on the tokens that followed earlier occurrences of the query's token",
}
EXCLUDE_FIRST = Option("finder_exclude_first", "exclude_first", False, omit_default=True)  # as the Head roles page's


@st.cache_data(max_entries=8, show_spinner=False)
def head_finder(model_name: str, fingerprint: str, _inputs: list[CorpusInput]) -> PatternAccumulator:
    """Pattern scores of every head over the classroom set, once per model."""
    with progress("Head finder: running the classroom set") as report:
        return head_patterns(model_named(model_name), _inputs, report)


def classroom_inputs() -> tuple[str, list[CorpusInput]]:
    """The classroom set (single sentences, then pairs) and a fingerprint of its content."""
    paths = (CLASSROOM_SINGLE, CLASSROOM_PAIRS)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in paths)).hexdigest()[:16]
    return digest, [item for path in paths for item in read_text_corpus(path)]


def finder_buttons(
    titles: Mapping[str, str], helps: Mapping[str, str], picks: list, on_pick: Callable[[int, int], None], key: str
) -> None:
    """One row per pattern (its title, and its help on hover): its best heads, each a button that calls
    on_pick(layer, head) (0-based); button keys start with `key`."""
    for name, title in titles.items():
        row = [p for p in picks if p.pattern == name]
        cols = st.columns([2.2] + [1] * TOP_PICKS)
        cols[0].markdown(f"**{title}**", help=helps[name])
        if not row:
            cols[1].caption("no input to score this on")
        for col, p in zip(cols[1:], row):
            col.button(
                f"{p.label} · {p.score:.3f}",
                key=f"{key}_{name}_{p.rank}",
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
    helps = {name: f"{PATTERN_HELP[name]}. Scored on {acc.counts[k]} inputs." for k, name in enumerate(PATTERNS)}
    finder_buttons(PATTERNS, helps, picks, on_pick, "pick")
    finder_tables(facts, scores, picks, text_a, text_b)
    role_finder(facts, text_a, text_b, on_pick)


def use_probe_text(model_name: str) -> None:
    """Button callback: the probe (random words, then the same words again) as Sentence A, no Sentence B."""
    option_a, option_b = text_options()
    set_value(option_a, probe_text(model_named(model_name)).text)
    set_value(option_b, "")


def role_finder(facts: ModelFacts, text_a: str, text_b: str, on_pick: Callable[[int, int], None]) -> None:
    """The head roles' patterns (METHODS §20: previous-token, duplicate-token, induction) detected on the current
    text, as TransformerLens's detect_head scores them; the best heads as buttons, and the probe as a text."""
    st.subheader("Head roles on this text")
    st.caption(
        "Previous-token, duplicate-token and induction patterns detected on the text above (METHODS §20, measure "
        "*mul*: the share of each head's attention that falls on the pattern, as TransformerLens's `detect_head`). "
        "Duplicate and induction heads need a text that repeats: the probe below is random words said twice."
    )
    bind([EXCLUDE_FIRST])
    st.checkbox(
        "Leave out the first key (a decoder's attention sink)",
        key=EXCLUDE_FIRST.key,
        help="Column 0 of each map set to 0 before scoring (TransformerLens's exclude_bos).",
    )
    result = cached_run(facts.name, text_a, text_b)
    exclude_first = bool(st.session_state[EXCLUDE_FIRST.key])
    scores = detection_scores(result.attentions, result.input_ids, exclude_first=exclude_first)["mul"]
    picks = rank_heads(np.stack(list(scores.values())), top=TOP_PICKS, patterns=tuple(scores))
    finder_buttons(ROLE_PATTERNS, ROLE_HELP, picks, on_pick, "role_pick")
    st.button(
        "Put the probe in Sentence A",
        key="role_probe",
        on_click=use_probe_text,
        args=(facts.name,),
        help="Random words of the model's vocabulary, then the same words again: an induction head attends from each "
        "word of the second repeat to the word that followed it in the first (offset 1 - s).",
    )
    st.caption("Every head's scores on every model's probe: the Head roles page.")
