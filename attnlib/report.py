"""The whole study as one report: every corpus statistic for one model (or two compared), timed, with provenance.

A report is a list of parts (REPORT_PARTS). Each part names the file its inputs come from, makes empty accumulators
for a model and turns the filled ones into long tables (a `model` column first, layers and heads 1-based as on the
pages), its library result (for the figures) and per-layer values to compare. Parts reading the same file share one
engine pass, so the model runs once per file. The HTML is written by figures.report (this module runs no plotly).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from .aggregation import AggregationAccumulator, AggregationOptions, AggregationResult
from .attribution import DEFAULT_PROBES, DEFAULT_SEED, Attribution, Mode, hidden_token_attribution
from .commands.deps import dependency_accumulators
from .commands.positions import position_accumulators
from .commands.probe import probe_accumulators
from .corpus import CorpusError, CorpusInput, read_conllu, read_corpus
from .deps import CLARK_TABLE1, DependencyCounts, DependencyTable
from .engine import accumulate
from .model import LoadedModel, ModelFacts, load_model
from .norms import MEASURES, NORM_KEYS
from .positions import CORRELATIONS, PositionAccumulator, PositionOptions, PositionsResult
from .probe import ProbeCorpus, ProbeResult, extract_maps, score_probe, train_probe
from .results import make_result_file
from .runner import RunResult
from .shipped import ROOT
from .special_tokens import SpecialTokens, special_accumulators, special_results

METHODS_PATH = "docs/METHODS.md"  # links in the report point here, relative to the repository root
PAPER_MODELS = ("bert-base-uncased", "google-bert/bert-base-uncased")  # models Clark et al. Table 1 is about
STAT_NAMES = {
    "cls": "[CLS] share",
    "sep": "[SEP] share",
    "punct": "punctuation share",
    "other": "other-token share",
    "prev": "previous-token share",
    "self": "own-token share",
    "next": "next-token share",
    "sep_to_sep": "[SEP] rows to [SEP]",
    "rest_to_sep": "other rows to [SEP]",
    "entropy": "entropy (nats)",
    "cls_entropy": "[CLS]-row entropy (nats)",
}
NORM_NAMES = {
    **{key: f"{STAT_NAMES[key].removesuffix(' share')} norm share" for key in ("cls", "sep", "punct", "other")},
    **{
        f"value_{key}": f"{STAT_NAMES[key].removesuffix(' share')} value norm"
        for key in ("cls", "sep", "punct", "other")
    },
}
SHARE_KEYS = ("cls", "sep", "punct", "other", "prev", "self", "next", "sep_to_sep", "rest_to_sep")  # fractions of 1

ReportProgress = Callable[[str, int, int], None]  # (what runs now, inputs done, inputs in this pass)
Inputs = Mapping[str, Sequence[CorpusInput]]  # source ("corpus", "conllu", "train") -> its inputs


@dataclass(frozen=True)
class ReportOptions:
    """Options of every part (the commands' defaults; positions in estimate mode)."""

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
    """One part for one model: long tables, the library result the figures draw, values to compare, seconds."""

    part: str
    model: str
    tables: dict[str, pd.DataFrame]  # title -> table with a `model` column first
    result: Any  # the part's library result (figures.report draws it)
    comparable: dict[str, dict[str, float]]  # statistic -> {"layer 3": value, ...} on one scale per part
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # this part's own work (statistics, attribution), not the shared forward pass


FinishWithModel = Callable[[LoadedModel, list, Inputs, ReportOptions, "ReportProgress | None"], PartResult]


@dataclass(frozen=True)
class ReportPart:
    """One entry of the report: where its inputs come from, its accumulators and how they become a PartResult.

    `accumulators(lm, options, shared)` gets a dict shared by the parts of one pass (work they have in common, e.g.
    each input's attribution). A part whose accumulators need the model or other files to finish (the probe: maps of
    the test file in the shared pass, trained on another file) gives `finish_with_model` instead of `finish`. A part
    that cannot be an accumulator at all gives `run`. Both list the other files they need in `needs`."""

    name: str
    title: str
    source: str  # "corpus" or "conllu"
    methods: tuple[int, ...]  # sections of docs/METHODS.md it follows
    accumulators: Callable[[LoadedModel, ReportOptions, dict], list] | None = None
    finish: Callable[[ModelFacts, list, ReportOptions], PartResult] | None = None
    run: Callable[[LoadedModel, Mapping[str, Sequence[CorpusInput]], ReportOptions], PartResult] | None = None
    needs: tuple[str, ...] = ()
    finish_with_model: FinishWithModel | None = None

    def in_pass(self, inputs: Mapping[str, object]) -> bool:
        """Whether the part fills accumulators in the pass over its file (its file and every file it needs given)."""
        ready = self.finish is not None or self.finish_with_model is not None
        return self.accumulators is not None and ready and all(s in inputs for s in (self.source, *self.needs))


# ------------------------------------------------------------------------------------------------------ the parts


def layer_frame(model: str, per_layer: dict[str, np.ndarray]) -> pd.DataFrame:
    """Long table: model, layer (1-based), then one column per statistic ([layers] arrays)."""
    n_layers = len(next(iter(per_layer.values())))
    return pd.DataFrame({"model": model, "layer": np.arange(1, n_layers + 1), **per_layer})


def head_frame(model: str, per_head: dict[str, np.ndarray]) -> pd.DataFrame:
    """Long table: model, layer, head (1-based), then one column per statistic ([layers, heads] arrays)."""
    n_layers, n_heads = np.shape(next(iter(per_head.values())))
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    columns = {key: np.asarray(value).reshape(-1) for key, value in per_head.items()}
    return pd.DataFrame({"model": model, "layer": layer + 1, "head": head + 1, **columns})


def layer_values(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """{"layer 1": value, ...} of one statistic per layer ([layers]), numbered from 1."""
    return {f"layer {l + 1}": float(v) for l, v in enumerate(values)}


def by_layer(per_layer: dict[str, np.ndarray], keys: Sequence[str], names: dict[str, str]) -> dict[str, dict]:
    """{name: {"layer 1": value, ...}} for the keys given ([layers] arrays), the shape largest_difference compares."""
    return {names[k]: layer_values(per_layer[k]) for k in keys}


def _special_accumulators(lm: LoadedModel, options: ReportOptions, shared: dict) -> list:
    return special_accumulators(lm, options.all_punct, options.head_map, with_norms=True)


def _special_finish(facts: ModelFacts, accumulators: list, options: ReportOptions) -> PartResult:
    found: SpecialTokens = special_results(accumulators)
    result, hm, norms = found.special, found.head_map, found.norms
    assert norms is not None
    per_head = dict(result.heads)
    if hm is not None:
        per_head["behaviour"] = hm.labels.reshape(result.heads["cls"].shape)
    notes = [
        f"{result.n_inputs} inputs ({result.n_truncated} truncated to the model's length); punctuation: "
        f"{'every punctuation token' if result.all_punct else '. and ,'}; uniform attention's mean ln n = "
        f"{result.uniform_entropy:.3f}; norm shares weigh attention by the value norm ||f(x)|| (Kobayashi et al.)."
    ]
    return PartResult(
        "special",
        facts.name,
        {
            "Per layer (mean over heads)": layer_frame(facts.name, result.layers),
            "Per head": head_frame(facts.name, per_head),
            "Norm shares and value norms per layer (mean over heads)": layer_frame(facts.name, norms.layers),
            "Norm shares and value norms per head": head_frame(facts.name, norms.heads),
        },
        found,
        by_layer(result.layers, SHARE_KEYS, STAT_NAMES) | by_layer(norms.layers, list(NORM_KEYS[:4]), NORM_NAMES),
        notes,
    )


def paper_rows(relations: Sequence[str]) -> pd.DataFrame:
    """Clark et al. Table 1 (BERT-base uncased, WSJ) for the UD relations given, by the closest UD label."""
    rows = [
        {
            "relation": ud,
            "paper relation": rel,
            "paper head": head,
            "paper accuracy": acc / 100,
            "paper baseline offset": offset,
            "paper baseline accuracy": base / 100,
        }
        for rel, ud, head, acc, base, offset in CLARK_TABLE1
        if ud in relations
    ]
    return pd.DataFrame(rows)


@dataclass
class DepsPart:
    """What the deps part's figures draw."""

    counts: DependencyCounts
    table: DependencyTable


def _deps_accumulators(lm: LoadedModel, options: ReportOptions, shared: dict) -> list:
    return dependency_accumulators(lm)


def _deps_finish(facts: ModelFacts, accumulators: list, options: ReportOptions) -> PartResult:
    counts = accumulators[0]
    table = counts.table(min_count=options.min_count)
    frame = pd.DataFrame([asdict(r) for r in table.rows])
    frame.insert(0, "model", facts.name)
    frame["layer"] += 1
    frame["head"] += 1
    tables = {"Best head per relation against the best fixed offset": frame}
    notes = [
        f"{table.n_sentences} sentences, {table.n_words} words, {table.n_skipped} skipped (longer than the model "
        f"takes); relations with at least {options.min_count} dependents, root and punct pooled in 'all' only."
    ]
    if facts.name in PAPER_MODELS:
        paper = paper_rows(list(frame["relation"]))
        tables["This model next to Clark et al. (2019) Table 1"] = frame[
            ["model", "relation", "layer", "head", "accuracy", "baseline_accuracy"]
        ].merge(paper, on="relation")
        notes.append("Clark et al. used WSJ with Stanford labels; the UD label closest to each paper relation is used.")
    accuracy = {r.relation: r.accuracy for r in table.rows}
    return PartResult(
        "deps",
        facts.name,
        tables,
        DepsPart(counts, table),
        {"best-head accuracy": {f"relation {k}": v for k, v in accuracy.items()}},
        notes,
    )


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


def shared_attribution(lm: LoadedModel, shared: dict) -> SharedAttribution:
    """The pass's SharedAttribution (made by the first part that asks)."""
    return cast(SharedAttribution, shared.setdefault("attribution", SharedAttribution(lm)))


class AttributedPositions:
    """Engine accumulator that attributes each input (HTA) into a PositionAccumulator: positions share the pass."""

    def __init__(self, attribution: SharedAttribution, positions: PositionAccumulator) -> None:
        self.attribution, self.positions = attribution, positions

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        """As accumulate_variants does for one variant: attribute the input unless its length leaves it out."""
        if not self.positions.wants(result.n):
            self.positions.skip()
            return
        o = self.positions.options
        self.positions.add(result, self.attribution.of(result, cast(Mode, o.mode), o.probes, o.seed))

    def merge(self, other: AttributedPositions) -> AttributedPositions:
        return AttributedPositions(self.attribution, self.positions.merge(other.positions))


class AttributedAggregation:
    """Engine accumulator feeding an AggregationAccumulator: the run's norm maps and its (shared) attribution."""

    needs_norms = True

    def __init__(self, attribution: SharedAttribution, aggregation: AggregationAccumulator) -> None:
        self.attribution, self.aggregation = attribution, aggregation

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        o = self.aggregation.options
        self.aggregation.add(result, self.attribution.of(result, o.mode, o.probes, o.seed))

    def merge(self, other: AttributedAggregation) -> AttributedAggregation:
        return AttributedAggregation(self.attribution, self.aggregation.merge(other.aggregation))


def _positions_accumulators(lm: LoadedModel, options: ReportOptions, shared: dict) -> list:
    (positions,) = position_accumulators(lm, PositionOptions(mode="estimate", probes=options.probes))
    return [AttributedPositions(shared_attribution(lm, shared), positions)]


def _positions_finish(facts: ModelFacts, accumulators: list, options: ReportOptions) -> PartResult:
    result: PositionsResult = accumulators[0].positions.result()
    per_layer = {
        "attention_center_of_mass": result.attention_center_of_mass,
        "attribution_center_of_mass": result.attribution_center_of_mass,
        **{f"median_{name}": result.median_correlation(name) for name in CORRELATIONS},
    }
    per_head = {
        "attention_center_of_mass": result.attention_head_com,
        "attribution_center_of_mass": result.attribution_head_com,
        **result.correlation,
    }
    names = {f"median_{name}": f"median {name.replace('_', ' ')} correlation" for name in CORRELATIONS}
    notes = [
        f"{result.n_inputs} inputs, {result.n_longer} of them longer than the head dimension ({result.head_dim}); "
        f"Hidden Token Attribution in estimate mode with {result.options.probes} probes per token, seed "
        f"{result.options.seed}."
    ]
    return PartResult(
        "positions",
        facts.name,
        {
            "Per layer (mean over heads; correlations: median)": layer_frame(facts.name, per_layer),
            "Per head": head_frame(facts.name, per_head),
        },
        result,
        by_layer(per_layer, list(names), names),
        notes,
    )


def _aggregation_accumulators(lm: LoadedModel, options: ReportOptions, shared: dict) -> list:
    aggregation = AggregationAccumulator(
        lm.facts.n_layers, AggregationOptions("estimate", options.probes, DEFAULT_SEED)
    )
    return [AttributedAggregation(shared_attribution(lm, shared), aggregation)]


def _aggregation_finish(facts: ModelFacts, accumulators: list, options: ReportOptions) -> PartResult:
    result: AggregationResult = accumulators[0].aggregation.result()
    per_layer = {
        **{f"pearson_{m}": result.pearson[m] for m in MEASURES},
        **{f"spearman_{m}": result.spearman[m] for m in MEASURES},
    }
    centres = {f"center_of_mass_{m}": v for m, v in result.center_of_mass.items()}
    names = {f"spearman_{m}": f"{m.replace('_', ' ')} Spearman with G_out" for m in MEASURES}
    notes = [
        f"{result.n_inputs} inputs; layer-output attribution G_out in estimate mode with {result.options.probes} "
        f"probes per token, seed {result.options.seed} (the same attributions as the positions part)."
    ]
    return PartResult(
        "aggregation",
        facts.name,
        {
            "Agreement with layer-output attribution per layer (mean row correlation)": layer_frame(
                facts.name, per_layer
            ),
            "Centre of mass per layer": layer_frame(facts.name, centres),
        },
        result,
        by_layer(per_layer, list(names), names),
        notes,
    )


def _probe_accumulators(lm: LoadedModel, options: ReportOptions, shared: dict) -> list:
    return probe_accumulators(lm, with_embeddings=False)


def probe_tables(model: str, result: ProbeResult) -> dict[str, pd.DataFrame]:
    """The probe's summary row (layers and heads 1-based) and its accuracy per relation, as long tables."""
    best = result.best_head
    summary = {
        "model": model,
        "uas": result.uas,
        "best_head_accuracy": result.best_head_accuracy,
        "best_head_layer": best["layer"] + 1,
        "best_head_head": best["head"] + 1,
        "best_head_direction": best["direction"],
        "baseline_accuracy": result.baseline_accuracy,
        "baseline_offset": result.baseline_offset,
        "n_train": result.n_train,
        "n_test": result.n_test,
        "n_words": result.n_words,
        "n_skipped_train": result.n_skipped_train,
        "n_skipped_test": result.n_skipped_test,
    }
    relations = pd.DataFrame([{"relation": r, **v} for r, v in result.uas_by_relation.items()])
    relations.insert(0, "model", model)
    return {
        "Probe against the best single head and fixed offset": pd.DataFrame([summary]),
        "UAS per relation": relations,
    }


def _probe_finish(
    lm: LoadedModel, accumulators: list, inputs: Inputs, options: ReportOptions, progress: ReportProgress | None
) -> PartResult:
    test: ProbeCorpus = accumulators[0]
    label = f"{lm.facts.name}: probe training file"
    report = None if progress is None else (lambda done, total: progress(label, done, total))
    train = extract_maps(lm, cast(Sequence, inputs["train"]), False, options.batch_size, report)
    probe = train_probe(train, "attention", options.probe_epochs, options.probe_seed)
    result = score_probe(probe, train, test, "attention", options.probe_epochs)
    notes = [
        f"trained on {result.n_train} sentences ({options.probe_epochs} epoch, seed {options.probe_seed}), scored on "
        f"{result.n_test} ({result.n_words} words, punctuation excluded); {result.n_skipped} sentences skipped "
        "(longer than the model takes)."
    ]
    uas = {"probe UAS": {f"relation {r}": v["uas"] for r, v in result.uas_by_relation.items()}}
    return PartResult("probe", lm.facts.name, probe_tables(lm.facts.name, result), result, uas, notes)


REPORT_PARTS: tuple[ReportPart, ...] = (
    ReportPart(
        "special",
        "Special tokens, offsets and entropy (Clark et al. §3), with value-weighted norms (Kobayashi et al.)",
        "corpus",
        (1, 2, 3, 4, 11),
        _special_accumulators,
        _special_finish,
    ),
    ReportPart(
        "positions",
        "Local vs global: relative positions and Hidden Token Attribution (Pascual et al.)",
        "corpus",
        (8, 9),
        _positions_accumulators,
        _positions_finish,
    ),
    ReportPart(
        "aggregation",
        "Aggregation: attention, norms and rollouts against layer-output attribution (Kobayashi et al.; GlobEnc)",
        "corpus",
        (11, 12, 13),
        _aggregation_accumulators,
        _aggregation_finish,
    ),
    ReportPart(
        "deps",
        "Dependency heads against the best fixed offset (Clark et al. Table 1)",
        "conllu",
        (6, 7, 10),
        _deps_accumulators,
        _deps_finish,
    ),
    ReportPart(
        "probe",
        "Attention probe: all heads together predict each word's head (Clark et al. §5)",
        "conllu",
        (14,),
        _probe_accumulators,
        needs=("train",),
        finish_with_model=_probe_finish,
    ),
)


# ----------------------------------------------------------------------------------------------- running the parts


class _Timed:
    """Wraps an accumulator and adds up the seconds spent in its add()."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.seconds = inner, 0.0
        self.needs_norms = getattr(inner, "needs_norms", False)  # the engine captures value vectors when asked

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
    """Run every part whose files are in `inputs`, one engine pass per file (then the `run` parts); with timings."""
    results: dict[str, PartResult] = {}
    timings = []
    for source, items in inputs.items():
        group = [p for p in parts if p.source == source and p.in_pass(inputs)]
        if not group:
            continue
        shared: dict = {}
        timed = [[_Timed(a) for a in part.accumulators(lm, options, shared)] for part in group]  # type: ignore[misc]
        label = f"{lm.facts.name}: {' + '.join(p.name for p in group)}"
        counter = _Counter(label, len(items), progress)
        start = time.perf_counter()
        accumulate(lm, items, [a for accs in timed for a in accs] + [counter], batch_size=options.batch_size)
        seconds = time.perf_counter() - start
        own = [sum(a.seconds for a in accs) for accs in timed]
        timings.append(
            PassTiming(lm.facts.name, source, [p.name for p in group], len(items), seconds, seconds - sum(own))
        )
        for part, accs, add_seconds in zip(group, timed, own):
            start = time.perf_counter()
            filled = [a.inner for a in accs]
            if part.finish is not None:
                result = part.finish(lm.facts, filled, options)
            else:
                result = part.finish_with_model(lm, filled, inputs, options, progress)  # type: ignore[misc]
            result.seconds = add_seconds + time.perf_counter() - start
            results[part.name] = result
    for part in parts:
        if part.run is not None and all(s in inputs for s in (part.source, *part.needs)):
            if progress is not None:
                progress(f"{lm.facts.name}: {part.name}", 0, 1)
            start = time.perf_counter()
            result = part.run(lm, inputs, options)
            result.seconds = time.perf_counter() - start
            results[part.name] = result
            if progress is not None:
                progress(f"{lm.facts.name}: {part.name}", 1, 1)
    return [results[p.name] for p in parts if p.name in results], timings


# ---------------------------------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class Difference:
    """Where two models differ most: a statistic at one place (a layer, a relation), with both values."""

    statistic: str
    where: str
    value_a: float
    value_b: float

    @property
    def size(self) -> float:
        return abs(self.value_a - self.value_b)

    def text(self) -> str:
        """'largest difference: [CLS] share in layer 3, 0.61 vs 0.12'."""
        return f"largest difference: {self.statistic} in {self.where}, {self.value_a:.2f} vs {self.value_b:.2f}"


def largest_difference(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> Difference | None:
    """The largest |a - b| over the statistics and places both have (NaN skipped; ties: first in a's order)."""
    best: Difference | None = None
    for statistic, values in a.items():
        for where, value_a in values.items():
            value_b = b.get(statistic, {}).get(where)
            if value_b is None or not (np.isfinite(value_a) and np.isfinite(value_b)):
                continue
            candidate = Difference(statistic, where, float(value_a), float(value_b))
            if best is None or candidate.size > best.size:
                best = candidate
    return best


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
    inputs: dict[str, list] = {}
    for source, path in paths.items():
        if path is None:
            continue
        if source == "corpus":
            inputs[source] = read_corpus(path, limit)
            continue
        sentences = read_conllu(path)[:limit]
        if not sentences:
            raise CorpusError(f"{path}: no sentence in the file.")
        inputs[source] = sentences
    if "corpus" not in inputs and "conllu" not in inputs:
        raise CorpusError("give a corpus, a CoNLL-U treebank or both.")
    if "train" in inputs and "conllu" not in inputs:
        raise CorpusError("a training treebank needs a treebank to test the probe on (--conllu).")
    return inputs


def _corpus_record(path: str, n_inputs: int) -> dict:
    """Name, path, SHA-1 and number of inputs as result files record them, and the size in bytes."""
    record = make_result_file("report", "", path, n_inputs, {}, {}).corpus
    return {**record, "bytes": Path(path).stat().st_size}


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
    from . import __version__

    if "corpus" not in inputs and "conllu" not in inputs:
        raise CorpusError("give a corpus, a CoNLL-U treebank or both.")
    start = time.perf_counter()
    results: dict[str, list[PartResult]] = {}
    timings: list[PassTiming] = []
    load_seconds = {}
    names = []
    for name in models:
        loaded = time.perf_counter()
        lm = name if isinstance(name, LoadedModel) else load_model(name, device=device)
        load_seconds[lm.facts.name] = time.perf_counter() - loaded
        names.append(lm.facts.name)
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
