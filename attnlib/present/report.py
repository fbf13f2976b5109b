"""The whole study as one report: every corpus analysis for one model (or two compared), timed, with provenance.

A report is a list of parts (REPORT_PARTS), one per analysis: the report's files it reads, its options (made from the
report's) and how its result becomes long tables (a `model` column first, layers and heads 1-based as on the pages),
per-layer values to compare and notes. Parts reading the same file share one engine pass (the local
core.engines.Scale, through which run_analysis fills each file; importance, with its own loop, runs by run_analysis),
so the model runs once per file, and positions and aggregation attribute each input once between them; the probe's
training treebank gets its own pass. `render_report` writes the HTML: each part's tables are its result's own
(`tables(model)`), its figures those the views register for its result type (attnlib.views.drawing: one model's, or
two together; plotly, the `views` extra, imported only when a page is written).
"""

from __future__ import annotations

import html
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import pandas as pd

from attnlib.analyses.aggregation import AGGREGATION, AggregationOptions, AggregationResult
from attnlib.analyses.base import Analysis, Options, read_inputs, run_analysis
from attnlib.analyses.deps import DEPS, PAPER_MODELS, DepsOptions, DepsResult
from attnlib.analyses.importance import IMPORTANCE, HeadImportance, ImportanceOptions, no_op_sentence
from attnlib.analyses.labels import NORM_NAMES, SHARE_KEYS, STAT_NAMES
from attnlib.analyses.positions import CORRELATIONS, POSITIONS, PositionOptions, PositionsResult
from attnlib.analyses.probe import PROBE, ProbeOptions, ProbeResult
from attnlib.analyses.special import SPECIAL, SpecialOptions, SpecialTokens
from attnlib.core.corpus import CorpusError, CorpusInput
from attnlib.core.engines import LOCAL
from attnlib.core.hooks import ATTENTION, Capture
from attnlib.core.model import LoadedModel, load_model
from attnlib.core.runner import RunResult
from attnlib.present.comparison import Difference, largest_difference
from attnlib.present.tables import by_layer, layer_values
from attnlib.results.files import corpus_record
from attnlib.results.shipped import ROOT
from attnlib.stats.hta import DEFAULT_PROBES, Attribution, Mode, hidden_token_attribution
from attnlib.stats.norms import MEASURES, NORM_KEYS

METHODS_PATH = "docs/METHODS.md"  # links in the report point here, relative to the repository root
ReportProgress = Callable[[str, int, int], None]  # (what runs now, inputs done, inputs in this pass)
Inputs = Mapping[str, Sequence[CorpusInput]]  # the report's files ("corpus", "conllu", "train") -> their inputs


@dataclass(frozen=True)
class ReportOptions:
    """Options of every part (the commands' defaults; positions and aggregation in estimate mode)."""

    limit: int | None = None  # at most this many inputs of each file
    batch_size: int = 32
    all_punct: bool = False
    head_map: bool = True
    min_count: int = 100  # deps: list relations with at least this many dependents
    probes: int = DEFAULT_PROBES  # positions and aggregation: estimate mode with this many probes per token
    probe_epochs: int = 1  # probe: passes over the training treebank
    probe_seed: int = 0  # probe: torch seed while training


@dataclass
class PartResult:
    """One part for one model: long tables, the analysis's result the figures draw, values to compare, seconds."""

    part: str
    model: str
    tables: dict[str, pd.DataFrame]  # title -> table with a `model` column first
    result: Any  # the analysis's result (its figures are drawn from it)
    comparable: dict[str, dict[str, float]]  # statistic -> {"layer 3": value, ...} on one scale per part
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # this part's own work (statistics, attribution, training), not the shared forward pass


@dataclass(frozen=True)
class ReportPart:
    """One part of the report: an analysis, the report's file for each of its sources, its options made from the
    report's, and how its result is shown (`show(model, result, report options)`). `attributed` parts attribute each
    input once between them in their pass (their accumulators take a run and its attribution)."""

    analysis: Analysis
    title: str
    files: Mapping[str, str]  # the analysis's sources -> the report's files
    options: Callable[[ReportOptions], Options]
    show: Callable[[str, Any, ReportOptions], PartResult]
    attributed: bool = False
    own_loop: bool = False  # it runs its own corpus loop (importance replays every head), not in the shared pass

    @property
    def name(self) -> str:
        return self.analysis.name

    @property
    def methods(self) -> tuple[int, ...]:
        return self.analysis.methods

    @property
    def source(self) -> str:
        """The report's file whose shared pass fills it (its analysis's last source: the probe's test treebank)."""
        return self.files[self.analysis.sources[-1]]

    def ready(self, inputs: Mapping[str, object]) -> bool:
        """Whether every file it reads is given."""
        return all(file in inputs for file in self.files.values())


# ------------------------------------------------------------------------------------------------------ the parts


def _special_show(model: str, found: SpecialTokens, options: ReportOptions) -> PartResult:
    result, norms = found.special, found.norms
    notes = [
        f"{result.n_inputs} inputs ({result.n_truncated} truncated to the model's length); punctuation: "
        f"{'every punctuation token' if result.all_punct else '. and ,'}; uniform attention's mean ln n = "
        f"{result.uniform_entropy:.3f}"
        + ("; norm shares weigh attention by the value norm ||f(x)|| (Kobayashi et al.)." if norms else ".")
    ]
    comparable = by_layer(result.layers, SHARE_KEYS, STAT_NAMES)
    if norms is not None:  # the report always asks for them; a notebook's run may not
        comparable |= by_layer(norms.layers, list(NORM_KEYS[:4]), NORM_NAMES)
    return PartResult("special", model, found.tables(model), found, comparable, notes)


def _deps_show(model: str, found: DepsResult, options: ReportOptions) -> PartResult:
    table = found.table
    notes = [
        f"{table.n_sentences} sentences, {table.n_words} words, {table.n_skipped} skipped (longer than the model "
        f"takes); relations with at least {options.min_count} dependents, root and punct pooled in 'all' only."
    ]
    if model in PAPER_MODELS:
        notes.append("Clark et al. used WSJ with Stanford labels; the UD label closest to each paper relation is used.")
    accuracy = {r.relation: r.accuracy for r in table.rows}
    comparable = {"best-head accuracy": {f"relation {k}": v for k, v in accuracy.items()}}
    return PartResult("deps", model, found.tables(model), found, comparable, notes)


def _positions_show(model: str, result: PositionsResult, options: ReportOptions) -> PartResult:
    names = {f"median_{name}": f"median {name.replace('_', ' ')} correlation" for name in CORRELATIONS}
    notes = [
        f"{result.n_inputs} inputs, {result.n_longer} of them longer than the head dimension ({result.head_dim}); "
        f"Hidden Token Attribution in estimate mode with {result.options.probes} probes per token, seed "
        f"{result.options.seed}."
    ]
    comparable = by_layer(result.layer_statistics(), list(names), names)
    return PartResult("positions", model, result.tables(model), result, comparable, notes)


def _aggregation_show(model: str, result: AggregationResult, options: ReportOptions) -> PartResult:
    names = {f"spearman_{m}": f"{m.replace('_', ' ')} Spearman with G_out" for m in MEASURES}
    notes = [
        f"{result.n_inputs} inputs; layer-output attribution G_out in estimate mode with {result.options.probes} "
        f"probes per token, seed {result.options.seed} (the same attributions as the positions part)."
    ]
    comparable = by_layer(result.layer_statistics(), list(names), names)
    return PartResult("aggregation", model, result.tables(model), result, comparable, notes)


def _probe_show(model: str, result: ProbeResult, options: ReportOptions) -> PartResult:
    notes = [
        f"trained on {result.n_train} sentences ({options.probe_epochs} epoch, seed {options.probe_seed}), scored on "
        f"{result.n_test} ({result.n_words} words, punctuation excluded); {result.n_skipped} sentences skipped "
        "(longer than the model takes)."
    ]
    uas = {"probe UAS": {f"relation {r}": v["uas"] for r, v in result.uas_by_relation.items()}}
    return PartResult("probe", model, result.tables(model), result, uas, notes)


def _importance_show(model: str, result: HeadImportance, options: ReportOptions) -> PartResult:
    L, H = result.special_share.shape
    embedding = result.effect("ablate", "embedding")
    assert embedding is not None  # every encoder has the embedding measure
    comparable = {"ablation effect (embedding)": layer_values(embedding.mean(1))}
    notes = [f"{result.n_inputs} inputs, {L} x {H} heads. {no_op_sentence(result, model)}"]
    return PartResult("importance", model, result.tables(model), result, comparable, notes)


REPORT_PARTS: tuple[ReportPart, ...] = (
    ReportPart(
        SPECIAL,
        "Special tokens, offsets and entropy (Clark et al. §3), with value-weighted norms (Kobayashi et al.)",
        {"corpus": "corpus"},
        lambda o: SpecialOptions(all_punct=o.all_punct, head_map=o.head_map, norms=True),
        _special_show,
    ),
    ReportPart(
        POSITIONS,
        "Local vs global: relative positions and Hidden Token Attribution (Pascual et al.)",
        {"corpus": "corpus"},
        lambda o: PositionOptions(mode="estimate", probes=o.probes),
        _positions_show,
        attributed=True,
    ),
    ReportPart(
        AGGREGATION,
        "Aggregation: attention, norms and rollouts against layer-output attribution (Kobayashi et al.; GlobEnc)",
        {"corpus": "corpus"},
        lambda o: AggregationOptions(mode="estimate", probes=o.probes),
        _aggregation_show,
        attributed=True,
    ),
    ReportPart(
        IMPORTANCE,
        "Head importance: every head switched off, its [CLS]/[SEP] attention knocked out, the no-op test (Michel et al.)",
        {"corpus": "corpus"},
        lambda o: ImportanceOptions(knockout=True, prune=True),
        _importance_show,
        own_loop=True,
    ),
    ReportPart(
        DEPS,
        "Dependency heads against the best fixed offset (Clark et al. Table 1)",
        {"conllu": "conllu"},
        lambda o: DepsOptions(min_count=o.min_count),
        _deps_show,
    ),
    ReportPart(
        PROBE,
        "Attention probe: all heads together predict each word's head (Clark et al. §5)",
        {"train": "train", "test": "conllu"},
        lambda o: ProbeOptions(epochs=o.probe_epochs, seed=o.probe_seed),
        _probe_show,
    ),
)


# ----------------------------------------------------------------------------------------------- running the parts


class SharedAttribution:
    """Each input's Hidden Token Attribution, computed once for the parts of a pass that need it (positions, aggregation)."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.last: tuple[RunResult, tuple, Attribution] | None = None

    def of(self, result: RunResult, mode: Mode, probes: int, seed: int) -> Attribution:
        """The attribution of this run (the last one is kept: the engine hands every accumulator the same run)."""
        key = (mode, probes, seed)
        if self.last is None or self.last[0] is not result or self.last[1] != key:
            # with the layer-output attribution: the aggregation part reads it, positions ignores it
            attribution = hidden_token_attribution(self.lm, result, mode, probes, seed, with_output=True)
            self.last = (result, key, attribution)
        return self.last[2]


class Attributed:
    """Engine accumulator that hands an attributed analysis's accumulator (positions, aggregation) each run with its
    shared attribution; an input its length leaves out (positions' identifiability filter) is only counted."""

    def __init__(self, attribution: SharedAttribution, inner: Any) -> None:
        self.attribution, self.inner = attribution, inner
        self.captures: frozenset[Capture] = inner.captures  # aggregation's maps need the value vectors

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        wants = getattr(self.inner, "wants", None)
        if wants is not None and not wants(result.n):
            self.inner.skip()
            return
        o = self.inner.options
        self.inner.add(result, self.attribution.of(result, cast(Mode, o.mode), o.probes, o.seed))

    def merge(self, other: Attributed) -> Attributed:
        return Attributed(self.attribution, self.inner.merge(other.inner))


def part_accumulators(part: ReportPart, lm: LoadedModel, options: Options, shared: dict) -> list:
    """A part's empty accumulators for its shared pass (attributed ones wrapped around the pass's attribution)."""
    accumulators = part.analysis.accumulators(lm, options)  # type: ignore[misc]
    if not part.attributed:
        return accumulators
    attribution = cast(SharedAttribution, shared.setdefault("attribution", SharedAttribution(lm)))
    return [Attributed(attribution, a) for a in accumulators]


def unwrapped(accumulator: Any) -> Any:
    """The analysis's own accumulator inside a pass's wrappers."""
    while isinstance(accumulator, _Timed | Attributed):
        accumulator = accumulator.inner
    return accumulator


class _Timed:
    """Wraps an accumulator and adds up the seconds spent in its add()."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0
        self.captures: frozenset[Capture] = inner.captures  # the pass captures what the part needs

    def add(self, result: RunResult, item: CorpusInput) -> None:
        start = time.perf_counter()
        self.inner.add(result, item)
        self.seconds += time.perf_counter() - start

    def merge(self, other: _Timed) -> _Timed:
        merged = _Timed(self.inner.merge(other.inner))
        merged.seconds = self.seconds + other.seconds
        return merged


class _Counter:
    """Last accumulator of a pass: reports progress after every input."""

    captures: ClassVar[frozenset[Capture]] = ATTENTION

    def __init__(self, label: str, total: int, progress: ReportProgress | None) -> None:
        self.label, self.total, self.progress, self.done = label, total, progress, 0

    def add(self, result: RunResult, item: CorpusInput) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.label, self.done, self.total)

    def merge(self, other: _Counter) -> _Counter:
        return self


@dataclass
class PassTiming:
    """One engine pass over one file for one model: which parts shared it, its seconds and the forward part."""

    model: str
    source: str
    parts: list[str]
    n_inputs: int
    seconds: float
    forward_seconds: float  # the pass less the parts' own add() time: running the model, batching


def run_parts(
    lm: LoadedModel,
    inputs: Inputs,
    options: ReportOptions,
    parts: Sequence[ReportPart] = REPORT_PARTS,
    progress: ReportProgress | None = None,
) -> tuple[list[PartResult], list[PassTiming]]:
    """Run every part whose files are in `inputs`, one engine pass per file (a part's other files after it); with
    timings."""
    results: dict[str, PartResult] = {}
    timings = []
    for source, items in inputs.items():
        for part in [p for p in parts if p.source == source and p.ready(inputs) and p.own_loop]:
            results[part.name], timing = _own_loop_part(part, lm, inputs, options, progress)  # its own batches
            timings.append(timing)
        group = [p for p in parts if p.source == source and p.ready(inputs) and not p.own_loop]
        if not group:
            continue
        shared: dict = {}
        chosen = [p.options(options) for p in group]
        timed = [[_Timed(a) for a in part_accumulators(p, lm, o, shared)] for p, o in zip(group, chosen)]
        label = f"{lm.facts.name}: {' + '.join(p.name for p in group)}"
        every = [a for accs in timed for a in accs] + [_Counter(label, len(items), progress)]
        made = partial(_made, every)  # the pass's accumulators are made above (wrapped, timed)
        seconds = LOCAL.accumulate(lm, items, made, batch_size=options.batch_size).seconds
        own = [sum(a.seconds for a in accs) for accs in timed]
        timings.append(
            PassTiming(lm.facts.name, source, [p.name for p in group], len(items), seconds, seconds - sum(own))
        )
        for part, part_options, accs, add_seconds in zip(group, chosen, timed, own):
            start = time.perf_counter()
            filled = {part.analysis.sources[-1]: [unwrapped(a) for a in accs]}
            for other in part.analysis.sources[:-1]:  # the probe's training treebank
                filled[other] = _own_pass(part, part_options, lm, inputs[part.files[other]], options, progress)
            result = part.analysis.finish(*[filled[s] for s in part.analysis.sources], part_options)  # type: ignore
            shown = part.show(lm.facts.name, result, options)
            shown.seconds = add_seconds + time.perf_counter() - start
            results[part.name] = shown
    return [results[p.name] for p in parts if p.name in results], timings


def _made(accumulators: list, lm: LoadedModel) -> list:
    """make_accumulators of a pass whose accumulators are made already."""
    return accumulators


def _own_loop_part(
    part: ReportPart, lm: LoadedModel, inputs: Inputs, options: ReportOptions, progress: ReportProgress | None
) -> tuple[PartResult, PassTiming]:
    """A part whose analysis runs its own corpus loop (importance replays every head): run it alone, and show it."""
    label = f"{lm.facts.name}: {part.name}"
    report = None if progress is None else (lambda done, total: progress(label, done, total))
    given = {source: inputs[part.files[source]] for source in part.analysis.sources}
    start = time.perf_counter()
    run = run_analysis(part.analysis, lm, part.options(options), inputs=given, batch_size=options.batch_size,
                       progress=report)  # fmt: skip
    seconds = time.perf_counter() - start
    shown = part.show(lm.facts.name, run.result, options)
    shown.seconds = seconds
    n = len(given[part.analysis.sources[-1]])
    return shown, PassTiming(lm.facts.name, part.source, [part.name], n, seconds, 0.0)


def _own_pass(
    part: ReportPart,
    part_options: Options,
    lm: LoadedModel,
    items: Sequence[CorpusInput],
    options: ReportOptions,
    progress: ReportProgress | None,
) -> list:
    """A part's accumulators filled over one more of its files, in a pass of its own (as run_analysis fills each)."""
    label = f"{lm.facts.name}: {part.name} ({', '.join(f for f in part.files.values() if f != part.source)})"
    report = None if progress is None else (lambda done, total: progress(label, done, total))
    accumulators, fill = part.analysis.make_accumulators(part_options), part.analysis.make_fill(part_options)
    return LOCAL.accumulate(lm, items, accumulators, fill, batch_size=options.batch_size, progress=report).accumulators


# --------------------------------------------------------------------------------------------------- the report


@dataclass
class Report:
    """Everything the HTML shows: the parts per model, how long each pass took, and where the numbers came from."""

    models: list[str]
    parts: list[ReportPart]
    results: dict[str, list[PartResult]]  # part name -> one result per model, in model order
    timings: list[PassTiming]
    corpora: dict[str, dict]  # source -> name, path, sha1, bytes, n_inputs
    options: ReportOptions
    library_version: str
    created: str  # ISO 8601, UTC
    seconds: float = 0.0
    load_seconds: dict[str, float] = field(default_factory=dict)
    methods: dict[int, tuple[str, str]] = field(default_factory=dict)  # section -> (title, text)
    stacks: dict[str, dict] = field(default_factory=dict)  # an encoder-decoder's name -> {"kind", "part": "encoder"}

    def differences(self) -> dict[str, Difference | None]:
        """For two models: each part's largest difference (None where nothing is comparable)."""
        if len(self.models) < 2:
            return {}
        return {
            name: largest_difference(results[0].comparable, results[1].comparable)
            for name, results in self.results.items()
        }

    def summary(self) -> dict:
        """The JSON summary the command prints: parts, seconds, corpora, models."""
        return {
            "models": self.models,
            "parts": list(self.results),
            "corpora": self.corpora,
            "seconds": round(self.seconds, 3),
            "part_seconds": {
                f"{r.model}: {r.part}": round(r.seconds, 3) for results in self.results.values() for r in results
            },
            "passes": [
                {**asdict(t), "seconds": round(t.seconds, 3), "forward_seconds": round(t.forward_seconds, 3)}
                for t in self.timings
            ],
            "differences": {k: d.text() if d else None for k, d in self.differences().items()},
            **({"stacks": self.stacks} if self.stacks else {}),
        }


def methods_sections(path: Path = ROOT / METHODS_PATH) -> dict[int, tuple[str, str]]:
    """{section number: (heading, text)} of docs/METHODS.md ({} when the file is not there, e.g. an installed copy)."""
    if not path.is_file():
        return {}
    sections: dict[int, tuple[str, str]] = {}
    for block in re.split(r"^## ", path.read_text(encoding="utf-8"), flags=re.M)[1:]:
        heading, _, body = block.partition("\n")
        number = re.match(r"(\d+)\.", heading)
        if number:
            sections[int(number.group(1))] = (heading.strip(), body.strip())
    return sections


def methods_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _read_inputs(paths: Mapping[str, str | None], limit: int | None) -> dict[str, list]:
    inputs = {source: read_inputs(source, path, limit) for source, path in paths.items() if path is not None}
    if "corpus" not in inputs and "conllu" not in inputs:
        raise CorpusError("give a corpus, a CoNLL-U treebank or both.")
    if "train" in inputs and "conllu" not in inputs:
        raise CorpusError("a training treebank needs a treebank to test the probe on (--conllu).")
    return inputs


def _corpus_record(path: str, n_inputs: int) -> dict:
    """Name, path, SHA-1 and number of inputs as result files record them, and the size in bytes."""
    return {**corpus_record(path, n_inputs), "bytes": Path(path).stat().st_size}


def run_report(
    model: str | LoadedModel,
    corpus_path: str | None,
    conllu_path: str | None = None,
    compare: str | LoadedModel | None = None,
    options: ReportOptions = ReportOptions(),
    progress: ReportProgress | None = None,
    device: str = "cpu",
    parts: Sequence[ReportPart] = REPORT_PARTS,
    train_path: str | None = None,
) -> Report:
    """Run every part for the model (and the compared one) on the files given; the probe runs when a training treebank
    is given."""
    start = time.perf_counter()
    paths = {"corpus": corpus_path, "conllu": conllu_path, "train": train_path}
    inputs = _read_inputs(paths, options.limit)
    corpora = {source: _corpus_record(str(paths[source]), len(items)) for source, items in inputs.items()}
    models = [model] if compare is None else [model, compare]
    report = report_of_inputs(models, inputs, corpora, options, progress, device, parts)
    report.seconds = time.perf_counter() - start
    return report


def report_of_inputs(
    models: Sequence[str | LoadedModel],
    inputs: Inputs,
    corpora: dict[str, dict],
    options: ReportOptions = ReportOptions(),
    progress: ReportProgress | None = None,
    device: str = "cpu",
    parts: Sequence[ReportPart] = REPORT_PARTS,
) -> Report:
    """Run every part whose files are in `inputs` for each model, one model in memory at a time (a name is loaded
    here, a LoadedModel used as it is); corpora: source -> name, sha1, n_inputs (and path, bytes) for the header."""
    from attnlib.results.version import __version__

    if "corpus" not in inputs and "conllu" not in inputs:
        raise CorpusError("give a corpus, a CoNLL-U treebank or both.")
    start = time.perf_counter()
    results: dict[str, list[PartResult]] = {}
    timings: list[PassTiming] = []
    load_seconds = {}
    names = []
    stacks: dict[str, dict] = {}
    for name in models:
        loaded = time.perf_counter()
        lm = name if isinstance(name, LoadedModel) else load_model(name, device=device)
        load_seconds[lm.facts.name] = time.perf_counter() - loaded
        names.append(lm.facts.name)
        if lm.facts.stack_keys():
            stacks[lm.facts.name] = lm.facts.stack_keys()
        part_results, pass_timings = run_parts(lm, inputs, options, parts, progress)
        timings += pass_timings
        for result in part_results:
            results.setdefault(result.part, []).append(result)
        del lm
    return Report(
        names,
        [p for p in parts if p.name in results],
        results,
        timings,
        corpora,
        options,
        __version__,
        datetime.now(UTC).isoformat(timespec="seconds"),
        time.perf_counter() - start,
        load_seconds,
        methods_sections(),
        stacks,
    )


def terminal_progress(stream: Any = sys.stderr, width: int = 30) -> ReportProgress:
    """A progress bar on one terminal line (stderr): what runs, a bar, done/total."""

    def show(label: str, done: int, total: int) -> None:
        filled = width * done // max(total, 1)
        stream.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show


# ------------------------------------------------------------------------------------------------ the page

CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
td:nth-child(-n+2), th:first-child { text-align: left; }
th { background: #f3f3f3; }
.difference { background: #fff4d6; padding: 0.4rem 0.8rem; border-left: 4px solid #e0a800; }
details { margin: 0.5rem 0; }
pre { white-space: pre-wrap; background: #f8f8f8; padding: 0.5rem; }
"""


def part_figures(results: Sequence[PartResult]) -> list:
    """A part's figures, as the views draw its result type: one model's, or two models' together."""
    from attnlib.views.drawing import compared_figures_of

    return compared_figures_of({r.model: r.result for r in results})


def _table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda x: f"{x:.6g}", na_rep="", border=0)


def _key_values(rows: dict[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


def _figure_html(fig: Any, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def _definitions(report: Report, sections: Sequence[int]) -> str:
    items = []
    for number in sections:
        heading, text = report.methods.get(number, (f"{number}.", ""))
        link = f"{METHODS_PATH}#{methods_anchor(heading)}"
        items.append(
            f"<details><summary><a href='{html.escape(link)}'>{html.escape(heading)}</a></summary>"
            f"<pre>{html.escape(text)}</pre></details>"
        )
    return f"<p>Definitions ({html.escape(METHODS_PATH)} in the attnlib repository):</p>{''.join(items)}"


def _part_section(report: Report, index: int, differences: dict) -> str:
    part = report.parts[index]
    results = report.results[part.name]
    out = [f"<section id='{part.name}'><h2>{html.escape(part.title)}</h2>"]
    for result in results:
        out += [
            f"<p><b>{html.escape(result.model)}</b>: {html.escape(' '.join(result.notes))} ({result.seconds:.1f} s)</p>"
        ]
    difference = differences.get(part.name)
    if difference is not None:
        out.append(f"<p class='difference'>{html.escape(difference.text())}</p>")
    for i, fig in enumerate(part_figures(results)):
        out.append(_figure_html(fig, f"{part.name}-figure-{i}"))
    for title in results[0].tables:
        frame = pd.concat([r.tables[title] for r in results if title in r.tables], ignore_index=True)
        out.append(f"<h3>{html.escape(title)}</h3>")
        body = _table_html(frame)
        out.append(f"<details><summary>{len(frame)} rows</summary>{body}</details>" if len(frame) > 40 else body)
    out.append(_definitions(report, part.methods))
    out.append("</section>")
    return "\n".join(out)


def render_report(report: Report) -> str:
    """The whole page: header with provenance and timings, one section per part; plotly.js inlined once (the figures
    need the `views` extra)."""
    from attnlib.views.plotly_js import plotly_js

    differences = report.differences()
    title = f"Attention report: {' vs '.join(report.models)}"
    provenance = {
        "model" if len(report.models) == 1 else "models": ", ".join(report.models),
        **{
            f"{source} file": f"{c['name']} ({c['n_inputs']} inputs, {c.get('bytes', '?')} bytes, SHA-1 {c['sha1']})"
            for source, c in report.corpora.items()
        },
        **(
            {
                "statistics of": "; ".join(
                    f"{name}: its encoder's self-attention over the source (an encoder-decoder, METHODS §18)"
                    for name in report.stacks
                )
            }
            if report.stacks
            else {}
        ),
        "options": ", ".join(f"{k}={v}" for k, v in vars(report.options).items()),
        "library": f"attnlib {report.library_version}",
        "created": report.created,
        "total time": f"{report.seconds:.1f} s",
    }
    timing_rows = [{"model": m, "step": "load the model", "seconds": s} for m, s in report.load_seconds.items()]
    for t in report.timings:
        timing_rows.append(
            {
                "model": t.model,
                "step": f"forward pass over the {t.source} file ({t.n_inputs} inputs, shared by {', '.join(t.parts)})",
                "seconds": t.forward_seconds,
            }
        )
    for results in report.results.values():
        timing_rows += [{"model": r.model, "step": f"part: {r.part}", "seconds": r.seconds} for r in results]
    contents = "".join(f"<li><a href='#{p.name}'>{html.escape(p.title)}</a></li>" for p in report.parts)
    sections = "\n".join(_part_section(report, i, differences) for i in range(len(report.parts)))
    layers_note = "Layers and heads are numbered from 1, as in the papers (the command-line JSON counts from 0)."
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<script type='text/javascript'>{plotly_js()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1>{_key_values(provenance)}<p>{layers_note}</p>"
        f"<h2>Time each part took</h2>{_table_html(pd.DataFrame(timing_rows))}"
        f"<ul>{contents}</ul>{sections}</body></html>\n"
    )
