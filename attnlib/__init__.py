"""attnlib: attention maps and statistics of BERT-family encoders, without any UI.

    import attnlib
    lm = attnlib.load_model()                     # the default model; any BERT-family id or folder
    maps = attnlib.analyse("attention", lm, text="The cat sat.", pair="It was tired.")
    special = attnlib.analyse("special", lm, corpus="data/classroom_pairs.tsv", head_map=True)
    special.to_json()                             # what `attnlib special --json` prints, without the model
    attnlib.search_corpus(lm, "The cat sat.", 2, corpus="data/classroom_single.txt", layer=2).matches

`attnlib.ANALYSES` names every analysis (each one a command of the command line with the same options).
"""

__version__ = "0.1.0"

from .analyses import ANALYSES, analyse
from .analysis import Analysis, OptionError
from .corpus import CorpusError, CorpusInput, Sentence, read_conllu, read_corpus, read_text_corpus
from .model import DEFAULT_MODEL, LoadedModel, ModelFacts, ModelLoadError, load_model
from .results import ResultFile, ResultFileError, read_result_file
from .runner import Encoded, InputError, RunResult, encode, run, run_batches
from .search import CorpusIndex, build_index, search_corpus
from .words import word_level_attention

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
