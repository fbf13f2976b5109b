"""Where a corpus page's result comes from: a result file (the first model's 'Load a result file instead of computing'
and the second model's uploader under "Compare with", the JSON a command wrote with --out), shipped with the
repository, or computed here (once per analysis, model, corpus and options, with a progress bar), refused in words."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import streamlit as st

from attnlib.analyses.base import AnalysisRun, Options, run_analysis, run_of_record
from attnlib.analyses.errors import USER_ERRORS
from attnlib.analyses.registry import analysis_named
from attnlib.results.files import MAX_RESULT_BYTES, ResultFile, ResultFileError, read_result_file
from attnlib.results.precomputed import shipped_result
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.model_sidebar import model_named
from ui.widgets.progress import progress

T = TypeVar("T")
LOAD_TITLE = "Load a result file instead of computing"
REFUSED = (*USER_ERRORS, ValueError, TypeError)  # what a page says in words: the command line's user errors, and
# what an analysis raises of a model or corpus it cannot take (a model whose attention HTA cannot follow: ValueError;
# deps' counts of sentences without heads: TypeError)


@dataclass
class FromFile(Generic[T]):
    """An uploaded result file: its file name, the record, what the page parsed from it, and the model name shown."""

    name: str
    record: ResultFile
    value: T
    model: str  # the record's model; with the file name when the first result is of the same model

    @property
    def corpus(self) -> str:
        """The corpus file the result was computed on."""
        return str(self.record.corpus.get("name", "?"))


def uploaded_result(label: str, key: str, command: str, parse: Callable[[ResultFile], T]) -> FromFile[T] | None:
    """An uploader (in the current container) for a `python -m attnlib <command> --out FILE` result, parsed.

    The file is kept for the session: a run that does not draw the uploader (another page or tab) forgets its widget,
    so the next run that draws it again uses the kept file until the visitor removes it. A file over the size limit,
    of another command, or malformed is shown as an error and None is returned."""
    kept, had = f"_kept_{key}", f"_had_{key}"
    had_file = key in st.session_state and st.session_state.get(had, False)  # the widget held a file on the last run
    upload = st.file_uploader(
        label,
        type=["json"],
        key=key,
        help="Results computed elsewhere (a GPU machine, a Ray cluster) open here without running the model. "
        "The file is read as JSON only.",
    )
    st.session_state[had] = upload is not None
    if upload is not None:
        if upload.size > MAX_RESULT_BYTES:
            st.error(f"{upload.name} is {upload.size / 1e6:.1f} MB; the limit is {MAX_RESULT_BYTES / 1e6:.0f} MB.")
            return None
        st.session_state[kept] = (upload.name, upload.getvalue())
    elif had_file or kept not in st.session_state:  # removed by the visitor, or never given
        st.session_state.pop(kept, None)
        return None
    elif st.button("Remove", key=f"{key}_remove"):
        st.session_state.pop(kept)
        return None
    else:
        st.caption(f"Using **{st.session_state[kept][0]}**, loaded earlier; upload another file to replace it.")
    name, data = st.session_state[kept]
    try:
        record = read_result_file(data, command)
    except ResultFileError as exc:
        st.error(f"{name}: {exc}")
        return None
    try:
        value = parse(record)
    except ResultFileError as exc:
        st.error(f"{name} cannot be shown: {exc}")
        return None
    return FromFile(name, record, value, record.model)


def loaded_result(key: str, command: str, parse: Callable[[ResultFile], T], section: str = "") -> FromFile[T] | None:
    """The first model's result file of `command` (sidebar), parsed, its origin shown; None to compute instead.

    `section` names the part of the page the file is for, when a page has several."""
    title = f"{LOAD_TITLE} ({section})" if section else LOAD_TITLE
    with st.sidebar, st.expander(title):
        found = uploaded_result(
            f"JSON written by `python -m attnlib {command} ... --out FILE`", f"{key}_result_file", command, parse
        )
    if found is None:
        return None
    st.info(
        f"Showing **{found.name}**, {found.record.provenance()}. Options: {found.record.options_text()}. The sidebar's "
        f"model and corpus are not used; remove the file (sidebar, *{title}*) to compute instead."
    )
    return found


@st.cache_resource(max_entries=64, show_spinner=False)
def _shipped(key: tuple, sha1: str, n_inputs: int, train: tuple[str, int] | None, _parse: Callable) -> Any:
    """A shipped result parsed once per server and shared by every visitor (read only), with where it comes from.

    The cache keys on the analysis, not on `_parse`: each analysis's files are parsed by one page function."""
    analysis, model_name, _, options = key
    record = shipped_result(analysis, model_name, sha1, n_inputs, options, train)
    return None if record is None else (_parse(record), record.provenance())


def run_in_file(record: ResultFile, options: Options | None = None, read: Any = None) -> AnalysisRun:
    """The run a result file holds (its analysis named by the file; `read`: what a page read of it, reused where it is
    the analysis's result), as these options show it (default: its own)."""
    analysis = analysis_named(record.command)
    run = run_of_record(analysis, record, read if isinstance(read, analysis.result) else None)
    return run if options is None else run.as_options(options)


def shipped(
    analysis: str,
    model_name: str,
    choice: CorpusChoice,
    options: Options,
    parse: Callable[[ResultFile], T] | None = None,
    train: CorpusChoice | None = None,
) -> tuple[T, str] | None:
    """The shipped result of an analysis for this model, corpus (a probe's: its test and `train` treebanks) and
    options, parsed (by default the run the file holds, as these options show it), with the file's provenance; None
    when none ships."""
    key = (analysis, model_name, choice.fingerprint, options)
    trained_on = None if train is None else (train.sha1, train.n_inputs)
    read = parse or partial(run_in_file, options=options)
    return _shipped(key, choice.sha1, choice.n_inputs, trained_on, read)


def shipped_or_computed(
    analysis: str,
    model_name: str,
    choice: CorpusChoice,
    options: Options,
    compute: Callable[[], T],
    parse: Callable[[ResultFile], T] | None = None,
    ask_first: str | None = None,
    train: CorpusChoice | None = None,
) -> tuple[T | None, str]:
    """The result (by default the run: `shipped`'s, and `compute`'s) and where it came from; a shipped one shows a
    Recompute button, and with `ask_first` (a sentence on the cost) nothing is computed until the visitor asks.
    `compute` should be a cached function of the page."""
    key = (analysis, model_name, choice.fingerprint, options, None if train is None else train.fingerprint)
    done = st.session_state.setdefault("_results_computed_here", set())
    button = f"{analysis}:{model_name}"
    if key not in done:
        found = shipped(analysis, model_name, choice, options, parse, train)
        asking = st.empty()  # cleared once pressed: the computation below does not show a button still to press
        with asking.container():
            if found is not None:
                pressed = st.button(
                    "Recompute",
                    key=f"recompute:{button}",
                    help="The result shown ships with the app (scripts/precompute.py); this computes it again here.",
                )
                if not pressed:
                    return found[0], f"precomputed, shipped with the app ({found[1]})"
            elif ask_first is not None:
                st.info(ask_first)
                if not st.button(f"Compute for {choice.n_inputs} inputs", type="primary", key=f"compute:{button}"):
                    return None, ""
        asking.empty()
    result = compute()
    done.add(key)
    return result, "computed here"


@dataclass(frozen=True)
class Bar:
    """A computation's progress bar: its words (`{model}` is the model's name), what it counts, and a context the run
    happens in (a page's own reports of a long step), if any."""

    what: str = "Running {model}"
    unit: str = "inputs"
    around: Callable[[], AbstractContextManager[Any]] | None = None

    @contextmanager
    def shown(self, model_name: str) -> Iterator[Callable[[int, int], None]]:
        """The bar (and the page's context) while the computation runs; yields the callback that moves the bar."""
        with progress(self.what.format(model=model_name), self.unit) as report, (self.around or nullcontext)():
            yield report


RUNNING = Bar()  # "Running <model>: N of M inputs"


@st.cache_data(max_entries=32, show_spinner=False)
def computed(
    analysis: str, model_name: str, fingerprint: str, options: Options, _inputs: Mapping[str, Any] | None, _bar: Bar
) -> AnalysisRun:
    """An analysis's run of a model on its inputs (source -> inputs or a file's path), once per analysis, model,
    inputs' fingerprint and options, with its progress bar: the result with the model's facts, the options and the
    provenance, as `attnlib <command>` makes it (the cache pickles it).

    The bar is made here so that a cache hit replays it (and removes it again)."""
    with _bar.shown(model_name) as report:
        lm = model_named(model_name)
        return run_analysis(analysis_named(analysis), lm, options, inputs=_inputs, progress=report)
