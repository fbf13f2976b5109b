"""Every analysis, by name (the command line's commands, the result files' `command`); `analyse`, the notebook's way
to run one, with one function per analysis (`special(model, corpus=...)`, ...), and `load`, a result file's run.
Adding an analysis: its module (options, accumulators, result, an `Analysis`), one line in ANALYSES and its function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlib.analyses.aggregation import AGGREGATION, AggregationResult
from attnlib.analyses.attention import ATTENTION, AttentionMaps
from attnlib.analyses.base import (
    DEFAULT_BATCH_SIZE,
    OPTIONAL_SOURCES,
    Analysis,
    AnalysisRun,
    Inputs,
    run_analysis,
    run_of_record,
)
from attnlib.analyses.compose import COMPOSE, CompositionResult
from attnlib.analyses.deps import DEPS, DepsResult
from attnlib.analyses.gradient import GRADIENT, GradientImportance
from attnlib.analyses.hta import HTA, TokenAttribution
from attnlib.analyses.importance import ABLATE, IMPORTANCE, HeadImportance, InputAblation
from attnlib.analyses.lens import LENS
from attnlib.analyses.norms import NORMS, InputNorms
from attnlib.analyses.patch import PATCH, PatchResult
from attnlib.analyses.positions import POSITIONS, PositionsResult
from attnlib.analyses.probe import PROBE, ProbeResult
from attnlib.analyses.qk import QK, QKResult
from attnlib.analyses.retrieval import RETRIEVAL, RetrievalResult
from attnlib.analyses.roles import ROLES, RolesResult
from attnlib.analyses.routes import ROUTES
from attnlib.analyses.special import SPECIAL, SpecialTokens
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusError
from attnlib.core.model import DEFAULT_MODEL, LoadedModel
from attnlib.results.files import read_result_file

ANALYSES: dict[str, Analysis] = {
    a.name: a
    for a in (
        ATTENTION,
        HTA,
        NORMS,
        SPECIAL,
        DEPS,
        POSITIONS,
        AGGREGATION,
        PROBE,
        ABLATE,
        IMPORTANCE,
        QK,
        GRADIENT,
        ROLES,
        RETRIEVAL,
        LENS,
        ROUTES,
        PATCH,
        COMPOSE,
    )
}


def analysis_named(name: str) -> Analysis:
    """The analysis of this name; ValueError naming the others when there is none."""
    if name not in ANALYSES:
        raise ValueError(f"no analysis {name!r}; the analyses: {', '.join(sorted(ANALYSES))}.")
    return ANALYSES[name]


def analyse(
    name: str,
    model: str | LoadedModel = DEFAULT_MODEL,
    *,
    text: str | None = None,
    pair: str | None = None,
    corpus: Inputs | None = None,
    conllu: Inputs | None = None,
    train: Inputs | None = None,
    test: Inputs | None = None,
    limit: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
    engine: str = "local",
    device: str = "cpu",
    workers: int = 2,
    cpus_per_worker: float = 1.0,
    **options: Any,
) -> AnalysisRun:
    """Run one analysis and return the run (its `result`, the model's facts, options and provenance): on a text (and
    pair), or on what it reads (a corpus, a CoNLL-U treebank, or train and test treebanks: a file's path or the inputs
    themselves), with its options as keywords.

    >>> lm = attnlib.load_model()
    >>> run = attnlib.analyse("special", lm, corpus="data/classroom_pairs.tsv", head_map=True)
    >>> run.result.special.layers["sep"], run.to_json(), run.to_pandas(), run.show(), run.save("special.json")

    Unknown options, bad values (OptionError) and inputs the analysis does not read (CorpusError) raise clear errors;
    `progress(done, total)` is called as inputs are done."""
    analysis = analysis_named(name)
    given = {"corpus": corpus, "conllu": conllu, "train": train, "test": test}
    takes = analysis.sources + OPTIONAL_SOURCES.get(analysis.reads, ())
    extra = [source for source, value in given.items() if value is not None and source not in takes]
    if extra or (analysis.reads not in ("text", "model") and (text is not None or pair is not None)):
        given_as = "what its options name" if analysis.reads == "options" else "text= (and pair=)"
        reads = " and ".join(f"{s}=" for s in analysis.sources) or given_as
        raise CorpusError(f"{name} reads {reads}, not {', '.join(extra) or 'text='}.")
    run = run_analysis(
        analysis,
        model,
        analysis.make_options(**options),
        text=text,
        pair=pair,
        inputs={source: value for source, value in given.items() if value is not None},
        limit=limit,
        engine=engine,
        device=device,
        workers=workers,
        cpus_per_worker=cpus_per_worker,
        batch_size=batch_size,
        progress=progress,
    )
    return run


def load(path: str | Path) -> AnalysisRun:
    """The run a result file holds (`attnlib <command> ... --out PATH`, `AnalysisRun.save`); ResultFileError when the
    file is not one, or is malformed."""
    record = read_result_file(Path(path).read_bytes())
    return run_of_record(analysis_named(record.command), record)


# One function per analysis: `attnlib.special(model, corpus=...)` is `attnlib.analyse("special", model, corpus=...)`.
# The keywords are analyse's (limit=, batch_size=, engine=, device=, progress=, ...) and the analysis's options (the
# command's flags with underscores: head_map=True for --head-map); `attnlib <command> --help` lists them.


def attention(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
              **keywords: Any) -> AnalysisRun[AttentionMaps]:  # fmt: skip
    """The attention maps of one sentence or pair (`attnlib attention`)."""
    return analyse("attention", model, text=text, pair=pair, **keywords)


def hta(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
        **keywords: Any) -> AnalysisRun[TokenAttribution]:  # fmt: skip
    """Hidden Token Attribution per head of one sentence or pair (`attnlib hta`, METHODS §9, §13)."""
    return analyse("hta", model, text=text, pair=pair, **keywords)


def norms(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
          **keywords: Any) -> AnalysisRun[InputNorms]:  # fmt: skip
    """Value-weighted norms, residual+LayerNorm norms and rollouts of one input (`attnlib norms`, METHODS §11-13)."""
    return analyse("norms", model, text=text, pair=pair, **keywords)


def ablate(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
           **keywords: Any) -> AnalysisRun[InputAblation]:  # fmt: skip
    """One input with some heads switched off, e.g. heads="1-2,3-0" (`attnlib ablate`, METHODS §15)."""
    return analyse("ablate", model, text=text, pair=pair, **keywords)


def special(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
            **keywords: Any) -> AnalysisRun[SpecialTokens]:  # fmt: skip
    """Attention to [CLS], [SEP], punctuation and the rest over a corpus (`attnlib special`, METHODS §1-4, §11)."""
    return analyse("special", model, corpus=corpus, **keywords)


def deps(model: str | LoadedModel = DEFAULT_MODEL, *, conllu: Inputs,
         **keywords: Any) -> AnalysisRun[DepsResult]:  # fmt: skip
    """The best head per dependency relation of a CoNLL-U treebank (`attnlib deps`, METHODS §6, §7, §10)."""
    return analyse("deps", model, conllu=conllu, **keywords)


def positions(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
              **keywords: Any) -> AnalysisRun[PositionsResult]:  # fmt: skip
    """Relative positions of attention and of attribution over a corpus (`attnlib positions`, METHODS §8, §9)."""
    return analyse("positions", model, corpus=corpus, **keywords)


def aggregation(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
                **keywords: Any) -> AnalysisRun[AggregationResult]:  # fmt: skip
    """Attention, norms and rollouts against layer-output attribution (`attnlib aggregation`, METHODS §11-13)."""
    return analyse("aggregation", model, corpus=corpus, **keywords)


def probe(model: str | LoadedModel = DEFAULT_MODEL, *, train: Inputs, test: Inputs,
          **keywords: Any) -> AnalysisRun[ProbeResult]:  # fmt: skip
    """The attention-only dependency probe, trained on one treebank and scored on another (`attnlib probe`)."""
    return analyse("probe", model, train=train, test=test, **keywords)


def importance(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
               **keywords: Any) -> AnalysisRun[HeadImportance]:  # fmt: skip
    """Every head switched off over a corpus, with the no-op test (`attnlib importance`, METHODS §15)."""
    return analyse("importance", model, corpus=corpus, **keywords)


def qk(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs | None = None, conllu: Inputs | None = None,
       **keywords: Any) -> AnalysisRun[QKResult]:  # fmt: skip
    """Queries and keys of one head in one picture (`attnlib qk`, METHODS §17); a CoNLL-U corpus as conllu=."""
    return analyse("qk", model, corpus=corpus if conllu is None else conllu, **keywords)


def gradient(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
             **keywords: Any) -> AnalysisRun[GradientImportance]:  # fmt: skip
    """Clark et al.'s gradient importance of attention over a corpus (`attnlib gradient`, METHODS §5); needs a model
    with a trained masked-LM head."""
    return analyse("gradient", model, corpus=corpus, **keywords)


def roles(model: str | LoadedModel = DEFAULT_MODEL, *, text: str | None = None, corpus: Inputs | None = None,
          **keywords: Any) -> AnalysisRun[RolesResult]:  # fmt: skip
    """Head roles (`attnlib roles`, METHODS §20): the repeated-random-tokens probe's induction, duplicate-token and
    previous-token scores, the OV copying score, the in-context gain and the causal check; a text or a corpus adds
    pattern detection; checkpoints=[...] scores each training checkpoint."""
    return analyse("roles", model, text=text, corpus=corpus, **keywords)


def retrieval(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs | None = None,
              **keywords: Any) -> AnalysisRun[RetrievalResult]:  # fmt: skip
    """Wu et al.'s retrieval score of every head of a decoder: a needle in a haystack (the corpus; default UD EWT
    dev's text) at each length and depth, decoded greedily or forced (`attnlib retrieval`, METHODS §20)."""
    return analyse("retrieval", model, corpus=corpus, **keywords)


def lens(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, **keywords: Any) -> AnalysisRun[Any]:
    """The logit lens of every node, the direct logit attribution of every component and each head's readout at one
    position of one input, e.g. position=-1, token=" Drive" (`attnlib lens`, METHODS §21); needs an LM head."""
    return analyse("lens", model, text=text, **keywords)


def patch(model: str | LoadedModel = DEFAULT_MODEL, **keywords: Any) -> AnalysisRun[PatchResult]:
    """Activation patching (`attnlib patch`, METHODS §22): clean=, corrupted= (and position=, answer=, wrong=,
    metric=, direction=, grid=, attribution=True), or pairs= a file of pairs (engine="ray" runs it on Ray)."""
    return analyse("patch", model, **keywords)


def compose(model: str | LoadedModel = DEFAULT_MODEL, **keywords: Any) -> AnalysisRun[CompositionResult]:
    """Q-, K- and V-composition between every earlier and later head (`attnlib compose`, METHODS §22)."""
    return analyse("compose", model, **keywords)


def routes(model: str | LoadedModel = DEFAULT_MODEL, *, text: str | None = None, corpus: Inputs | None = None,
           **keywords: Any) -> AnalysisRun[Any]:  # fmt: skip
    """Information-flow routes (`attnlib routes`, METHODS §21): a text's contribution graph and the route to the
    prediction at `position` (threshold=, mode=), a RouteGraph; a corpus gives each head's route frequency, a
    RouteFrequency (engine="ray" too)."""
    return analyse("routes", model, text=text, corpus=corpus, **keywords)


RUNNERS = {f.__name__: f for f in (attention, hta, norms, ablate, special, deps, positions, aggregation, probe,
                                   importance, qk, gradient, roles, retrieval, lens, routes, patch, compose)}  # fmt: skip
