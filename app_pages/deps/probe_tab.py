"""The Dependency heads page's second tab, "All heads together": Clark's attention probe (METHODS §14) trained on
one treebank and scored on another, for one or two models, each shipped, trained here or from a result file."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pandas as pd
import streamlit as st

from attnlib.analyses.probe import PROBE, PUNCT, ProbeOptions, ProbeResult, run_probe
from attnlib.core.corpus import CorpusError
from attnlib.core.model import LoadedModel
from attnlib.results.files import ResultFile, ResultFileError
from attnlib.results.shipped import TREEBANKS, file_sha1
from attnlib.views.probe import probe_sentence, relation_bars, weight_heatmaps
from ui.sources.compare import difference_line, second_source
from ui.sources.corpus_picker import SHIPPED, CorpusChoice, kept_upload, parse_upload, read_path
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind
from ui.sources.result_source import FromFile, loaded_result, shipped_or_computed
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.methods import cite_methods
from ui.widgets.progress import progress
from ui.widgets.side_by_side import model_columns

PERCENT = "%.1f"  # how a percentage column is shown (ui.widgets.data_table)
PROBE_CORPORA = {k: v for k, v in SHIPPED.items() if v in TREEBANKS} | {"upload": "Upload a CoNLL-U file"}
PROBE_TRAIN = Option("probe_train", "train", PROBE_CORPORA["ewt-dev"], PROBE_CORPORA)
PROBE_TEST = Option("probe_test", "test", PROBE_CORPORA["ewt-test"], PROBE_CORPORA)
PROBE_LIMIT = Option("probe_limit", "probe_limit", 100_000, lo=1, hi=100_000)
PROBE_HOW = """
Every head's word-level map (section 6) votes for each word's head with one learned weight per direction
(dep->head and head<-dep), plus two weights for ROOT (attention to or from [CLS] and [SEP]): 2 x layers x heads + 2
numbers in all, trained with Adam on the training treebank, one sentence per step, then scored on the other treebank.
The *attention + words* probe makes each weight a function of the two words' input embeddings. UAS counts correct
heads over all words but punctuation; the best single head and the best fixed offset are scored on the same words.
"""


@st.cache_data(max_entries=8, show_spinner=False)
def _probe(model_name: str, train_fp: str, test_fp: str, options: ProbeOptions, _train: list, _test: list) -> dict:
    """The probe's result JSON, trained and scored once per (model, corpora, options); its progress counts the
    training steps too."""
    with progress(f"Training the {options.variant} probe (model runs, then training steps)", "steps") as report:
        return run_probe(model_named(model_name), _train, _test, options, progress=report).to_json()


def _probe_file(option: Option, label: str) -> CorpusChoice | None:
    """One treebank of the probe (shipped or uploaded) as a CorpusChoice, or None with a message shown."""
    if label in TREEBANKS:
        path = TREEBANKS[label]
        sha1 = file_sha1(path)
        return CorpusChoice(label, sha1, sha1, read_path(str(path)), True)
    uploaded = kept_upload(option.key, f"{option.param}: upload a CoNLL-U file", ["conllu"], "Gold trees, CoNLL-U.")
    if uploaded is None:
        return None
    name, data = uploaded
    try:
        return CorpusChoice(name, hashlib.sha1(data).hexdigest(), "", parse_upload(data, name, True), True)
    except CorpusError as exc:
        st.error(str(exc))
        return None


def probe_corpora() -> tuple[CorpusChoice, CorpusChoice] | None:
    """The training and test treebanks (limited); None when missing."""
    bind([PROBE_TRAIN, PROBE_TEST, PROBE_LIMIT])
    c1, c2, c3 = st.columns([2, 2, 1])
    train_label = c1.selectbox("Train on", list(PROBE_CORPORA.values()), key=PROBE_TRAIN.key)
    test_label = c2.selectbox("Score on", list(PROBE_CORPORA.values()), key=PROBE_TEST.key)
    limit = int(c3.number_input("At most this many sentences of each", 1, 100_000, step=100, key=PROBE_LIMIT.key))
    train, test = _probe_file(PROBE_TRAIN, train_label), _probe_file(PROBE_TEST, test_label)
    if train is None or test is None:
        return None
    if not train.inputs or not test.inputs:
        st.error("A treebank of the probe has no sentence.")
        return None
    train, test = (replace(c, inputs=c.inputs[:limit], fingerprint=f"{c.sha1}:{limit}") for c in (train, test))
    return train, test


def probe_result(lm: LoadedModel, train: CorpusChoice, test: CorpusChoice) -> ProbeResult | None:
    """The attention-only probe of a model: shipped, computed earlier, or trained now after the visitor asks."""
    name = lm.facts.name
    n = train.n_inputs + test.n_inputs
    ask = (
        f"{name}: training the probe runs the model over {n} sentences and then trains on {train.n_inputs} "
        "(about a minute for both EWT treebanks on 2 CPU cores)."
    )
    result, source = shipped_or_computed(
        "probe",
        name,
        test,
        ProbeOptions(),
        lambda: _probe(name, train.fingerprint, test.fingerprint, ProbeOptions(), train.inputs, test.inputs),
        lambda record: record.result,
        ask_first=ask,
        train=train,
    )
    if result is None:
        return None
    st.caption(f"{name}, attention-only probe: {source}.")
    return ProbeResult.from_json(result)


def words_probe(lm: LoadedModel, train: CorpusChoice, test: CorpusChoice) -> ProbeResult | None:
    """The attention + words probe, trained when the visitor asks (nothing of it ships); None until then."""
    asked = f"_probe_words:{lm.facts.name}:{train.fingerprint}:{test.fingerprint}"
    if not st.session_state.get(asked):
        if not st.button("Train the attention + words probe too", key="probe_words_button"):
            return None
        st.session_state[asked] = True
    words = ProbeOptions(variant="words")
    found = _probe(lm.facts.name, train.fingerprint, test.fingerprint, words, train.inputs, test.inputs)
    return ProbeResult.from_json(found)


METHODS = ("attention-only probe", "attention + words probe", "best single head", "best fixed offset")


def uas_frame(results: dict[str, tuple[ProbeResult, ProbeResult | None]]) -> pd.DataFrame:
    """UAS of the two probes, the best single head and the best offset, one row per method and model."""
    rows = []
    for model, (attention, words) in results.items():
        best = attention.best_head
        head = f"{best['layer'] + 1}-{best['head'] + 1} {best['direction']}"
        words_uas = None if words is None else words.uas
        values = (attention.uas, words_uas, attention.best_head_accuracy, attention.baseline_accuracy)
        which = ("", "", head, f"{attention.baseline_offset:+d}")
        rows += [
            {"model": model, "method": m, "which": w, "UAS %": None if v is None else 100 * v}
            for m, w, v in zip(METHODS, which, values)
        ]
    return pd.DataFrame(rows)


def relation_frame(results: dict[str, ProbeResult]) -> pd.DataFrame:
    """UAS per relation of the probe, the best head and the best offset, one row per relation and model."""
    return pd.DataFrame(
        [
            {
                "model": model,
                "relation": relation,
                "count": v["count"],
                "probe UAS %": 100 * v["uas"],
                "best head %": 100 * v["best_head_accuracy"],
                "best offset %": 100 * v["baseline_accuracy"],
            }
            for model, result in results.items()
            for relation, v in result.uas_by_relation.items()
        ]
    )


def probe_metrics(result: ProbeResult, words: ProbeResult | None) -> None:
    """The four UAS figures of one model side by side, and what was scored."""
    best = result.best_head
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("UAS, attention-only probe", f"{100 * result.uas:.1f}%")
    m2.metric("UAS, attention + words", "—" if words is None else f"{100 * words.uas:.1f}%")
    m3.metric(f"Best single head ({best['layer'] + 1}-{best['head'] + 1})", f"{100 * result.best_head_accuracy:.1f}%")
    m4.metric(f"Best fixed offset ({result.baseline_offset:+d})", f"{100 * result.baseline_accuracy:.1f}%")
    st.caption(
        f"Trained on {result.n_train} sentences, scored on {result.n_test} ({result.n_words} words without "
        f"punctuation); {result.n_skipped_train} training and {result.n_skipped_test} test sentences were longer "
        "than the model takes and were skipped."
    )


def probe_comparison(results: dict[str, tuple[ProbeResult, ProbeResult | None]]) -> None:
    """Both models' UAS in one table, and where their per-relation UAS differ most."""
    frame, wide = uas_frame(results), pd.DataFrame({"method": METHODS})
    for model in results:
        part = frame[frame["model"] == model].set_index("method")
        wide[f"{model}: UAS %"] = part["UAS %"].reindex(METHODS).to_numpy()
        wide[f"{model}: head or offset"] = part["which"].reindex(METHODS).to_numpy()
    data_table(wide, key="probe_compared_table", formats={f"{m}: UAS %": PERCENT for m in results})
    (a, _), (b, _) = results.values()
    uas = [{"UAS": {"all words": r.uas} | {k: v["uas"] for k, v in r.uas_by_relation.items()}} for r in (a, b)]
    difference_line(list(results), uas[0], uas[1])


def probe_figures(results: dict[str, ProbeResult]) -> None:
    """UAS per relation and one test sentence drawn (two models side by side), and the learned weights."""
    headers = [f"**{model}**" for model in results]
    for k, (column, result) in enumerate(zip(model_columns(headers), results.values())):
        with column:
            probe_bars(result, "" if k == 0 else f"_{k + 1}")
    for k, (model, result) in enumerate(results.items()):  # one below the other: each has two panels already
        probe_weights(result, model, "" if k == 0 else f"_{k + 1}")
    with st.expander("UAS per relation, every relation (table)"):
        percent = {c: PERCENT for c in ("probe UAS %", "best head %", "best offset %")}
        data_table(relation_frame(results), key="probe_relations_table", formats=percent)
    first = next(iter(results.values()))
    sentence = probe_sentence_choice(first)
    for k, (column, (model, result)) in enumerate(zip(model_columns(headers), results.items())):
        with column:
            probe_example(result, sentence if k == 0 else first.sentences[sentence].sent_id, model, k)


def probe_bars(result: ProbeResult, suffix: str) -> None:
    """One model's UAS per relation: the probe, the best head and the best offset."""
    bars = relation_bars(result.uas_by_relation, min_count=20 if result.n_words >= 2000 else 1)
    chart(bars, f"probe_uas_per_relation{suffix}", f"probe_relations{suffix}")


def probe_weights(result: ProbeResult, model: str, suffix: str) -> None:
    """One model's learned weights and the largest of them."""
    weights = weight_heatmaps(result.weight_grid(), f"Learned weight of every head ({model})")
    chart(weights, f"probe_weights{suffix}", f"probe_weights{suffix}")
    top = ", ".join(f"{layer + 1}-{head + 1} {d} ({w:+.2f})" for layer, head, d, w in result.largest_weights(5))
    st.caption(f"Largest weights: {top}. Blue: the head's vote counts for the candidate; red: against.")


def probe_sentence_choice(result: ProbeResult) -> int:
    """The test sentence drawn (kept in the URL), an index into the first model's test sentences."""
    sentences = result.sentences
    option = Option("probe_sentence", "probe_sentence", 0, lo=0, hi=max(len(sentences) - 1, 0))
    bind([option])
    return st.selectbox(
        "Test sentence",
        range(len(sentences)),
        key=option.key,
        format_func=lambda i: f"{i + 1}. " + " ".join(sentences[i].words)[:110],
    )


def probe_example(result: ProbeResult, sentence: int | str, model: str, k: int) -> None:
    """One test sentence (by index, or by id in a second model's result): gold arcs above, the probe's below."""
    found = (
        result.sentences[sentence]
        if isinstance(sentence, int)
        else next((s for s in result.sentences if s.sent_id == sentence), None)
    )
    if found is None:
        st.caption(f"Sentence {sentence} is not among {model}'s test sentences.")
        return
    scored = [r != PUNCT for r in found.deprels]
    hits = sum(int(p == g) for p, g, keep in zip(found.predicted, found.heads, scored) if keep)
    title = f"{found.sent_id}: {hits} of {sum(scored)} heads right"
    fig = probe_sentence(found.words, found.heads, found.deprels, found.predicted, title)
    suffix = "" if k == 0 else f"_{k + 1}"
    chart(fig, f"probe_sentence{suffix}", f"probe_sentence_chart{suffix}")


def parse_probe(record: ResultFile) -> ProbeResult:
    """A `probe` result file of the attention-only probe (the one the page compares)."""
    found = PROBE.from_record(record)
    if found.variant != "attention":
        raise ResultFileError(f"this is the {found.variant} probe; here the page shows the attention probe.")
    return found


def first_probe(lm: LoadedModel, loaded: FromFile[ProbeResult] | None, chosen) -> tuple | None:
    """The first model's (attention-only, words) probes: its loaded file's, else trained (or shipped) on the chosen
    treebanks; None until there is one."""
    if loaded is not None:
        return loaded.value, None
    if chosen is None:
        return None
    result = probe_result(lm, *chosen)
    return None if result is None else (result, words_probe(lm, *chosen))


def probe_section(lm: LoadedModel) -> None:
    """Issue 16: Clark's attention probe trained on one treebank and scored on another, for one or two models; each
    from a result file or trained here."""
    st.header("All heads together")
    st.markdown(PROBE_HOW)
    if lm.facts.causal:
        st.info(
            "A decoder: the probe reads its causal maps as they are (METHODS §18). A word's row covers only itself and "
            "earlier words, so the dep->head features of a later head are zero and the head<-dep features carry it."
        )
    cite_methods(14)
    loaded = loaded_result("probe", "probe", parse_probe, section="probe")
    chosen = probe_corpora() if loaded is None else None
    first_name = lm.facts.name if loaded is None else loaded.model
    test = None if chosen is None else chosen[1].described()
    second = second_source("probe", "probe", parse_probe, first_name, loaded, test, ProbeOptions(), "probe")
    first = first_probe(lm, loaded, chosen)
    if first is None:
        return
    result, words = first
    results = {first_name: first}
    probe_metrics(result, words)
    if second.file is not None:
        results[second.file.model] = (second.file.value, None)
    elif second.model is not None and chosen is not None:
        other = probe_result(second.model, *chosen)
        results |= {second.model.facts.name: (other, None)} if other is not None else {}
    if len(results) > 1:
        probe_comparison(results)
    probe_downloads(results)
    probe_figures({model: attention for model, (attention, _) in results.items()})


def probe_downloads(results: dict[str, tuple[ProbeResult, ProbeResult | None]]) -> None:
    """UAS and per-relation tables (CSV, a model column) and every result (JSON)."""
    c1, c2, c3 = st.columns(3)
    with c1:
        download_table(uas_frame(results), "probe_uas", key="probe_uas_download")
    with c2:
        relations = relation_frame({model: attention for model, (attention, _) in results.items()})
        download_table(relations, "probe_uas_per_relation", key="probe_relations_table_download")
    with c3:
        everything = lambda: {  # noqa: E731 - built on click: every test sentence's heads make it large
            model: {"attention": a.to_json(), "words": None if w is None else w.to_json()}
            for model, (a, w) in results.items()
        }
        download_json(everything, "probe_result", key="probe_json_download")
