"""Head finder: a score per head for each attention pattern named in the papers, accumulated over a corpus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attnlib.core.batches import MADE_IN_POST_INIT
from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION, Capture
from attnlib.core.runner import RunResult

PATTERNS: dict[str, str] = {
    "cls": "attends to [CLS]",
    "sep": "attends to [SEP]",
    "broad": "broad / bag of words",
    "next": "next token",
    "prev": "previous token",
    "self": "itself",
    "same_word": "same word",
    "same_word_other": "same word in the other sentence",
}
PATTERN_HELP: dict[str, str] = {
    "cls": "mean over rows of the attention to the [CLS] position (METHODS §2)",
    "sep": "mean over rows of the attention to the [SEP] positions (METHODS §2)",
    "broad": "mean row entropy (METHODS §3 smoothing) divided by ln n, so 1 = uniform over all tokens",
    "next": "(1/n) Σ A[i, i+1] (METHODS §2)",
    "prev": "(1/n) Σ A[i, i-1] (METHODS §2)",
    "self": "(1/n) Σ A[i, i] (METHODS §2)",
    "same_word": "mean, over tokens whose word occurs again elsewhere in the input, of the attention to the "
    "other occurrences (case-folded; words without a letter or digit are left out)",
    "same_word_other": "the same, counting only occurrences in the other sentence of a pair",
}
ENTROPY_SMOOTHING = 1e-4  # METHODS §3: p = 0.9999 * A + 0.0001 / n


def _word_keys(result: RunResult) -> list[str | None]:
    """Each token's word, case-folded, or None for special tokens and words with no letter or digit."""
    keys: list[str | None] = []
    for w in result.word_ids:
        word = result.words[w].casefold() if w is not None else ""
        keys.append(word if any(ch.isalnum() for ch in word) else None)
    return keys


def same_word_mask(result: RunResult, other_sentence: bool = False) -> np.ndarray:
    """[n, n] bool: key j is another occurrence (a different word) of query i's word; optionally only in the other sentence."""
    keys = _word_keys(result)
    word_ids = np.array([-1 if w is None else w for w in result.word_ids])
    codes = {k: c for c, k in enumerate(sorted({k for k in keys if k is not None}))}
    code = np.array([-1 if k is None else codes[k] for k in keys])
    mask = (code[:, None] == code[None, :]) & (code[:, None] >= 0) & (word_ids[:, None] != word_ids[None, :])
    if other_sentence:
        seg = np.asarray(result.segments)
        mask &= seg[:, None] != seg[None, :]
    return mask


def input_scores(result: RunResult) -> np.ndarray:
    """Scores [patterns, layers, heads] of one input; NaN where a pattern has no row to score (e.g. no repeated word)."""
    a = result.attentions.astype(np.float64)
    n = result.n
    out = np.full((len(PATTERNS),) + a.shape[:2], np.nan)
    out[0] = a[..., :, result.cls_mask].sum(-1).mean(-1)
    out[1] = a[..., :, result.sep_mask].sum(-1).mean(-1)
    p = (1 - ENTROPY_SMOOTHING) * a + ENTROPY_SMOOTHING / n
    out[2] = (-(p * np.log(p)).sum(-1)).mean(-1) / np.log(n)
    out[3] = np.diagonal(a, offset=1, axis1=-2, axis2=-1).sum(-1) / n
    out[4] = np.diagonal(a, offset=-1, axis1=-2, axis2=-1).sum(-1) / n
    out[5] = np.diagonal(a, axis1=-2, axis2=-1).sum(-1) / n
    for k, other in ((6, False), (7, True)):
        mask = same_word_mask(result, other)
        rows = mask.any(axis=1)
        if rows.any():
            out[k] = (a[..., rows, :] * mask[rows]).sum(-1).mean(-1)
    return out


@dataclass
class PatternAccumulator:
    """Sums of per-input pattern scores and the number of inputs each pattern was scored on (an engine.Accumulator)."""

    n_layers: int
    n_heads: int
    sums: np.ndarray = MADE_IN_POST_INIT  # [patterns, layers, heads]
    counts: np.ndarray = MADE_IN_POST_INIT  # [patterns]
    captures: ClassVar[frozenset[Capture]] = ATTENTION  # what each input's run holds for it

    def __post_init__(self) -> None:
        if self.sums is None:
            self.sums = np.zeros((len(PATTERNS), self.n_layers, self.n_heads))
        if self.counts is None:
            self.counts = np.zeros(len(PATTERNS), dtype=np.int64)

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        """Add one input's scores; patterns it cannot score (NaN) are not counted for it."""
        scores = input_scores(result)
        scored = ~np.isnan(scores[:, 0, 0])
        self.sums[scored] += scores[scored]
        self.counts += scored

    def merge(self, other: PatternAccumulator) -> PatternAccumulator:
        """The accumulator over both sets of inputs."""
        return PatternAccumulator(self.n_layers, self.n_heads, self.sums + other.sums, self.counts + other.counts)

    def scores(self) -> np.ndarray:
        """Mean score per pattern and head [patterns, layers, heads] (unweighted over inputs); NaN for unscored patterns."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.sums / np.where(self.counts > 0, self.counts, np.nan)[:, None, None]


@dataclass(frozen=True)
class HeadPick:
    """One head ranked for one pattern (0-based layer and head)."""

    pattern: str
    rank: int
    layer: int
    head: int
    score: float

    @property
    def label(self) -> str:
        """1-based "layer-head" as in Clark et al."""
        return f"{self.layer + 1}-{self.head + 1}"


def rank_heads(scores: np.ndarray, top: int = 3, patterns: Sequence[str] = tuple(PATTERNS)) -> list[HeadPick]:
    """The `top` heads per pattern by score, highest first; ties go to the lower layer, then the lower head."""
    picks = []
    for p, name in enumerate(patterns):
        flat = scores[p].reshape(-1)
        if np.isnan(flat).all():
            continue
        order = np.lexsort((np.arange(flat.size), -np.nan_to_num(flat, nan=-np.inf)))
        n_heads = scores.shape[2]
        for rank, idx in enumerate(order[:top], start=1):
            picks.append(HeadPick(name, rank, int(idx // n_heads), int(idx % n_heads), float(flat[idx])))
    return picks
