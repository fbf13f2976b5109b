"""What a search-by-example index holds (a layer's output, the embedding output, or context vectors of heads of a
layer; its dtype) and how many matches a search returns."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from attnlib.analyses.base import OptionError, Options, option
from attnlib.core.errors import SearchError
from attnlib.core.model import ModelFacts

Dtype = Literal["float16", "float32"]
FLOAT16_SCORE_BOUND = 2e-3  # METHODS §16: float16 scores agree with float32 within this
DEFAULT_K = 20


def parse_heads(text: str) -> tuple[int, ...]:
    """'7,1,4' -> (1, 4, 7): 0-based heads, sorted, each once; '' -> (); OptionError for anything else."""
    heads = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise OptionError(f"heads must be 0-based head numbers separated by commas (or 'all'), not {text!r}")
        heads.add(int(part))
    return tuple(sorted(heads))


@dataclass(frozen=True)
class IndexOptions(Options):
    """What an index holds: a layer's output, the embedding output, or context vectors of heads of a layer."""

    layer: int = option(0, "0-based layer: its output (mode hidden) or its heads' context vectors (--heads)", minimum=0)
    embeddings: bool = option(False, "the embedding output instead of a layer's output (mode hidden)")
    heads: str = option("", "mode heads: 0-based heads of the layer, e.g. 1,4,7, or 'all'; without: mode hidden")
    dtype: Dtype = option("float16", "how the index stores its vectors (default %(default)s)")
    all_punct: bool = option(False, "the class 'punct' takes every punctuation token, not only '.' and ','")

    def __post_init__(self) -> None:
        super().__post_init__()
        text = self.heads.strip().lower()
        canonical = "all" if text == "all" else ",".join(map(str, parse_heads(text)))
        object.__setattr__(self, "heads", canonical)
        if self.embeddings and self.heads:
            raise OptionError("the embedding output has no heads: give a layer with heads, or no heads")
        if self.embeddings and self.layer:
            raise OptionError("give a layer or the embedding output, not both")

    @property
    def mode(self) -> Literal["hidden", "heads"]:
        return "heads" if self.heads else "hidden"

    def head_list(self, n_heads: int) -> tuple[int, ...]:
        """The heads of mode heads (every head for 'all'); () in mode hidden."""
        return tuple(range(n_heads)) if self.heads == "all" else parse_heads(self.heads)

    def for_model(self, facts: ModelFacts) -> IndexOptions:
        """These options with 'all' spelled out; SearchError when the layer or a head is not the model's."""
        if not self.embeddings and self.layer >= facts.n_layers:
            raise SearchError(
                f"layer {self.layer} is not a layer of {facts.name}: it has {facts.n_layers} (0-{facts.n_layers - 1})."
            )
        heads = self.head_list(facts.n_heads)
        outside = [h for h in heads if h >= facts.n_heads]
        if outside:
            raise SearchError(
                f"head {outside[0]} is not a head of {facts.name}: each layer has {facts.n_heads} "
                f"(0-{facts.n_heads - 1})."
            )
        return replace(self, heads=",".join(map(str, heads)))

    def describe(self) -> str:
        """In words, 0-based: 'layer 2 output', 'embedding output', 'layer 2, heads 1,4 (context vectors)'."""
        if self.embeddings:
            return "embedding output"
        if self.heads:
            return f"layer {self.layer}, heads {self.heads} (context vectors)"
        return f"layer {self.layer} output"


@dataclass(frozen=True)
class SearchOptions(Options):
    """How many matches a search returns."""

    k: int = option(DEFAULT_K, "how many matches (default %(default)s)", minimum=1)
