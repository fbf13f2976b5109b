"""The `attention` analysis: the attention maps of one sentence or pair, with its tokens, segments and words."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .analysis import Analysis, Options
from .corpus import CorpusInput
from .model import LoadedModel
from .results import ResultFileError, malformed, numeric_array
from .runner import run


@dataclass(frozen=True)
class AttentionOptions(Options):
    """The attention maps take no options."""


@dataclass
class AttentionMaps:
    """One input's attention maps [layers, heads, query, key] (float32, 0-based) and what they are over."""

    tokens: list[str]
    segments: list[int]  # [n] 0 for sentence A, 1 for sentence B
    words: list[str]
    word_ids: list[int | None]  # [n] index into words, None for special tokens
    truncated: bool
    n_tokens_full: int  # length before truncation
    attentions: np.ndarray  # [layers, heads, n, n]

    def to_json(self) -> dict:
        """tokens, segments, words, word_ids, truncated, n_tokens_before_truncation, attentions (0-based)."""
        return {
            "tokens": self.tokens,
            "segments": self.segments,
            "words": self.words,
            "word_ids": self.word_ids,
            "truncated": self.truncated,
            "n_tokens_before_truncation": self.n_tokens_full,
            "attentions": self.attentions,
        }

    @classmethod
    def from_json(cls, data: dict) -> AttentionMaps:
        """Read back what to_json wrote; ResultFileError when malformed."""
        with malformed("`attention` result"):
            maps = cls(
                [str(t) for t in data["tokens"]],
                [int(s) for s in data["segments"]],
                [str(w) for w in data["words"]],
                [None if i is None else int(i) for i in data["word_ids"]],
                bool(data["truncated"]),
                int(data["n_tokens_before_truncation"]),
                numeric_array(data["attentions"], "attentions", 4, np.float32),
            )
        n = len(maps.tokens)
        if maps.attentions.shape[2:] != (n, n) or len(maps.segments) != n or len(maps.word_ids) != n:
            raise ResultFileError("the `attention` result's maps, tokens and segments differ in length.")
        return maps


def attention_maps(lm: LoadedModel, item: CorpusInput, options: AttentionOptions) -> AttentionMaps:
    """Run one sentence or pair and keep its attention maps."""
    r = run(lm, item.text_a, item.text_b, capture_qk=False)
    return AttentionMaps(
        r.tokens, r.segments.tolist(), r.words, list(r.word_ids), r.truncated, r.n_tokens_full, r.attentions
    )


ATTENTION: Analysis[AttentionOptions, AttentionMaps] = Analysis(
    name="attention",
    help="attention maps of one sentence or pair",
    options=AttentionOptions,
    reads="text",
    result=AttentionMaps,
    methods=(),
    compute=attention_maps,
)
