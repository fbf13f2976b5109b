"""attnlib: attention maps and statistics of transformers (encoders, decoders, encoder-decoders), without any UI.

    import attnlib
    lm = attnlib.load_model()                     # the default model; any BERT-family id or folder
    maps = attnlib.analyse("attention", lm, text="The cat sat.", pair="It was tired.")
    special = attnlib.analyse("special", lm, corpus="data/classroom_pairs.tsv", head_map=True)
    special.to_json()                             # what `attnlib special --json` prints, without the model
    attnlib.search_corpus(lm, "The cat sat.", 2, corpus="data/classroom_single.txt", layer=2).matches

`attnlib.ANALYSES` names every analysis (each one a command of the command line with the same options).

Layout: `core` (models, families, the runner, hooks, corpora), `stats` (plain functions of arrays), `analyses` (one
module per analysis), `search`, `results` (files, shipped data), `present` (report, tour, tables), `cli`, `views`.
"""

__version__ = "0.1.0"

import importlib
from typing import Any

from attnlib import moved
from attnlib.analyses.base import Analysis, OptionError
from attnlib.analyses.registry import ANALYSES, analyse
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
    "analyse",
    "build_index",
    "encode",
    "load_model",
    "read_conllu",
    "read_corpus",
    "read_result_file",
    "read_text_corpus",
    "run",
    "run_batches",
    "search_corpus",
    "word_level_attention",
]


def __getattr__(name: str) -> Any:
    """`attnlib.special` and the other modules of the flat layout, at their new homes (see `attnlib.moved`)."""
    if name in moved.MOVED:
        return importlib.import_module(f"attnlib.{name}")
    raise AttributeError(f"module 'attnlib' has no attribute {name!r}")
