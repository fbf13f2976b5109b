"""attnlib: attention maps and statistics of BERT-family encoders, without any UI."""

from .corpus import CorpusError, CorpusInput, Sentence, read_conllu, read_corpus, read_text_corpus
from .model import DEFAULT_MODEL, LoadedModel, ModelFacts, ModelLoadError, load_model
from .runner import Encoded, InputError, RunResult, encode, run, run_batches
from .words import word_level_attention

__version__ = "0.1.0"
__all__ = [
    "DEFAULT_MODEL",
    "CorpusError",
    "CorpusInput",
    "Encoded",
    "InputError",
    "LoadedModel",
    "ModelFacts",
    "ModelLoadError",
    "RunResult",
    "Sentence",
    "encode",
    "load_model",
    "read_conllu",
    "read_corpus",
    "read_text_corpus",
    "run",
    "run_batches",
    "word_level_attention",
]
