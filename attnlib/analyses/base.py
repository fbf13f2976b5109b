"""The shape of an analysis: its options, what it reads, how it is computed and its result, and running one.

Each analysis module (attention, special, deps, positions, ...) defines one `Analysis` and registers it in
attnlib.analyses.registry. The command line builds its flags from the options dataclass, result files store `asdict(options)`,
and the pages, the Tour, the report and a notebook all run it through `run_analysis` (or `attnlib.analyse`).
"""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, Self, TypeVar, get_args, get_origin, get_type_hints

from attnlib import __version__
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusError, CorpusInput, read_conllu, read_corpus
from attnlib.core.engines import CorpusRun, Fill, Scale, ScaleError, check_device, engine_fill, run_accumulators
from attnlib.core.errors import OptionError as OptionError  # part of this module's API
from attnlib.core.families import Statistic, UnsupportedModelError, unsupported_reason
from attnlib.core.model import LoadedModel, ModelFacts, load_model
from attnlib.results.files import (
    ResultFile,
    ResultFileError,
    corpus_record,
    json_ready,
    text_record,
    write_result_file,
)

if TYPE_CHECKING:
    import pandas as pd

Reads = Literal[
    "text", "corpus", "conllu", "treebanks", "model", "options"
]  # "model": the model alone (a text or corpus optional); "options": what it reads is given by its options (patch's
# clean and corrupted texts or pair file), or nothing beyond the model (compose)
SOURCES: dict[str, tuple[str, ...]] = {  # the inputs of each kind, as the command line's flags name them
    "text": (),
    "corpus": ("corpus",),
    "conllu": ("conllu",),
    "treebanks": ("train", "test"),
    "model": (),
    "options": (),
}
OPTIONAL_SOURCES: dict[str, tuple[str, ...]] = {"model": ("corpus",)}  # inputs an analysis may be given besides
NO_INPUT = {"name": "no input", "path": None, "n_inputs": 0, "sha1": None}  # a run of the model alone
DEFAULT_BATCH_SIZE = 32
Inputs = Sequence[CorpusInput] | str | Path  # a file's path, or inputs already read (plain strings are sentences)


def option(
    default: Any,
    help: str,
    *,
    minimum: int | None = None,
    compare: bool = False,
    adds: bool = False,
    view: bool = False,
    added_later: bool = False,
) -> Any:
    """A field of an options dataclass: its default (the command line's, the pages' and the Tour's) and its help
    (argparse's: `%(default)s` is the default).

    `minimum`: the smallest value an int takes; `compare`: two models' results compare only when it agrees; `adds`: a
    bool that only adds a part to the result, so a result computed with it answers a request without it; `view`: it
    only chooses what the result shows of what was computed, so a result answers any value of it. A result type
    with `for_options(options)` trims or remakes those parts for the options asked. `added_later`: result files
    written without it hold what its default gives (they are read with it)."""
    metadata = {"help": help, "minimum": minimum, "compare": compare, "adds": adds, "view": view}
    return field(default=default, metadata=metadata | {"added_later": added_later})


_HINTS: dict[type, dict[str, Any]] = {}


def option_types(options_type: type) -> dict[str, Any]:
    """The options' field types (annotations resolved), once per class."""
    if options_type not in _HINTS:
        _HINTS[options_type] = get_type_hints(options_type)
    return _HINTS[options_type]


def choices_of(kind: Any) -> tuple | None:
    """The values a Literal annotation allows (None for other types)."""
    return get_args(kind) if get_origin(kind) is Literal else None


def _check(name: str, kind: Any, value: Any, minimum: int | None) -> None:
    choices = choices_of(kind)
    if choices is not None:
        if value not in choices:
            raise OptionError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}")
        return
    if kind is bool:
        if not isinstance(value, bool):
            raise OptionError(f"{name} must be True or False, not {value!r}")
        return
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise OptionError(f"{name} must be a whole number, not {value!r}")
    if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise OptionError(f"{name} must be a number, not {value!r}")
    if kind is str and not isinstance(value, str):
        raise OptionError(f"{name} must be a string, not {value!r}")
    if kind == tuple[str, ...] and not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
        raise OptionError(f"{name} must be a list of strings, not {value!r}")
    if minimum is not None and value < minimum:
        raise OptionError(f"{name} must be at least {minimum}, not {value!r}")


def stored_options(options: Any) -> dict[str, Any]:
    """asdict(options) as a result file stores it (a list option as a list): an option added later is left out at its
    default, so the file is the one an older attnlib wrote (options_from_json fills the default back in)."""
    left_out = {
        f.name for f in fields(options) if f.metadata.get("added_later") and getattr(options, f.name) == f.default
    }
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(options).items() if k not in left_out}


@dataclass(frozen=True)
class Options:
    """Base of every analysis's options (frozen dataclasses of `option` fields), checked when made."""

    def __post_init__(self) -> None:
        hints = option_types(type(self))
        for f in fields(self):
            if hints[f.name] == tuple[str, ...] and isinstance(getattr(self, f.name), list):  # as JSON reads it back
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
            _check(f.name, hints[f.name], getattr(self, f.name), f.metadata.get("minimum"))


class Result(Protocol):
    """What every analysis's result type has: the command's JSON (`to_json`, read back by `from_json`, which raises
    ResultFileError; a result that keeps more than its JSON in a result file, deps' counts, has `state_json()` and
    `from_json(data, state)`), and how it shows itself: its long tables by title (a `model` column first, layers and
    heads numbered from 1) and its figures (attnlib.views, imported when asked: the `views` extra), as the pages,
    the report and a notebook show them."""

    def to_json(self) -> dict[str, Any]: ...

    @classmethod
    def from_json(cls, data: dict[str, Any], /, *args: Any, **kwargs: Any) -> Self: ...

    def tables(self, model: str) -> dict[str, pd.DataFrame]: ...

    def figures(self, model: str) -> list: ...


O = TypeVar("O", bound=Options)
R = TypeVar("R", bound=Result)
MakeAccumulators = Callable[..., list]  # (lm, options) -> empty accumulators
OwnFill = Callable[..., list]  # (lm, inputs, accumulators, batch_size, progress, options) -> filled accumulators


@dataclass(frozen=True)
class FollowUp(Generic[R]):
    """A second pass over the same inputs that the first pass's result decides (importance's pruning curve: the
    order of the heads is known only once every head's effect is): its accumulators and fill as the engines take
    them (they must pickle for Ray), and how its filled accumulators complete the first result."""

    make_accumulators: Callable[[LoadedModel], list]
    fill: Fill
    finish: Callable[[R, list], R]


@dataclass(frozen=True)
class Analysis(Generic[O, R]):
    """One analysis: its name (the CLI command and the result file's `command`), options, inputs, computation, result.

    A one-input analysis (reads "text") gives `compute(lm, item, options)`; an analysis of the model alone (reads
    "model") gives `compute_model(lm, inputs, options, scale)`, `inputs` a text or corpus where one is given, else None
    (`scale`: how independent items such as checkpoints run, here or on Ray); one that also gives `compute` runs that
    on a text instead (routes: one text's graph, or a corpus's frequency). A corpus analysis gives `accumulators(lm,
    options)` (empty mergeable accumulators, so the local and Ray engines both run it), optionally `fill` (its own
    corpus loop, as engines.Fill with the options last), and `finish(*accumulators_per_source, options)`. The result
    type is a `Result` (its JSON is the command's, without the model)."""

    name: str
    help: str
    options: type[O]
    reads: Reads
    result: type[R]
    methods: tuple[int, ...]  # the sections of docs/METHODS.md that define it
    compute: Callable[[LoadedModel, CorpusInput, O], R] | None = None
    accumulators: MakeAccumulators | None = None
    finish: Callable[..., R] | None = None
    fill: OwnFill | None = None
    json_model: bool = True  # the JSON names the model first (deps and probe never did)
    note: Callable[[LoadedModel, CorpusInput, O], str | None] | None = None  # said on stderr before a long run
    needs: Callable[[O], tuple[Statistic, ...]] | None = None  # what these options ask of the model's family, if any
    follow: Callable[[R, O], FollowUp[R] | None] | None = None  # a second pass the first result decides
    conllu_flag: bool = False  # a corpus analysis whose corpus may be given as --conllu PATH too (a CoNLL-U file)
    compute_model: Callable[[LoadedModel, list[CorpusInput] | None, O, Scale], R] | None = None  # reads "model"
    default_corpus: Path | None = None  # the corpus read when none is given (retrieval's haystack); None: it is needed
    whole_corpus: bool = False  # it reads its corpus as one text (retrieval's haystack): the local engine only

    @property
    def sources(self) -> tuple[str, ...]:
        """The inputs it reads, by their command-line names ("corpus"; "train" and "test"; none for a text)."""
        return SOURCES[self.reads]

    def make_options(self, **values: Any) -> O:
        """Its options from keyword values (the rest at their defaults); OptionError for unknown names or bad values."""
        names = [f.name for f in fields(self.options)]
        unknown = sorted(set(values) - set(names))
        if unknown:
            has = ", ".join(names) or "none"
            raise OptionError(f"{self.name} has no option {', '.join(unknown)}; its options: {has}.")
        try:
            return self.options(**values)
        except OptionError as exc:
            raise OptionError(f"{self.name}: {exc}.") from None

    def options_from_json(self, stored: Mapping[str, Any]) -> O:
        """The options a result file stores (asdict); ResultFileError when they are not this analysis's."""
        try:
            options = self.make_options(**stored)
        except (OptionError, TypeError) as exc:
            raise ResultFileError(f"the file's options are not those of `{self.name}` ({exc}).") from exc
        later = {f.name for f in fields(self.options) if f.metadata.get("added_later") and f.name not in stored}
        if json_ready({k: v for k, v in asdict(options).items() if k not in later}) != dict(stored):  # one added since
            missing = sorted(set(asdict(options)) - set(stored) - later)
            raise ResultFileError(f"the file's options lack {', '.join(missing)} (written by an older attnlib).")
        return options

    def compared(self) -> tuple[str, ...]:
        """The options that must agree for two models' results to compare like for like."""
        return tuple(f.name for f in fields(self.options) if f.metadata.get("compare"))

    def answers(self, stored: Mapping[str, Any], wanted: O) -> bool:
        """Whether a result computed with the stored options answers a request for `wanted` (an `adds` part may be
        there without being asked for; `view` options never matter). Options of another analysis answer nothing."""
        if type(wanted) is not self.options:
            return False
        try:
            have = self.options_from_json(stored)
        except ResultFileError:
            return False
        for f in fields(self.options):
            got, asked = getattr(have, f.name), getattr(wanted, f.name)
            if got != asked and not f.metadata.get("view") and not (f.metadata.get("adds") and got and not asked):
                return False
        return True

    def computed(self, options: O) -> O:
        """The options that decide what is computed: the `view` ones at their defaults (a cache key)."""
        return replace(options, **{f.name: f.default for f in fields(self.options) if f.metadata.get("view")})

    def for_options(self, result: R, options: O) -> R:
        """A result (shipped, cached) as these options show it: the result type's for_options, else as it is."""
        adapt = getattr(result, "for_options", None)
        return result if adapt is None else adapt(options)

    def to_json(self, result: R, model: str) -> dict:
        """The command's JSON (strict: NaN as null), the model named first where the command always did."""
        data = result.to_json()
        return json_ready({"model": model, **data} if self.json_model else data)

    def from_record(self, record: ResultFile) -> R:
        """The result a result file holds; ResultFileError when it is of another analysis or malformed."""
        if record.command != self.name:
            raise ResultFileError(f"this file holds the result of `{record.command}`, not `{self.name}`.")
        reader = self.result.from_json
        return reader(record.result, record.state) if hasattr(self.result, "state_json") else reader(record.result)

    def read(self, record: ResultFile, options: O) -> R:
        """A result file's result as these options show it (a shipped file may hold more, or another view)."""
        return self.for_options(self.from_record(record), options)

    def make_accumulators(self, options: O) -> Callable[[LoadedModel], list]:
        """make_accumulators(lm) for the engines (a partial of a module function: it pickles for Ray)."""
        assert self.accumulators is not None, f"{self.name} reads one input"
        return partial(self.accumulators, options=options)

    def make_fill(self, options: O) -> Fill:
        """The engines' Fill: the analysis's own corpus loop with its options, else the plain engine pass."""
        return engine_fill if self.fill is None else partial(self.fill, options=options)


def own_loop(loop: Callable, lm: LoadedModel, inputs: Sequence[CorpusInput], accumulators: list, batch_size: int,
             progress: Progress | None, options: Options) -> list:  # fmt: skip
    """The Fill of an analysis with its own corpus loop, `loop(lm, inputs, options, progress, batch_size)` into one
    accumulator (attribution runs per input after the batched pass): run it and merge. Give `partial(own_loop, loop)`."""
    return [accumulators[0].merge(loop(lm, inputs, options, progress, batch_size))]


def single_result(accumulators: list, options: Options) -> Any:
    """The finish of an analysis with one accumulator whose result() is its result."""
    return accumulators[0].result()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class AnalysisRun(Generic[R]):
    """One analysis run: its result, the model's facts, its options, what it read and how it ran (engine, device,
    workers, seconds), with the attnlib version and the time it was made.

    In a notebook: `.show()` draws its figures (`.figures()` returns them), `.to_pandas()` gives its main long table
    (`.tables()` all of them), `.to_json()` is what `attnlib <command> --json` prints and `.save(path)` writes the
    `--out` result file that the app's "Load a result file" opens; `attnlib.load(path)` reads one back."""

    analysis: Analysis
    options: Options
    result: R
    facts: ModelFacts
    corpus: dict  # as result files describe it (a text: its sentences; treebanks: the test file, with "train")
    run: dict = field(default_factory=dict)  # engine, device, workers, seconds
    library_version: str = __version__
    created: str = field(default_factory=_now)  # ISO 8601, UTC

    @property
    def model(self) -> str:
        """The model's name, as the JSON and the tables give it."""
        return self.facts.name

    def __repr__(self) -> str:
        seconds = self.run.get("seconds")
        took = "" if seconds is None else f", {seconds:.1f} s"
        return (f"<AnalysisRun {self.analysis.name} of {self.model} on {self.corpus.get('name', '?')} "
                f"({self.corpus.get('n_inputs', '?')} inputs{took}); {self.options}>")  # fmt: skip

    def to_json(self) -> dict:
        """The command's JSON; `model_dtype` (analysed, saved) when the weights are not a float32 checkpoint's;
        `layout_found` (part -> words) for a family outside the list, whose layout was found in it and checked."""
        data = self.analysis.to_json(self.result, self.facts.name)
        data = {**data, **self.facts.stack_keys(), **{k: data[k] for k in ("part",) if k in data}}
        if self.facts.dtype_note() is not None:
            data["model_dtype"] = {"analysed": self.facts.dtype, "saved": self.facts.saved_dtype}
        if self.facts.layout_found:
            data["layout_found"] = dict(self.facts.layout_found)
        return data

    def result_file(self) -> ResultFile:
        """The run as a result file (`--out`): its options as asdict, the model's facts, this run's version and time."""
        state = self.result.state_json() if hasattr(self.result, "state_json") else None
        return ResultFile(
            self.analysis.name,
            self.facts.name,
            self.corpus,
            stored_options(self.options),
            self.library_version,
            self.created,
            self.to_json(),
            self.run,
            json_ready(state),
            asdict(self.facts),
        )

    def save(self, path: str | Path) -> None:
        """Write the result file that `attnlib <command> ... --out PATH` writes (strict JSON)."""
        write_result_file(path, self.result_file())

    def tables(self) -> dict[str, pd.DataFrame]:
        """Its long tables by title: a `model` column first, layers and heads numbered from 1."""
        return self.result.tables(self.model)

    def to_pandas(self) -> pd.DataFrame:
        """Its main long table (the first of `tables()`)."""
        return next(iter(self.tables().values()))

    def figures(self) -> list:
        """Its figures (attnlib.views: needs the `views` extra), drawn as the app draws them, each showing itself in a
        notebook."""
        from attnlib.views.display import View
        from attnlib.views.drawing import figures_of
        from attnlib.views.figure import as_figure

        draw = getattr(self.result, "figures", None)  # a result type not yet registered with views.drawing
        drawn = draw(self.model) if draw is not None else figures_of(self.result, self.model)
        return [f if isinstance(f, View) else as_figure(f) for f in drawn]

    def _repr_html_(self) -> str | None:
        """In a notebook, a run left as a cell's value draws its figures (its tables where it has none), under a
        line that says what it is; None without the `views` extra (the notebook prints its repr)."""
        try:
            figures = self.figures()
        except ImportError:
            return None
        drawn = [f._repr_html_() for f in figures] or [t.to_html(index=False) for t in self.tables().values()]
        return f"<p>{html.escape(repr(self))}</p>" + "".join(drawn)

    def show(self) -> list | None:
        """In a notebook, draw its figures (each shows itself) and return None, so that the cell prints nothing under
        them (`figures()` returns them); outside a notebook, return `figures()`."""
        figures = self.figures()
        if _notebook_shell() is None:
            return figures
        from IPython.display import display

        for figure in figures:
            display(figure)
        return None


def _notebook_shell() -> Any:
    """The running IPython shell, or None outside one."""
    ipython = sys.modules.get("IPython")
    return None if ipython is None else ipython.get_ipython()


def run_of_record(analysis: Analysis, record: ResultFile) -> AnalysisRun:
    """The run a result file holds; ResultFileError when it is malformed or of another analysis. Files written
    before attnlib kept the model's facts give only the model's name, kind and dtype (the rest zero)."""
    return AnalysisRun(
        analysis,
        analysis.options_from_json(record.options),
        analysis.from_record(record),
        facts_of_record(record),
        record.corpus,
        record.run,
        record.library_version,
        record.created,
    )


def facts_of_record(record: ResultFile) -> ModelFacts:
    """The model's facts a result file stores, else what its JSON tells (name, kind, dtypes)."""
    if record.facts is not None:
        try:
            found = tuple(tuple(part) for part in record.facts.get("layout_found", ()))
            stored = {**record.facts, "windows": tuple(record.facts.get("windows", ())), "layout_found": found}
            return ModelFacts(**stored)
        except TypeError as exc:
            raise ResultFileError(f"the file's model facts are malformed ({exc}).") from exc
    data = record.result
    dtype = data.get("model_dtype") or {}
    kind = "encoder-decoder" if data.get("part") == "encoder" and data.get("kind") == "encoder-decoder" else None
    kind = kind or ("decoder" if data.get("kind") == "decoder" else "encoder")
    return ModelFacts(record.model, "", 0, 0, 0, 0, 0, "", "", "", False, kind=kind,
                      dtype=dtype.get("analysed", "float32"), saved_dtype=dtype.get("saved", "float32"))  # fmt: skip


def read_inputs(source: str, given: Inputs, limit: int | None = None) -> list[CorpusInput]:
    """One input of an analysis: a corpus (text or CoNLL-U file), or a CoNLL-U treebank (conllu, train, test); a
    sequence is taken as read (plain strings as sentences). At most `limit` inputs; CorpusError when none."""
    if isinstance(given, str | Path):
        if source == "corpus":
            return read_corpus(given, limit)
        sentences = list[CorpusInput](read_conllu(given)[:limit])
        if not sentences:
            raise CorpusError(f"{given}: no sentence in the file.")
        return sentences
    items = [CorpusInput(x) if isinstance(x, str) else x for x in list(given)[:limit]]
    if not items:
        raise CorpusError(f"the {source} given has no input.")
    return items


def describe_inputs(given: Mapping[str, Inputs], inputs: Mapping[str, Sequence[CorpusInput]]) -> dict:
    """The inputs as result files describe them: a file by its path and SHA-1 (a probe's test file, with "train")."""

    def one(source: str) -> dict:
        path, n = given[source], len(inputs[source])
        if isinstance(path, str | Path):
            return corpus_record(path, n)
        return {"name": f"{n} inputs", "path": None, "n_inputs": n, "sha1": None}

    *first, last = inputs
    return {**one(last), **{source: one(source) for source in first}}


def run_analysis(
    analysis: Analysis[O, R],
    model: str | LoadedModel,
    options: O,
    *,
    text: str | None = None,
    pair: str | None = None,
    inputs: Mapping[str, Inputs] | None = None,
    limit: int | None = None,
    engine: str = "local",
    device: str = "cpu",
    workers: int = 2,
    cpus_per_worker: float = 1.0,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
    note: Callable[[str], None] | None = None,
    strict: bool = False,
) -> AnalysisRun[R]:
    """Run an analysis on one text (and pair), or on its inputs (source -> a file's path or the inputs themselves,
    at most `limit` of each).

    A loaded model is used as it is (the local engine); a name is loaded here, or by each Ray worker with
    engine="ray". `note` is told, before a long one-input run, what it will cost. A part a model's family cannot give
    (families.unsupported_reason) is left out, or with `strict` (the command line) refused: UnsupportedModelError."""
    if analysis.reads in ("model", "options"):
        scale = Scale(engine, workers, cpus_per_worker, device)
        return _run_on_model(analysis, model, options, text, pair, inputs, limit, scale, note)
    if analysis.reads == "text":
        if text is None:
            raise CorpusError(f"{analysis.name} analyses one text: give text= (and pair=).")
        check_device(device)
        lm = _loaded(model, device)
        item = CorpusInput(text, pair)
        said = None if note is None or analysis.note is None else analysis.note(lm, item, options)
        if said:
            note(said)  # type: ignore[misc]
        assert analysis.compute is not None
        result = analysis.compute(lm, item, options)
        return AnalysisRun(analysis, options, result, lm.facts, text_record(text, pair))
    given = dict(inputs or {})
    if analysis.default_corpus is not None and given.get("corpus") is None:
        given["corpus"] = analysis.default_corpus
    if analysis.whole_corpus and engine != "local":
        raise ScaleError(f"{analysis.name} reads its corpus as one text: it runs with the local engine only.")
    missing = [s for s in analysis.sources if given.get(s) is None]
    if missing:
        needs = " and ".join(f"{s}=" for s in analysis.sources)
        raise CorpusError(f"{analysis.name} reads {needs}; {', '.join(missing)} is missing.")
    read = {source: read_inputs(source, given[source], limit) for source in analysis.sources}
    if strict and analysis.needs is not None and analysis.needs(options) and engine == "local":
        check_device(device)
        model = _loaded(model, device)
        for statistic in analysis.needs(options):
            reason = unsupported_reason(model.encoder.config, statistic)
            if reason is not None:
                raise UnsupportedModelError(reason)
    if engine == "local" and not isinstance(model, LoadedModel) and (len(read) > 1 or analysis.follow is not None):
        check_device(device)
        model = load_model(model, device=device)  # loaded once for every file it reads
    total = sum(len(items) for items in read.values())
    runs: list[CorpusRun] = []
    for items in read.values():
        before = sum(len(read[s]) for s in analysis.sources[: len(runs)])
        report = None if progress is None else partial(_offset_progress, progress, before, total)
        runs.append(
            run_accumulators(
                model,
                items,
                analysis.make_accumulators(options),
                analysis.make_fill(options),
                engine=engine,
                device=device,
                workers=workers,
                batch_size=batch_size,
                cpus_per_worker=cpus_per_worker,
                progress=report,
            )
        )
    assert analysis.finish is not None
    result = analysis.finish(*[r.accumulators for r in runs], options)
    follow = None if analysis.follow is None else analysis.follow(result, options)
    if follow is not None:
        again = run_accumulators(model, list(read.values())[-1], follow.make_accumulators, follow.fill, engine=engine,
                                 device=device, workers=workers, batch_size=batch_size, cpus_per_worker=cpus_per_worker,
                                 progress=progress)  # fmt: skip
        result = follow.finish(result, again.accumulators)
        runs.append(again)
    last = runs[-1]
    last.seconds = sum(r.seconds for r in runs)
    return AnalysisRun(analysis, options, result, last.facts, describe_inputs(given, read), last.describe())


def _run_on_model(
    analysis: Analysis[O, R],
    model: str | LoadedModel,
    options: O,
    text: str | None,
    pair: str | None,
    inputs: Mapping[str, Inputs] | None,
    limit: int | None,
    scale: Scale,
    note: Callable[[str], None] | None,
) -> AnalysisRun[R]:
    """Run an analysis of the model alone, with a text (and pair) or a corpus where one is given (not both); what it
    runs of independent items (checkpoints) runs as `scale` says."""
    given = {source: value for source, value in (inputs or {}).items() if value is not None}
    if text is not None and given:
        raise CorpusError(f"{analysis.name} reads a text or a corpus, not both.")
    device = scale.device
    check_device(device)
    lm = _loaded(model, device)
    items: list[CorpusInput] | None = None
    corpus: dict = dict(NO_INPUT)
    if text is not None:
        items, corpus = [CorpusInput(text, pair)], text_record(text, pair)
    elif given:
        read = {source: read_inputs(source, given[source], limit) for source in given}
        items, corpus = read["corpus"], describe_inputs(given, read)
    said = None if note is None or analysis.note is None else analysis.note(lm, CorpusInput(text or ""), options)
    if said:
        note(said)  # type: ignore[misc]
    assert analysis.compute_model is not None
    start = time.perf_counter()
    if text is not None and analysis.compute is not None:  # a model analysis with its own computation of one text
        result = analysis.compute(lm, CorpusInput(text, pair), options)
    else:
        result = analysis.compute_model(lm, items, options, scale)
    run = {"engine": scale.engine, "device": device, "seconds": round(time.perf_counter() - start, 3)}
    if scale.engine != "local":
        run["workers"] = scale.workers
    return AnalysisRun(analysis, options, result, lm.facts, corpus, run)


def _loaded(model: str | LoadedModel, device: str) -> LoadedModel:
    return model if isinstance(model, LoadedModel) else load_model(model, device=device)


def _offset_progress(progress: Progress, before: int, total: int, done: int, _: int) -> None:
    progress(before + done, total)
