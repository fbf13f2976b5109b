"""Dependency heads: Clark et al. (2019) Table 1 for the chosen model, on gold CoNLL-U trees or spaCy-parsed text."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pandas as pd
import streamlit as st

from app_pages.deps.dependency_example import EXAMPLE, example_viewer
from app_pages.deps.probe_tab import PERCENT, probe_section
from attnlib.analyses.deps import (
    DEPS,
    DIRECTIONS,
    PAPER_MODELS,
    DependencyCounts,
    DependencyTable,
    DepsOptions,
    clark_table1,
)
from attnlib.core.corpus import CorpusError, Sentence
from attnlib.core.model import LoadedModel
from attnlib.core.parsing import parse_text, parser_name
from attnlib.core.words import ROW_RULES
from attnlib.results.files import ResultFile
from attnlib.results.shipped import CLASSROOM
from attnlib.views.deps import head_accuracy_heatmaps
from ui.sources.compare import Second, difference_line
from ui.sources.corpus_page import CorpusPage, Inputs, Shown
from ui.sources.corpus_picker import SHIPPED, CorpusChoice, kept_upload
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import AnalysisForm, Option, bind, field_option, forget, lazy_tabs
from ui.sources.result_source import Bar
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_table
from ui.widgets.family_notes import encoder_part_notes
from ui.widgets.methods import cite_methods
from ui.widgets.page_tabs import DEPENDENCY_HEADS

SOURCES = {"gold": "Gold trees (CoNLL-U)", "silver": "Text parsed by spaCy (predicted trees)"}
TYPED, UPLOADED = "Type or paste text", "Upload a text file"
SPLITS = {"same": "Select and report on all sentences (the paper)", "halves": "Select on half A, report on half B"}
RULE_NAMES = {
    "mean": "mean of its pieces' rows (the paper)",
    "first": "row of its first piece",
    "max": "maximum over its pieces' rows, renormalised",
}
DEFAULT_TEXT = "The gardener watered the tomatoes every morning.\nMaria's brother plays the trumpet in a jazz band."
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


TEXTS = {k: v for k, v in SHIPPED.items() if v in CLASSROOM} | {"typed": TYPED, "upload": UPLOADED}
SOURCE = Option("deps_source", "trees", "gold", list(SOURCES))
TEXT_CHOICE = Option("deps_text_choice", "corpus", next(iter(TEXTS.values())), TEXTS)
TEXT_LIMIT = Option("deps_text_limit", "limit", 200, lo=1, hi=100_000)
TYPED_TEXT = Option("deps_text", "text", DEFAULT_TEXT)
MIN_COUNT = field_option(DepsOptions(), "min_count", "deps_min_count", "min", lo=1, hi=1_000_000)
RULE = field_option(DepsOptions(), "rule", "deps_rule", "rule", choices=list(ROW_RULES))
SPLIT = Option("deps_split", "split", "same", list(SPLITS))
FORM = AnalysisForm(DepsOptions(), {"min_count": MIN_COUNT, "rule": RULE}, "deps")


@st.cache_data(max_entries=8, show_spinner=False)
def _parsed(digest: str, limit: int, name: str, _text: str) -> list[Sentence]:
    """spaCy parses of a text, once per (text, limit)."""
    return parse_text(_text, name, limit)


def _silver_text() -> tuple[str, str] | None:
    """Sidebar widgets for the text to parse: (label, text), or None with a message shown."""
    with st.sidebar:
        st.subheader("Text to parse")
        choice = st.selectbox("Text", list(TEXTS.values()), key=TEXT_CHOICE.key, label_visibility="collapsed")
        st.number_input("Use at most this many sentences", 1, 100_000, step=50, key=TEXT_LIMIT.key)
        if choice == UPLOADED:
            help = "Plain text: each line is split into sentences; a TAB separates two texts."
            uploaded = kept_upload("deps_text", UPLOADED, ["txt", "tsv"], help)
            if uploaded is None:
                return None
            try:
                return uploaded[0], uploaded[1].decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                st.error(f"{uploaded[0]}: not a UTF-8 text file (byte {exc.start} cannot be decoded).")
                return None
    if choice == TYPED:
        bind([TYPED_TEXT])
        text = st.text_area("Text to parse (one or more sentences per line)", key=TYPED_TEXT.key, height=110)
        return "typed text", text
    return choice, CLASSROOM[choice].read_text(encoding="utf-8")


def silver_corpus() -> CorpusChoice | None:
    """Text parsed by spaCy (not CoNLL-U: its trees are predicted), or None with a message shown."""
    limit = int(bind([TEXT_CHOICE, TEXT_LIMIT])["limit"])
    text = _silver_text()
    if text is None:
        return None
    label, content = text
    digest = hashlib.sha1(content.encode()).hexdigest()
    with st.spinner("Parsing with spaCy…"):
        sentences = _parsed(digest, limit, label, content)
    if not sentences:
        st.warning("The text has no sentence to analyse.")
        return None
    st.sidebar.caption(f"{len(sentences)} sentences parsed from {label}")
    fingerprint = f"spacy:{digest}:{limit}"  # also its SHA-1 in a result file's description of the corpus
    return CorpusChoice(label, fingerprint, fingerprint, list(sentences), is_conllu=False)


def table_options() -> tuple[DepsOptions, bool]:
    """The analysis's options (minimum count, word-level row rule) and whether the best heads are chosen on the other
    half, from the sidebar (kept in the URL)."""
    options = FORM.bind()
    held_out = bind([SPLIT])["split"] == "halves"
    with st.sidebar:
        st.subheader("Table")
        st.number_input(
            "Minimum dependents per relation",
            1,
            1_000_000,
            step=10,
            key=MIN_COUNT.key,
            help="Relations with fewer dependents in the whole corpus are not listed; "
            "'all' is always listed. Lower it for small corpora.",
        )
        st.selectbox(
            "Word rows",
            ROW_RULES,
            key=RULE.key,
            format_func=lambda r: f"{r}: {RULE_NAMES[r]}",
            help="How the attention FROM a word of several pieces is formed (METHODS §6); the "
            "attention TO a word is always the sum of its pieces' columns.",
        )
        st.radio("Best head chosen on", list(SPLITS), key=SPLIT.key, format_func=SPLITS.get)
        FORM.other_widgets()
    return options, held_out


def _paper_frame() -> pd.DataFrame:
    """Clark et al. Table 1 with the closest UD label, as the page shows it."""
    paper = clark_table1()
    return pd.DataFrame(
        {
            "relation (paper)": paper["paper relation"],
            "closest UD label": paper["relation"].fillna("— (UD: case on the noun)"),
            "best head": paper["paper head"],
            "accuracy %": paper["paper accuracy %"],
            "baseline offset": [f"{off:+d}" for off in paper["paper baseline offset"]],
            "baseline accuracy %": paper["paper baseline accuracy %"],
        }
    )


COLUMNS = {"accuracy %": PERCENT, "baseline accuracy %": PERCENT, "margin (points)": "%+.1f"}  # printf formats
CEILING_COLUMNS = {f"ceiling {d} %": PERCENT for d in DIRECTIONS}
CEILING_NOTE = (
    "A decoder's word sees only earlier words: *dep->head* can find a head only to the left of its dependent, "
    "*head<-dep* only to the right (the first word has no dep->head candidate, the last none for head<-dep). The "
    "ceiling columns give, per direction, the share of the relation's dependents whose gold head lies on that visible "
    "side: the best accuracy any head can reach in that direction (METHODS §18). Accuracy is over all dependents, as "
    "for an encoder."
)


def _show_paper_table(is_silver: bool) -> None:
    st.markdown("**Clark et al. (2019), Table 1**: BERT-base uncased, WSJ dev, Stanford Dependencies")
    paper = _paper_frame()
    data_table(paper, key="deps_paper_table", formats=COLUMNS)
    download_table(paper, "clark_2019_table_1", key="deps_paper_table_download")
    labels = (
        "spaCy's labels are ClearNLP's, close to the paper's Stanford labels (dobj, pobj, poss, prep)."
        if is_silver
        else "UD labels differ from the paper's Stanford labels: obj for dobj, nmod:poss for poss, compound for nn, "
        "aux:pass for auxpass, compound:prt for prt; UD has no prep/pobj (a preposition is `case` on its noun)."
    )
    st.caption(labels + " The paper's corpus (WSJ) differs from ours, so the numbers are a reference, not a target.")


def chosen_corpus(is_silver: bool) -> CorpusChoice | None:
    """The treebank or the parsed text; None with a message."""
    try:
        return silver_corpus() if is_silver else PAGE.picker()
    except CorpusError as exc:
        st.error(str(exc))
        return None


def parse_deps(record: ResultFile) -> DependencyCounts:
    """A `deps` result file's counts (its `state`), from which the page makes every table."""
    return DEPS.from_record(record).counts


def corpus_counts(
    lm: LoadedModel, choice: CorpusChoice, chosen: tuple[DepsOptions, bool]
) -> Shown[DependencyCounts] | None:
    """One model's counts on the chosen corpus (the skeleton's: shipped for gold trees, else computed), where they
    came from said; None after a refusal in words."""
    shown = PAGE.on_corpus(lm, choice, chosen)
    if shown is None:
        return None
    st.caption(f"Table 1 of {shown.model} on {choice.label}: {shown.source}.")
    return replace(shown, result=shown.result.counts)


def trees_and_corpus(file_loaded: bool) -> CorpusChoice | None:
    """The choice of trees (kept in the URL), then the treebank or the text spaCy parses; None beside a result file,
    or with a message."""
    bind([SOURCE])
    st.sidebar.radio("Trees", list(SOURCES), key=SOURCE.key, format_func=SOURCES.get)
    return None if file_loaded else chosen_corpus(st.session_state[SOURCE.key] == "silver")


PAGE: CorpusPage[tuple[DepsOptions, bool], Shown[DependencyCounts]] = CorpusPage(
    "deps",
    "deps",
    options=lambda lm, from_file: table_options(),
    result=corpus_counts,
    parse=parse_deps,
    analysis_options=lambda chosen: chosen[0],
    default_limit=100_000,
    kind="conllu",
    corpus=trees_and_corpus,
    section="Table 1",
    bar=Bar("Running the model over the sentences", "sentences"),
    refusal="{model}: {error}",
)


def compared_counts(
    lm: LoadedModel, given: Inputs[tuple[DepsOptions, bool]], second: Second
) -> list[Shown[DependencyCounts]]:
    """The first model's counts (its loaded file, else on the corpus) and the second's (its file, else the compared
    model's on the corpus); empty when the first has none."""
    if given.loaded is None and given.choice is not None and not given.choice.is_conllu:
        st.info(
            f"Predicted parses: these trees come from the spaCy parser {parser_name()}, not from annotators; "
            "the scores measure agreement with the parser."
        )
    views = PAGE.results(lm, given, second)
    rules = {v.model: v.result.rule for v in views}
    if len(set(rules.values())) > 1:
        st.warning("Word rows are merged differently: " + ", ".join(f"{m}: {r}" for m, r in rules.items()) + ".")
    return views


def compared_frame(tables: dict[str, DependencyTable]) -> pd.DataFrame:
    """One column group per model (best head, direction, accuracy, margin) by relation, the first model's relations."""
    first = next(iter(tables.values())).shown_frame().set_index("relation")
    groups = [first[["count"]]]
    for model, table in tables.items():
        frame = table.shown_frame().set_index("relation")
        shown = ["best head", "direction", "accuracy %", "margin (points)", *(c for c in CEILING_COLUMNS if c in frame)]
        groups.append(frame[shown].add_prefix(f"{model}: "))
    return pd.concat(groups, axis=1, join="outer").loc[first.index].reset_index()


def long_frame(tables: dict[str, DependencyTable]) -> pd.DataFrame:
    """Every model's table one below the other, the model named in each row (the download)."""
    return pd.concat([t.shown_frame().assign(model=m)[["model", *t.shown_frame().columns]] for m, t in tables.items()])


def compared_tables(tables: dict[str, DependencyTable]) -> None:
    """Both models' Table 1 side by side, where their best-head accuracies differ most, and the long download."""
    columns = {f"{m}: {c}": config for m in tables for c, config in (COLUMNS | CEILING_COLUMNS).items()}
    data_table(compared_frame(tables), key="deps_compared_table", formats=columns)
    accuracy = [{"best-head accuracy": {r.relation: r.accuracy for r in t.rows}} for t in tables.values()]
    difference_line(list(tables), accuracy[0], accuracy[1])
    download_table(long_frame(tables), "dependency_heads_compared", key="deps_table_download")
    if any(r.ceiling is not None for t in tables.values() for r in t.rows):
        st.caption(CEILING_NOTE)


def table_notes(table: DependencyTable, lm: LoadedModel, from_file: bool, held_out: bool) -> None:
    """Sentences, words and skipped sentences, and how the best heads were chosen."""
    m1, m2, m3 = st.columns(3)
    m1.metric("Sentences analysed", table.n_sentences)
    m2.metric("Words", table.n_words)
    m3.metric("Skipped (too long)", table.n_skipped)
    if table.n_skipped:
        longest = "the model's maximum length" if from_file else f"the model's maximum of {lm.facts.max_length} tokens"
        st.warning(
            f"{table.n_skipped} sentences are longer than {longest}; they were skipped and are not in the table."
        )
    if held_out and table.rows:
        st.caption(
            f"Each best head and best offset was chosen on half A ({table.n_select_sentences} sentences) and "
            f"is scored on half B ({table.n_report_sentences} sentences); counts are half B's. A sentence's "
            "half is fixed by a hash of its words, so identical sentences share a half."
        )


def table_section(tables: dict[str, DependencyTable], label: str, min_count: int, is_silver: bool) -> None:
    """The table of best heads (one column group per model when comparing), beside or above the paper's Table 1."""
    model_name, table = next(iter(tables.items()))
    st.caption(
        "Click a column header to sort. Relations are the DEPREL labels as written, by frequency, without root "
        f"and punct, with at least {min_count} dependents in the whole corpus; 'all' pools every word."
    )
    bert_base = model_name in PAPER_MODELS and len(tables) == 1
    ours, paper = st.columns([3, 2]) if bert_base else (st.container(), None)
    with ours:
        if paper is not None:
            st.markdown(f"**{model_name} on {label}**")
        if len(tables) > 1:
            compared_tables(tables)
        else:
            frame = table.shown_frame()
            causal = any(r.ceiling is not None for r in table.rows)
            data_table(frame, key="deps_table", formats=COLUMNS | (CEILING_COLUMNS if causal else {}))
            download_table(frame, "dependency_heads", key="deps_table_download")
            if causal:
                st.caption(CEILING_NOTE)
    with paper or st.expander("Reference: Clark et al. (2019) Table 1 for BERT-base uncased"):
        _show_paper_table(is_silver)


def relation_section(counts: dict[str, DependencyCounts], tables: dict[str, DependencyTable], held_out: bool) -> str:
    """Every head's accuracy on one chosen relation (kept in the URL), of each model; returns the relation."""
    st.subheader("Every head on one relation")
    relations = [r.relation for r in next(iter(tables.values())).rows]
    relation = Option("deps_relation", "relation", relations[1] if len(relations) > 1 else relations[0], relations)
    bind([relation])
    forget_example = [Option(key, param, 0) for param, key in EXAMPLE.items()]
    chosen = st.selectbox("Relation", relations, key=relation.key, on_change=forget, args=(forget_example,))
    for k, model in enumerate(tables):  # one below the other: each figure has two panels already
        row = next((r for r in tables[model].rows if r.relation == chosen), None)
        if len(tables) > 1:
            st.markdown(f"**{model}**")
        if row is None:
            st.caption(f"{model} has no row for '{chosen}' (too few dependents).")
            continue
        grid = counts[model].accuracy_grid(chosen, half=1 if held_out else None)
        heatmap = head_accuracy_heatmaps(grid, chosen, (row.layer, row.head, DIRECTIONS.index(row.direction)))
        suffix = "" if k == 0 else f"_{k + 1}"
        chart(heatmap, f"dependency_heads_{chosen.replace(':', '_')}{suffix}", f"deps_heatmap{suffix}")
    if held_out:
        st.caption("Accuracies on half B; the red square marks the head chosen on half A.")
    return chosen


def table_one(lm: LoadedModel) -> None:
    """Issues 7, 15, 17: the best head per relation for one or two models, every head on one relation, an example."""
    given = PAGE.inputs(lm)
    loaded, is_silver = given.loaded, given.choice is not None and not given.choice.is_conllu
    (options, held_out), second = given.options, PAGE.second(lm, given)
    views = compared_counts(lm, given, second)
    if not views:
        return
    min_count, rule = options.min_count, options.rule
    counts = {v.model: v.result for v in views}
    tables = {model: c.table(min_count=min_count, held_out=held_out) for model, c in counts.items()}
    table = tables[views[0].model]
    table_notes(table, lm, loaded is not None, held_out)
    if not table.rows:
        st.warning("No sentence could be analysed.")
        return
    for model in [m for m, t in tables.items() if not t.rows]:
        st.warning(f"{model}: no sentence could be analysed; it is left out.")
        del tables[model]
    table_section(tables, views[0].corpus, min_count, is_silver)
    relation = relation_section(counts, tables, held_out)
    sentences = views[0].inputs
    if sentences is None:
        st.info("The example sentence needs the corpus itself: remove the result file to choose one in the sidebar.")
        return
    models = [lm] + ([second.model] if second.model is not None and second.model.facts.name in tables else [])
    if second.file is not None:
        st.caption("The example shows the first model only: the second model's result comes from a file.")
    example_viewer(models, sentences, tables, relation, rule)


TABS = DEPENDENCY_HEADS
TAB = Option("deps_tab", "tab", TABS["table"], TABS, omit_default=True)

st.title("Dependency heads")
st.caption(
    "Which single attention head finds which syntactic relation, against the best fixed-offset baseline "
    "(Clark et al. 2019, sections 4 and 5, Table 1). Layers and heads are numbered from 1 (layer-head, as in the "
    "paper); the command line and JSON count from 0."
)
with st.expander("How the numbers are computed"):
    st.markdown(HOW)
cite_methods(6, 7)
encoder_part_notes()
lm = current_model()
label, tab = lazy_tabs(TAB, list(TABS.values()))
with tab:
    if label == TABS["table"]:
        table_one(lm)
    else:
        probe_section(lm)
