"""The skeleton every corpus page fills: its inputs (a loaded result file, else the corpus picker), its options, the
second model (its result file, else the compared model on the same corpus), each model's result (shipped, or
computed through the analysis once per model, corpus and options with a progress bar, or from a file; refused in
words) as one `Shown` type, which the page's views then draw. A page declares its analysis, options and views."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

import pandas as pd
import streamlit as st

from attnlib.analyses.base import OPTIONAL_SOURCES, AnalysisRun, Options
from attnlib.analyses.registry import analysis_named
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from attnlib.results.files import ResultFile
from ui.sources.compare import Second, second_source
from ui.sources.corpus_picker import CorpusChoice, Kind, corpus_picker
from ui.sources.result_source import (
    REFUSED,
    RUNNING,
    Bar,
    FromFile,
    computed,
    loaded_result,
    run_in_file,
    shipped_or_computed,
)
from ui.widgets.data_table import data_table
from ui.widgets.downloads import download_json, download_table

REFUSAL = "The corpus could not be analysed with {model}: {error}"  # a refusal's sentence, unless a page says its own

T = TypeVar("T")
O = TypeVar("O")  # a page's options
S = TypeVar("S", bound="Shown[Any]")  # a page's shown result: Shown, or a page's own with more fields


@dataclass
class Shown(Generic[T]):
    """One model's result as a corpus page shows it: which model, the result, its corpus, where it came from, its
    caveats (a part the result lacks -> why) and the whole run (the model's facts, the options, the provenance)."""

    model: str
    result: T  # the run's result as the page's options show it (or the part of it a page draws)
    corpus: str  # the corpus's name
    source: str  # "computed here", "precomputed, shipped ..." or the result file's origin
    choice: CorpusChoice | None = None  # the corpus chosen on the page; None for a result file (its own texts)
    caveats: dict[str, str] = field(default_factory=dict)
    run: AnalysisRun | None = None  # the run: its `to_json()` is the command's JSON (None: a page's own result)

    @property
    def from_file(self) -> bool:
        """Whether the result was loaded from a result file."""
        return self.choice is None

    @property
    def inputs(self) -> list[CorpusInput] | None:
        """The chosen corpus's inputs (None for a result file)."""
        return None if self.choice is None else self.choice.inputs


def file_shown(found: FromFile[T], options: Any = None) -> Shown[T]:
    """A result file's result as shown, named by its file and provenance, with the run it holds."""
    origin = f"from {found.name}, {found.record.provenance()}"
    return Shown(found.model, found.value, found.corpus, origin, run=run_in_file(found.record, read=found.value))


def file_shown_as(found: FromFile[Any], options: Any) -> Shown[Any]:
    """A result file's run as these options show it (its `for_options`: a measure, thresholds)."""
    run = run_in_file(found.record, options, found.value)
    return replace(file_shown(found), result=run.result, run=run)


AskFirst = Callable[[LoadedModel, CorpusChoice, Any], str | None]  # (model, corpus, options) -> the cost, said first


def result_on_corpus(
    analysis: str,
    model_name: str,
    choice: CorpusChoice,
    options: Options,
    bar: Bar = RUNNING,
    ask_first: str | None = None,
    refusal: str = REFUSAL,
) -> tuple[AnalysisRun | None, str]:
    """One model's run of an analysis on the chosen corpus (its result with the model's facts, the options computed,
    the view's at their defaults, and the provenance) and where it came from: shipped when one answers, else computed
    (`computed`, cached, with its bar) at once or, given `ask_first` (the cost, said first), once asked. (None, "")
    before it is asked, or after a refusal in words (`refusal`: its sentence, of {model} and {error})."""
    found = analysis_named(analysis)
    wanted = found.computed(options)
    (source,) = found.sources or OPTIONAL_SOURCES[found.reads]  # the corpus (an analysis of the model: its optional)
    inputs = {source: choice.inputs}
    try:
        return shipped_or_computed(
            analysis,
            model_name,
            choice,
            wanted,
            lambda: computed(analysis, model_name, choice.fingerprint, wanted, inputs, bar),
            ask_first=ask_first,
        )
    except REFUSED as exc:
        st.error(refusal.format(model=model_name, error=exc))
        return None, ""


@dataclass
class Inputs(Generic[O]):
    """What the sidebar chose: the first model's result file (or None), the corpus (None beside a file), the options."""

    loaded: FromFile[Any] | None
    choice: CorpusChoice | None
    options: O


@dataclass
class CorpusPage(Generic[O, S]):
    """What a corpus page fills in: its key and command, its option widgets, how one model's result is found on the
    chosen corpus (shipped or computed, None after a message) and how a result file is shown."""

    key: str  # widget keys start with it
    analysis: str  # the command whose result files the page opens
    options: Callable[[LoadedModel, bool], O]  # draws the option widgets (told whether a file is loaded)
    result: Callable[[LoadedModel, CorpusChoice, O], S | None] | None = None  # default: on_corpus
    from_file: Callable[[FromFile[Any], O], S] = file_shown  # type: ignore[assignment]
    parse: Callable[[ResultFile], Any] | None = None  # default: the analysis's own reading of its files
    analysis_options: Callable[[O], Options] = lambda options: options  # type: ignore[assignment,return-value]
    default_limit: int = 200
    kind: Kind = "any"  # the corpora the picker offers ("conllu": treebanks only)
    corpus: Callable[[bool], CorpusChoice | None] | None = None  # the page's own corpus widgets, told whether a file
    # is loaded (None beside one); default: the corpus picker
    section: str = ""  # the part of the page the files are for, when a page has several
    first_needed: bool = True  # whether the second model is shown only beside the first's result
    bar: Bar = RUNNING  # the computation's progress bar
    ask_first: AskFirst | None = None  # what computing costs, said before it starts (None: computed at once)
    unavailable: Callable[[LoadedModel], str | None] | None = None  # why a model cannot be analysed at all, if so
    refusal: str = REFUSAL  # the sentence of a refusal, of {model} and {error}

    def on_corpus(self, lm: LoadedModel, choice: CorpusChoice, options: O) -> Shown[Any] | None:
        """One model's result on the chosen corpus, as these options show it: shipped when one answers, else computed
        (once asked, where the page says the cost first); None after a refusal in words, or before it is asked."""
        name = lm.facts.name
        reason = None if self.unavailable is None else self.unavailable(lm)
        if reason is not None:
            st.error(reason)
            return None
        wanted = self.analysis_options(options)
        ask = None if self.ask_first is None else self.ask_first(lm, choice, wanted)
        found, source = result_on_corpus(self.analysis, name, choice, wanted, self.bar, ask, self.refusal)
        if found is None:
            return None
        run = found.as_options(wanted)
        return Shown(name, run.result, choice.label, source, choice, run=run)

    def model_result(self, lm: LoadedModel, choice: CorpusChoice, options: O) -> S | None:
        """One model's result on the chosen corpus as the page shows it (its own `result`, else `on_corpus`)."""
        found = self.on_corpus(lm, choice, options) if self.result is None else self.result(lm, choice, options)
        return found  # type: ignore[return-value]

    @property
    def reader(self) -> Callable[[ResultFile], Any]:
        """How the page reads the command's result files."""
        return self.parse or analysis_named(self.analysis).from_record

    def loaded(self) -> FromFile[Any] | None:
        """The first model's result file (sidebar), or None."""
        return loaded_result(self.key, self.analysis, self.reader, section=self.section)

    def inputs(self, lm: LoadedModel) -> Inputs[O]:
        """The sidebar in order: the result file, the corpus (when there is no file), the options."""
        loaded = self.loaded()
        if self.corpus is not None:
            choice = self.corpus(loaded is not None)
        else:
            choice = self.picker() if loaded is None else None
        return Inputs(loaded, choice, self.options(lm, loaded is not None))

    def picker(self) -> CorpusChoice | None:
        """The corpus widgets (sidebar) and the chosen corpus, or None with a message shown."""
        return corpus_picker(self.key, self.kind, default_limit=self.default_limit)

    def second(self, lm: LoadedModel, given: Inputs[O]) -> Second[Any]:
        """The second model: its result file, else the compared model to run on the corpus, else nothing."""
        first_name = lm.facts.name if given.loaded is None else given.loaded.model
        corpus = None if given.choice is None else given.choice.described()
        options = self.analysis_options(given.options)
        return second_source(
            self.key, self.analysis, self.reader, first_name, given.loaded, corpus, options, self.section
        )

    def results(self, lm: LoadedModel, given: Inputs[O], second: Second[Any]) -> list[S]:
        """The first model's result (its file, else on the corpus) and the second's (its file, else on the corpus)."""
        loaded, choice, options = given.loaded, given.choice, given.options
        first = (
            self.from_file(loaded, options) if loaded else (self.model_result(lm, choice, options) if choice else None)
        )
        if first is None and self.first_needed:
            return []
        if second.file is not None:
            other: S | None = self.from_file(second.file, options)
        else:
            other = self.model_result(second.model, choice, options) if second.model and choice else None
        return [shown for shown in (first, other) if shown is not None]

    def shown(self, lm: LoadedModel) -> list[S]:
        """The whole skeleton: the inputs, the second model, and the results the views show (empty: nothing to)."""
        given = self.inputs(lm)
        return self.results(lm, given, self.second(lm, given))


def one_corpus(lm: LoadedModel, pages: Sequence[CorpusPage[O, Any]]) -> list[Inputs[O]]:
    """The inputs of corpus pages that share one page, one corpus and one set of options (the first page's widgets):
    the options, each page's result file, then the corpus (none beside a result file), in that order in the sidebar."""
    options = pages[0].options(lm, False)
    loaded = [page.loaded() for page in pages]
    choice = None if any(loaded) else pages[0].picker()
    return [Inputs(found, choice, options) for found in loaded]


def runs_json(views: Sequence[Shown[Any]]) -> dict:
    """The JSON of the runs shown: one model's is what `attnlib <command> --json` prints; two models' are
    {"models": [the first's, the second's]}."""
    parts = [v.run.to_json() for v in views if v.run is not None]
    return parts[0] if len(parts) == 1 else {"models": parts}


def every_head_tab(
    views: Sequence[Shown[Any]], title: str, name: str, key: str, formats: dict[str, str] | None = None
) -> None:
    """A page's table of every head of every model shown (its result's table of that title), its CSV, and the runs'
    JSON, what `attnlib <command> --json` prints."""
    command = next(v.run.analysis.name for v in views if v.run is not None)
    st.markdown(f"Every head (layers and heads from 1); the JSON counts from 0, like `attnlib {command} --json`.")
    table = pd.concat([v.result.tables(v.model)[title] for v in views], ignore_index=True)
    data_table(table, key=f"{key}_heads", formats=formats)
    download_table(table, name, key=f"{key}_heads_csv")
    download_json(lambda: runs_json(views), name, key=f"{key}_json")
