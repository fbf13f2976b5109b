"""attnlib: attention maps and statistics of transformers (encoders, decoders, encoder-decoders), without any UI.

    import attnlib
    lm = attnlib.load_model()                     # the default model; any Hub id or folder that loads
    maps = attnlib.attention(lm, text="The cat sat.", pair="It was tired.").result
    run = attnlib.special(lm, corpus="data/classroom_pairs.tsv", head_map=True)  # attnlib.analyse("special", ...)
    run.show(); run.to_pandas(); run.to_json()   # its figures, its long table, what `attnlib special --json` prints
    run.save("special.json"); attnlib.load("special.json")  # the result file the app's "Load a result file" opens
    attnlib.search_corpus(lm, "The cat sat.", 2, corpus="data/classroom_single.txt", layer=2).matches

`attnlib.ANALYSES` names every analysis (each one a command of the command line with the same options, and a
function here of the same name returning an `AnalysisRun`).

Layout: `core` (models, families, the runner, hooks, corpora), `stats` (plain functions of arrays), `analyses` (one
module per analysis), `search`, `results` (files, shipped data), `present` (report, tour, tables), `cli`, `views`.
"""

__version__ = "0.1.0"

import importlib
import sys
import types
from typing import Any

from attnlib import moved
from attnlib.analyses.base import Analysis, AnalysisRun, OptionError
from attnlib.analyses.registry import (
    ANALYSES,
    ablate,
    aggregation,
    analyse,
    attention,
    compose,
    deps,
    gradient,
    hta,
    importance,
    lens,
    load,
    norms,
    patch,
    positions,
    probe,
    qk,
    retrieval,
    roles,
    routes,
    special,
)
from attnlib.core.corpus import CorpusError, CorpusInput, Sentence, read_conllu, read_corpus, read_text_corpus
from attnlib.core.model import DEFAULT_MODEL, LoadedModel, ModelFacts, ModelLoadError, load_model
from attnlib.core.runner import Encoded, InputError, RunResult, encode, run, run_batches
from attnlib.core.words import word_level_attention
from attnlib.results.files import ResultFile, ResultFileError, read_result_file
from attnlib.search.by_example import CorpusIndex, build_index, search_corpus

moved.install()

__all__ = [
    "ANALYSES",
    "DEFAULT_MODEL",
    "Analysis",
    "AnalysisRun",
    "CorpusError",
    "CorpusIndex",
    "CorpusInput",
    "Encoded",
    "InputError",
    "LoadedModel",
    "ModelFacts",
    "ModelLoadError",
    "OptionError",
    "ResultFile",
    "ResultFileError",
    "RunResult",
    "Sentence",
    "ablate",
    "aggregation",
    "analyse",
    "attention",
    "build_index",
    "compose",
    "deps",
    "encode",
    "gradient",
    "hta",
    "importance",
    "lens",
    "load",
    "load_model",
    "norms",
    "patch",
    "positions",
    "probe",
    "qk",
    "read_conllu",
    "read_corpus",
    "read_result_file",
    "read_text_corpus",
    "retrieval",
    "roles",
    "routes",
    "run",
    "run_batches",
    "search_corpus",
    "special",
    "word_level_attention",
]


def __getattr__(name: str) -> Any:
    """`attnlib.special_tokens` and the other modules of the flat layout, at their new homes (see `attnlib.moved`);
    the names of analyses (`attnlib.special`, `attnlib.attention`, ...) are their functions, not those modules."""
    if name in moved.MOVED and name not in ANALYSES:
        return importlib.import_module(f"attnlib.{name}")
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")


class _Package(types.ModuleType):
    """attnlib itself, whose analysis functions stay in place when an old import path of the same name (`import
    attnlib.special`, which imports attnlib.stats.special) is imported: Python would set the module as the attribute."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ANALYSES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
