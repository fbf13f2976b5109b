"""Report: every corpus statistic of the model (and the compared one) as one self-contained HTML file to download."""

from __future__ import annotations

import time
from pathlib import Path

import streamlit as st

from attnlib.core.corpus import CorpusError, CorpusInput
from attnlib.core.model import DEFAULT_MODEL
from attnlib.core.runner import InputError
from attnlib.present.report import REPORT_PARTS, ReportOptions, render_report, report_of_inputs
from attnlib.results.shipped import TREEBANKS
from ui.sources.compare import COMPARE, compared_model
from ui.sources.corpus_picker import CorpusChoice, chosen_corpus, corpus_picker
from ui.sources.model_sidebar import current_model, model_named
from ui.sources.page_state import Option, bind
from ui.widgets.family_notes import encoder_part_notes
from ui.widgets.methods import cite_methods
from ui.widgets.progress import progress

KEY = "report"
NONE = "none"
TREEBANK_CHOICES = {NONE: "None", **{label: label for label in TREEBANKS}, "upload": "Upload a CoNLL-U file"}
TREEBANK = Option(f"{KEY}_trees", "trees", NONE, TREEBANK_CHOICES)
TRAIN = Option(f"{KEY}_train", "train", NONE, TREEBANK_CHOICES)
MIN_COUNT = Option(f"{KEY}_min", "min", 20, lo=1, hi=100_000)
SECTIONS = sorted({n for part in REPORT_PARTS for n in part.methods})


def treebank_choice(option: Option, label: str, limit: int) -> CorpusChoice | None:
    """A gold treebank for a part (shipped or uploaded, first `limit` sentences), or None when none is chosen."""
    choice = st.selectbox(label, list(TREEBANK_CHOICES), format_func=TREEBANK_CHOICES.get, key=option.key)
    if choice == NONE:
        return None
    return chosen_corpus(option.key, TREEBANK_CHOICES[choice], "conllu", limit)


def inputs_sidebar() -> dict[str, CorpusChoice]:
    """The corpus and, optionally, a treebank (dependency heads) and a training treebank (probe): source -> choice."""
    corpus = corpus_picker(KEY, default_limit=50)
    limit = int(st.session_state.get(f"{KEY}_limit", 50))
    bind([TREEBANK, TRAIN, MIN_COUNT])
    chosen = {} if corpus is None else {"corpus": corpus}
    with st.sidebar:
        st.subheader("Treebanks")
        trees = treebank_choice(TREEBANK, "Treebank (dependency heads; the probe's test set)", limit)
        train = treebank_choice(TRAIN, "Training treebank (attention probe)", limit)
        st.number_input("Dependency heads: relations with at least this many dependents", 1, 100_000, key=MIN_COUNT.key)
    if trees is not None:
        chosen["conllu"] = trees
        if train is not None:
            chosen["train"] = train
    elif train is not None:
        st.info("The probe is tested on the treebank above: choose one to include the probe.")
    return chosen


@st.cache_data(max_entries=4, show_spinner=False)
def build(
    models: tuple[str, ...], fingerprints: tuple[str, ...], min_count: int, _chosen: dict[str, CorpusChoice]
) -> tuple[str, float]:
    """The report's HTML and the seconds it took (cached per models, files and minimum count)."""
    start = time.perf_counter()
    inputs: dict[str, list[CorpusInput]] = {source: c.inputs for source, c in _chosen.items()}
    corpora = {s: {"name": c.label, "sha1": c.sha1, "n_inputs": c.n_inputs} for s, c in _chosen.items()}
    with progress("Building the report") as bar:
        report = report_of_inputs(
            [model_named(name) for name in models],
            inputs,
            corpora,
            ReportOptions(min_count=min_count),
            progress=lambda _, done, total: bar(done, total),
        )
        html = render_report(report)
    return html, time.perf_counter() - start


def report_section(models: tuple[str, ...], names: tuple[str, ...], chosen: dict[str, CorpusChoice]) -> None:
    """The build button, then the download of the HTML with its size and time (kept while nothing changes)."""
    fingerprints = tuple(f"{source}={c.fingerprint}" for source, c in chosen.items())
    min_count = int(st.session_state[MIN_COUNT.key])
    key = (models, fingerprints, min_count)
    if st.button("Build the report", type="primary"):
        try:
            st.session_state[f"_{KEY}_built"] = (key, *build(models, fingerprints, min_count, chosen))
        except (CorpusError, InputError, ValueError) as exc:
            st.error(f"The report could not be built: {exc}")
    built = st.session_state.get(f"_{KEY}_built")
    if built is None or built[0] != key:
        return
    _, html, seconds = built
    data = html.encode()
    st.success(f"The report is ready: {len(data) / 1e6:.1f} MB, built in {seconds:.1f} s.")
    st.download_button(
        "Download the report (HTML)",
        data,
        f"attention-report-{'-vs-'.join(Path(n).name for n in names)}.html",
        "text/html",
        key="report_dl",
    )


st.title("Report")
st.caption(
    "Every corpus statistic of the explorer in one HTML file that opens offline: special tokens with value-weighted "
    "norms, local vs global (Hidden Token Attribution, estimate mode), aggregation against layer-output attribution, "
    "dependency heads (with a treebank) and the attention probe (with a training treebank). With a model in the "
    "sidebar's Compare field, both models side by side."
)
lm, other = current_model(), compared_model()
encoder_part_notes(lm, other)
names = (lm.facts.name,) if other is None else (lm.facts.name, other.facts.name)
# the names model_named loads (a folder's path, an id); facts.name is a folder's last part
loaded_as: tuple[str, ...] = (st.session_state.get("model_name", DEFAULT_MODEL),)
if other is not None:
    loaded_as += (str(st.session_state[COMPARE.key]).strip(),)
chosen = inputs_sidebar()
if chosen:
    files = ", ".join(f"{c.label} ({c.n_inputs})" for c in chosen.values())
    st.write(f"**{' vs '.join(names)}** on {files}.")
    report_section(loaded_as, names, chosen)
cite_methods(*SECTIONS)
