"""The Dependency heads page's example: one sentence's gold arcs against the arcs a head predicts, and that head's
word-level attention; with a second model, the same sentence in it beside, at its own best head (Clark et al. Fig. 5)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from attnlib.analyses.deps import ALL, DIRECTIONS, DependencyRow, head_on_sentence, sentence_word_map
from attnlib.core.corpus import Sentence
from attnlib.core.model import LoadedModel
from attnlib.core.runner import run
from attnlib.views.deps import arc_diagram
from attnlib.views.heatmap import attention_heatmap
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind
from ui.widgets.downloads import chart
from ui.widgets.side_by_side import model_columns

MAX_EXAMPLES = 500  # sentences offered in the example's picker
DIRECTION_PARAMS = {"dep": DIRECTIONS[0], "head": DIRECTIONS[1]}
# the example's options that a new relation resets to its best head: URL key -> widget key
EXAMPLE = {"sentence": "deps_example", "layer": "deps_layer", "head": "deps_head", "dir": "deps_dir"}


@dataclass(frozen=True)
class SentenceMaps:
    """Word-level maps of one sentence and the names of the model's first and last special tokens."""

    word_map: np.ndarray  # [L, H, m+2, m+2]: CLS, the m words, SEP
    present: np.ndarray  # bool [m]: the words that had wordpieces
    cls: str
    sep: str


@st.cache_data(max_entries=32, show_spinner=False)
def example_maps(model_name: str, words: tuple[str, ...], rule: str = "mean") -> SentenceMaps | None:
    """Word-level maps of one sentence in a model (None when it is longer than the model takes); the Tour's too."""
    lm = model_named(model_name)
    result = run(lm, list(words), capture_qk=False)
    if result.truncated:
        return None
    word_map, present = sentence_word_map(result, words, rule)  # type: ignore[arg-type]
    return SentenceMaps(word_map, present, lm.facts.cls_token, lm.facts.sep_token)


def example_options(row: DependencyRow, lm: LoadedModel, n_sentences: int) -> list[Option]:
    """The example's sentence, layer, head, direction and arcs drawn; the layer, head and direction of the best head."""
    f = lm.facts
    return [
        Option(EXAMPLE["sentence"], "sentence", 0, lo=0, hi=n_sentences - 1),
        Option(EXAMPLE["layer"], "layer", row.layer + 1, lo=1, hi=f.n_layers),
        Option(EXAMPLE["head"], "head", row.head + 1, lo=1, hi=f.n_heads),
        Option(EXAMPLE["dir"], "dir", row.direction, DIRECTION_PARAMS),
        Option("deps_every_word", "arcs", False),
    ]


def example_controls(options: list[Option], sentences: list[Sentence], n_layers: int, n_heads: int) -> dict:
    """The example's widgets; their values by URL key."""
    values = bind(options)
    sentence, layer, head, direction, _ = (option.key for option in options)
    c1, c2, c3, c4 = st.columns([3, 1, 1, 2])
    c1.selectbox(
        "Sentence",
        range(len(sentences)),
        key=sentence,
        format_func=lambda i: f"{i + 1}. " + " ".join(sentences[i].words)[:110],
    )
    c2.number_input("Layer", 1, n_layers, key=layer)
    c3.number_input("Head", 1, n_heads, key=head)
    c4.radio("Direction", DIRECTIONS, key=direction, horizontal=True)
    return values


def example_viewer(models: list[LoadedModel], sentences: list[Sentence], tables: dict, relation: str, rule: str):
    """One sentence: gold arcs against the arcs a head predicts, and that head's word-level attention; with a second
    model, the same sentence in it beside, at its own best head for the relation."""
    st.subheader("Example")
    lm = models[0]
    row = next(r for r in tables[lm.facts.name].rows if r.relation == relation)
    with_relation = [s for s in sentences if relation == ALL or relation in s.deprels][:MAX_EXAMPLES]
    if not with_relation:
        st.info("No sentence has this relation.")
        return
    options = example_options(row, lm, len(with_relation))
    values = example_controls(options, with_relation, lm.facts.n_layers, lm.facts.n_heads)
    sentence = with_relation[values["sentence"]]
    every_word = st.checkbox(
        "Draw the predicted arc of every word, not only of this relation's dependents", key=options[-1].key
    )
    heads = {lm.facts.name: (values["layer"], values["head"], values["dir"])}
    for other in models[1:]:
        rows = tables[other.facts.name].rows if other.facts.name in tables else []
        best = next((r for r in rows if r.relation == relation), None)
        if best is None:
            st.caption(f"{other.facts.name} has no best head for '{relation}' (too few dependents).")
        else:
            heads[other.facts.name] = (best.layer + 1, best.head + 1, best.direction)
    headers = [f"**{m}** · head {l}-{h} {d}" for m, (l, h, d) in heads.items()]
    if len(heads) > 1:
        st.caption(f"The second model is shown at its own best head for '{relation}' (its Table 1 row).")
    long_sentence = len(heads) > 1 or sum(len(w) + 2 for w in sentence.words) > 80
    for k, (column, (model, head)) in enumerate(zip(model_columns(headers), heads.items())):
        with column:
            figures = example_figures(model, sentence, relation, rule, head, every_word)
            if figures is not None:
                draw_example(*figures, long_sentence, "" if k == 0 else f"_{k + 1}")
    st.caption(
        "Gold arcs above the words (head → dependent), the chosen head's predictions below: green where the "
        "predicted head is the gold one, red where it is not. dep->head: each word predicts the word its row "
        "gives most attention to; head<-dep: the word whose row gives it most attention (its column's maximum). "
        "CLS/SEP and the diagonal are left out; ties go to the leftmost word."
    )


def example_figures(
    model: str, sentence: Sentence, relation: str, rule: str, head: tuple, every_word: bool
) -> tuple[go.Figure, go.Figure] | None:
    """(arc diagram, word-level heatmap) of one model's head (layer, head 1-based, direction) on the sentence."""
    layer, head_number, direction = head
    maps = example_maps(model, tuple(sentence.words), rule)
    if maps is None:
        st.warning(f"This sentence is longer than {model} takes; it was skipped in its table.")
        return None
    causal = model_named(model).facts.causal
    found = head_on_sentence(
        maps.word_map, maps.present, sentence, relation, layer - 1, head_number - 1, direction, causal
    )
    title = f"Head {layer}-{head_number}, {direction}: {found.hits} of {found.n_arcs} '{relation}' arcs found"
    drawn = [True] * len(found.focus) if every_word else found.focus
    arcs = arc_diagram(sentence.words, sentence.heads, sentence.deprels, found.predicted, drawn, title)
    labels = [maps.cls] + sentence.words + [maps.sep]
    heat_title = f"Word-level attention of head {layer}-{head_number}"
    return arcs, attention_heatmap(maps.word_map[layer - 1, head_number - 1], labels, labels, heat_title)


def draw_example(arcs: go.Figure, heat: go.Figure, stacked: bool, suffix: str) -> None:
    """The arcs beside the head's attention (one above the other when stacked: a long sentence, or two models)."""
    left, right = (st.container(), st.container()) if stacked else st.columns([3, 2])
    with left:
        chart(arcs, f"dependency_arcs{suffix}", f"deps_arcs{suffix}")
    with right:
        chart(heat, f"dependency_head_attention{suffix}", f"deps_example_heatmap{suffix}")
