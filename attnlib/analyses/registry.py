"""Every analysis, by name (the command line's commands, the result files' `command`); `analyse`, one run of an
analysis by name with its options as keywords, and `load`, a result file's run. The notebook's functions, whose runs
also draw themselves, wrap these at the package's top (attnlib.runs: `attnlib.analyse`, `attnlib.special`, ...).
Adding an analysis: its module (options, accumulators, result, an `Analysis`) and one line in ANALYSES."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlib.analyses.aggregation import AGGREGATION
from attnlib.analyses.attention import ATTENTION
from attnlib.analyses.base import (
    DEFAULT_BATCH_SIZE,
    OPTIONAL_SOURCES,
    Analysis,
    AnalysisRun,
    Inputs,
    run_analysis,
    run_of_record,
)
from attnlib.analyses.compose import COMPOSE
from attnlib.analyses.deps import DEPS
from attnlib.analyses.gradient import GRADIENT
from attnlib.analyses.hta import HTA
from attnlib.analyses.importance import ABLATE, IMPORTANCE
from attnlib.analyses.lens import LENS
from attnlib.analyses.norms import NORMS
from attnlib.analyses.patch import PATCH
from attnlib.analyses.positions import POSITIONS
from attnlib.analyses.probe import PROBE
from attnlib.analyses.qk import QK
from attnlib.analyses.retrieval import RETRIEVAL
from attnlib.analyses.roles import ROLES
from attnlib.analyses.routes import ROUTES
from attnlib.analyses.special import SPECIAL
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
        ROUTES,
        LENS,
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
    >>> run = analyse("special", lm, corpus="data/classroom_pairs.tsv", head_map=True)
    >>> run.result.special.layers["sep"], run.to_json(), run.to_pandas(), run.save("special.json")

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
