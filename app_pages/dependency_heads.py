"""Dependency heads: Clark et al. (2019) Table 1 for the chosen model, on gold CoNLL-U trees or spaCy-parsed text."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.corpus import CorpusError, Sentence
from attnlib.deps import (
    ALL,
    CLARK_TABLE1,
    DIRECTIONS,
    DependencyCounts,
    DependencyTable,
    count_dependencies,
    dependency_counts_from_json,
    predict_heads,
    sentence_word_map,
)
from attnlib.parsing import parse_text, parser_name
from attnlib.runner import InputError, run
from attnlib.shipped import CLASSROOM
from attnlib.words import ROW_RULES
from figures.deps import arc_diagram, head_accuracy_heatmaps
from figures.heatmap import attention_heatmap
from ui.corpus_picker import corpus_picker, upload_bytes
from ui.downloads import download_figure, download_table
from ui.model_sidebar import cached_model, current_model, local_models_allowed
from ui.result_file import loaded_result

SOURCES = {"gold": "Gold trees (CoNLL-U)", "silver": "Text parsed by spaCy (predicted trees)"}
TYPED, UPLOADED = "Type or paste text", "Upload a text file"
SPLITS = {"same": "Select and report on all sentences (the paper)", "halves": "Select on half A, report on half B"}
RULE_NAMES = {
    "mean": "mean of its pieces' rows (the paper)",
    "first": "row of its first piece",
    "max": "maximum over its pieces' rows, renormalised",
}
BERT_BASE = {"bert-base-uncased", "google-bert/bert-base-uncased"}
DEFAULT_TEXT = "The gardener watered the tomatoes every morning.\nMaria's brother plays the trumpet in a jazz band."
MAX_EXAMPLES = 500
HOW = """
- **Words.** Each word of the tree is tokenized on its own. The attention *to* a word is the sum of its pieces'
  columns; the attention *from* a word merges its pieces' rows (the mean, as in the paper, or the first piece, or the
  maximum renormalised). [CLS] and [SEP] stay as their own rows and columns, then are left out, with the diagonal.
- **Predictions.** *dep->head*: each word predicts the word it attends to most. *head<-dep*: each word predicts the word
  that attends most to it. Ties go to the leftmost word; the root can never be predicted.
- **Accuracy** of a relation: correct dependents with that label / all its dependents, pooled over the corpus. The row
  *all* pools every word, root and punctuation included. Relations are listed by frequency, without root and punct.
- **Best head**: the best (layer, head, direction); ties go to the lower layer, then head, then dep->head.
- **Baseline**: a fixed offset, head = word position + k for k in -3..+3 (not 0), the best k per relation (ties to the
  most negative k). Margin = head accuracy - baseline accuracy, in points.
- Sentences longer than the model takes are skipped and counted, never cut.
"""


def _init_state() -> None:
    """Widget values from the URL on the first run of a session."""
    state, params = st.session_state, st.query_params
    if "deps_source" in state:
        return
    state.deps_source = params.get("src", "gold")
    if state.deps_source not in SOURCES:
        state.deps_source = "gold"
    state.deps_min_count = max(1, int(params["min"])) if str(params.get("min", "")).isdigit() else 100
    state.deps_rule = params.get("rule", "mean") if params.get("rule", "mean") in ROW_RULES else "mean"
    state.deps_split = params.get("split", "same") if params.get("split", "same") in SPLITS else "same"
    if "rel" in params:
        state.deps_relation = params["rel"]


@st.cache_data(max_entries=8, show_spinner=False)
def _parsed(digest: str, limit: int, name: str, _text: str) -> list[Sentence]:
    """spaCy parses of a text, once per (text, limit)."""
    return parse_text(_text, name, limit)


@st.cache_data(max_entries=8, show_spinner=False)
def _counts(model_name: str, fingerprint: str, rule: str, _sentences: list[Sentence]) -> DependencyCounts:
    """Every head's dependency predictions over the corpus, counted once per (model, corpus, row rule)."""
    lm = cached_model(model_name, local_models_allowed())
    bar = st.progress(0.0, text="Running the model over the sentences…")
    counts = count_dependencies(
        lm,
        _sentences,
        rule,  # type: ignore[arg-type]
        progress=lambda done, total: bar.progress(done / total, text=f"{done} of {total} sentences"),
    )
    bar.empty()
    return counts


@st.cache_data(max_entries=32, show_spinner=False)
def _example(model_name: str, words: tuple[str, ...], rule: str) -> tuple[np.ndarray, np.ndarray, bool, str, str]:
    """Word-level maps [L, H, m+2, m+2] of one sentence, its mask of words with pieces, truncation, and CLS/SEP names."""
    lm = cached_model(model_name, local_models_allowed())
    result = run(lm, list(words), capture_qk=False)
    if result.truncated:
        return np.zeros((0,)), np.zeros((0,), bool), True, lm.facts.cls_token, lm.facts.sep_token
    word_map, present = sentence_word_map(result, words, rule)  # type: ignore[arg-type]
    return word_map, present, False, lm.facts.cls_token, lm.facts.sep_token


def _silver_corpus() -> tuple[str, str, list[Sentence]] | None:
    """Sidebar widgets for text to parse; returns (label, fingerprint, parsed sentences) or None with a message shown."""
    with st.sidebar:
        st.subheader("Text to parse")
        choice = st.selectbox(
            "Text", list(CLASSROOM) + [TYPED, UPLOADED], key="deps_text_choice", label_visibility="collapsed"
        )
        limit = int(st.number_input("Use at most this many sentences", 1, 100_000, 200, step=50, key="deps_text_limit"))
        if choice == UPLOADED:
            upload = st.file_uploader(
                UPLOADED,
                type=["txt", "tsv"],
                key="deps_text_upload",
                help="Plain text: each line is split into sentences; a TAB separates two texts.",
            )
            if upload is None:
                st.info("Choose a text file to parse.")
                return None
            data = upload_bytes(upload)
            if data is None:
                return None
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                st.error(f"{upload.name}: not a UTF-8 text file (byte {exc.start} cannot be decoded).")
                return None
            label = upload.name
    if choice == TYPED:
        text = st.text_area("Text to parse (one or more sentences per line)", DEFAULT_TEXT, key="deps_text", height=110)
        label = "typed text"
    elif choice in CLASSROOM:
        text, label = CLASSROOM[choice].read_text(encoding="utf-8"), choice
    digest = hashlib.sha1(text.encode()).hexdigest()
    with st.spinner("Parsing with spaCy…"):
        sentences = _parsed(digest, limit, label, text)
    if not sentences:
        st.warning("The text has no sentence to analyse.")
        return None
    st.sidebar.caption(f"{len(sentences)} sentences parsed from {label}")
    return label, f"spacy:{digest}:{limit}", sentences


def _options() -> tuple[int, str, bool]:
    """Minimum count, word-level row rule and selection mode, from the sidebar."""
    with st.sidebar:
        st.subheader("Table")
        min_count = int(
            st.number_input(
                "Minimum dependents per relation",
                1,
                1_000_000,
                step=10,
                key="deps_min_count",
                help="Relations with fewer dependents in the whole corpus are not listed; "
                "'all' is always listed. Lower it for small corpora.",
            )
        )
        rule = st.selectbox(
            "Word rows",
            ROW_RULES,
            key="deps_rule",
            format_func=lambda r: f"{r}: {RULE_NAMES[r]}",
            help="How the attention FROM a word of several pieces is formed (METHODS §6); the "
            "attention TO a word is always the sum of its pieces' columns.",
        )
        split = st.radio("Best head chosen on", list(SPLITS), key="deps_split", format_func=SPLITS.get)
    st.query_params.update({"min": str(min_count), "rule": rule, "split": split})
    return min_count, rule, split == "halves"


def _table_frame(table: DependencyTable) -> pd.DataFrame:
    """The table as shown and downloaded: heads 1-based, accuracies in percent."""
    return pd.DataFrame(
        [
            {
                "relation": r.relation,
                "count": r.count,
                "best head": f"{r.layer + 1}-{r.head + 1}",
                "layer": r.layer + 1,
                "head": r.head + 1,
                "direction": r.direction,
                "accuracy %": 100 * r.accuracy,
                "baseline offset": f"{r.baseline_offset:+d}",
                "baseline accuracy %": 100 * r.baseline_accuracy,
                "margin (points)": 100 * r.margin,
            }
            for r in table.rows
        ]
    )


def _paper_frame() -> pd.DataFrame:
    """Clark et al. Table 1 with the closest UD label."""
    return pd.DataFrame(
        [
            {
                "relation (paper)": rel,
                "closest UD label": ud or "— (UD: case on the noun)",
                "best head": lh,
                "accuracy %": acc,
                "baseline offset": f"{off:+d}",
                "baseline accuracy %": base,
            }
            for rel, ud, lh, acc, base, off in CLARK_TABLE1
        ]
    )


PERCENT = st.column_config.NumberColumn(format="%.1f")
COLUMNS = {
    "accuracy %": PERCENT,
    "baseline accuracy %": PERCENT,
    "margin (points)": st.column_config.NumberColumn(format="%+.1f"),
}


def _show_paper_table(is_silver: bool) -> None:
    st.markdown("**Clark et al. (2019), Table 1**: BERT-base uncased, WSJ dev, Stanford Dependencies")
    st.dataframe(_paper_frame(), hide_index=True, column_config=COLUMNS)
    labels = (
        "spaCy's labels are ClearNLP's, close to the paper's Stanford labels (dobj, pobj, poss, prep)."
        if is_silver
        else "UD labels differ from the paper's Stanford labels: obj for dobj, nmod:poss for poss, compound for nn, "
        "aux:pass for auxpass, compound:prt for prt; UD has no prep/pobj (a preposition is `case` on its noun)."
    )
    st.caption(labels + " The paper's corpus (WSJ) differs from ours, so the numbers are a reference, not a target.")


def _example_viewer(
    lm, sentences: list[Sentence], counts: DependencyCounts, table: DependencyTable, relation: str, rule: str
) -> None:
    """One sentence: gold arcs against the arcs a chosen head predicts, and that head's word-level attention."""
    st.subheader("Example")
    row = next(r for r in table.rows if r.relation == relation)
    with_relation = [s for s in sentences if relation == ALL or relation in s.deprels][:MAX_EXAMPLES]
    if not with_relation:
        st.info("No sentence has this relation.")
        return
    c1, c2, c3, c4 = st.columns([3, 1, 1, 2])
    index = c1.selectbox(
        "Sentence",
        range(len(with_relation)),
        key=f"deps_example_{relation}",
        format_func=lambda i: f"{i + 1}. " + " ".join(with_relation[i].words)[:110],
    )
    layer = int(c2.number_input("Layer", 1, lm.facts.n_layers, row.layer + 1, key=f"deps_layer_{relation}"))
    head = int(c3.number_input("Head", 1, lm.facts.n_heads, row.head + 1, key=f"deps_head_{relation}"))
    direction = c4.radio(
        "Direction", DIRECTIONS, DIRECTIONS.index(row.direction), key=f"deps_dir_{relation}", horizontal=True
    )
    sentence = with_relation[index]
    word_map, present, truncated, cls, sep = _example(lm.facts.name, tuple(sentence.words), rule)
    if truncated:
        st.warning("This sentence is longer than the model takes; it was skipped in the table.")
        return
    d = DIRECTIONS.index(direction)
    head_map = word_map[layer - 1, head - 1]
    predicted = predict_heads(head_map)[d]
    predicted[~present] = -1
    focus = [relation == ALL or r == relation for r in sentence.deprels]
    hits = sum(int(p == g) for p, g, f in zip(predicted, sentence.heads, focus) if f)
    title = f"Head {layer}-{head}, {direction}: {hits} of {sum(focus)} '{relation}' arcs found"
    every_word = st.checkbox(
        "Draw the predicted arc of every word, not only of this relation's dependents", key="deps_every_word"
    )
    drawn = [True] * len(focus) if every_word else focus
    arcs = arc_diagram(sentence.words, sentence.heads, sentence.deprels, predicted, drawn, title)
    labels = [cls] + sentence.words + [sep]
    heat = attention_heatmap(head_map, labels, labels, f"Word-level attention of head {layer}-{head}")
    long_sentence = sum(len(w) + 2 for w in sentence.words) > 80
    left, right = (st.container(), st.container()) if long_sentence else st.columns([3, 2])
    with left:
        st.plotly_chart(arcs, key="deps_arcs")
        download_figure(arcs, "dependency_arcs", key="deps_arcs_download")
    with right:
        st.plotly_chart(heat, key="deps_example_heatmap")
        download_figure(heat, "dependency_head_attention", key="deps_example_heatmap_download")
    st.caption(
        "Gold arcs above the words (head → dependent), the chosen head's predictions below: green where the "
        "predicted head is the gold one, red where it is not. dep->head: each word predicts the word its row "
        "gives most attention to; head<-dep: the word whose row gives it most attention (its column's maximum). "
        "CLS/SEP and the diagonal are left out; ties go to the leftmost word."
    )


st.title("Dependency heads")
st.caption(
    "Which single attention head finds which syntactic relation, against the best fixed-offset baseline "
    "(Clark et al. 2019, section 4 and Table 1). Layers and heads are numbered from 1 (layer-head, as in the "
    "paper); the command line and JSON count from 0."
)
with st.expander("How the numbers are computed"):
    st.markdown(HOW)
_init_state()
lm = current_model()
loaded = loaded_result("deps", "deps", lambda record: dependency_counts_from_json(record.state or {}))
st.sidebar.radio("Trees", list(SOURCES), key="deps_source", format_func=SOURCES.get)
is_silver = st.session_state.deps_source == "silver" and loaded is None
st.query_params["src"] = st.session_state.deps_source
try:
    if loaded is not None:
        corpus = None
    elif is_silver:
        corpus = _silver_corpus()
    else:
        choice = corpus_picker("deps", kind="conllu")
        corpus = None if choice is None else (choice.label, choice.fingerprint, choice.inputs)
except CorpusError as exc:
    st.error(str(exc))
    corpus = None
min_count, rule, held_out = _options()
if loaded is not None or corpus is not None:
    if loaded is not None:
        record, counts = loaded
        label, model_name, sentences = record.corpus.get("name", "?"), record.model, None
    else:
        label, fingerprint, sentences = corpus
        if is_silver:
            st.info(
                f"Predicted parses: these trees come from the spaCy parser {parser_name()}, not from annotators; "
                "the scores measure agreement with the parser."
            )
        try:
            counts = _counts(lm.facts.name, fingerprint, rule, sentences)
        except (CorpusError, InputError, TypeError) as exc:
            st.error(str(exc))
            st.stop()
        model_name = lm.facts.name
    table = counts.table(min_count=min_count, held_out=held_out)
    m1, m2, m3 = st.columns(3)
    m1.metric("Sentences analysed", table.n_sentences)
    m2.metric("Words", table.n_words)
    m3.metric("Skipped (too long)", table.n_skipped)
    if table.n_skipped:
        longest = "the model's maximum length" if loaded else f"the model's maximum of {lm.facts.max_length} tokens"
        st.warning(
            f"{table.n_skipped} sentences are longer than {longest}; they were skipped and are not in the table."
        )
    if not table.rows:
        st.warning("No sentence could be analysed.")
        st.stop()
    if held_out:
        st.caption(
            f"Each best head and best offset was chosen on half A ({table.n_select_sentences} sentences) and "
            f"is scored on half B ({table.n_report_sentences} sentences); counts are half B's. A sentence's "
            "half is fixed by a hash of its words, so identical sentences share a half."
        )
    frame = _table_frame(table)
    st.caption(
        "Click a column header to sort. Relations are the DEPREL labels as written, by frequency, without root "
        f"and punct, with at least {min_count} dependents in the whole corpus; 'all' pools every word."
    )
    if model_name in BERT_BASE:
        ours, paper = st.columns([3, 2])
        with ours:
            st.markdown(f"**{model_name} on {label}**")
            st.dataframe(frame, hide_index=True, column_config=COLUMNS)
            download_table(frame, "dependency_heads", key="deps_table_download")
        with paper:
            _show_paper_table(is_silver)
    else:
        st.dataframe(frame, hide_index=True, column_config=COLUMNS)
        download_table(frame, "dependency_heads", key="deps_table_download")
        with st.expander("Reference: Clark et al. (2019) Table 1 for BERT-base uncased"):
            _show_paper_table(is_silver)

    st.subheader("Every head on one relation")
    relations = [r.relation for r in table.rows]
    if st.session_state.get("deps_relation") not in relations:
        st.session_state.deps_relation = relations[1] if len(relations) > 1 else relations[0]
    relation = st.selectbox("Relation", relations, key="deps_relation")
    st.query_params["rel"] = relation
    row = next(r for r in table.rows if r.relation == relation)
    grid = counts.accuracy_grid(relation, half=1 if held_out else None)
    heatmap = head_accuracy_heatmaps(grid, relation, (row.layer, row.head, DIRECTIONS.index(row.direction)))
    st.plotly_chart(heatmap, key="deps_heatmap")
    if held_out:
        st.caption("Accuracies on half B; the red square marks the head chosen on half A.")
    download_figure(heatmap, f"dependency_heads_{relation.replace(':', '_')}", key="deps_heatmap_download")
    if sentences is None:
        st.info("The example sentence needs the corpus itself: remove the result file to choose one in the sidebar.")
    else:
        _example_viewer(lm, sentences, counts, table, relation, rule)
