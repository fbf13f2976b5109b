"""The retrieval score (METHODS §20, Wu et al. 2024): needle tests built from token ids, and the per-step copy check of
every head from the attention rows that produced each decoded token; plain functions of ids and arrays."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

RETRIEVAL_THRESHOLD = 0.1  # a head whose retrieval score exceeds this is a retrieval head (Wu et al.)
EXTRA_STEPS = 5  # greedy decoding runs up to q + 5 steps
RETRIEVED_RECALL = 0.5  # a greedy test counts where the needle's ROUGE-1 recall in the decoded text is above this
_NOT_ALPHANUMERIC = re.compile(r"[^a-z0-9]+")


@dataclass
class NeedleTest:
    """One test's input: BOS (where the model starts with one), the haystack's first `length` ids with the needle
    inserted after depth * length of them (rounded half up), then the prompt; `needle_span` [start, end) of the needle."""

    length: int
    depth: float
    input_ids: list[int]
    needle_span: tuple[int, int]


def needle_test(
    haystack: Sequence[int], needle: Sequence[int], prompt: Sequence[int], length: int, depth: float, bos: int | None
) -> NeedleTest:
    """The test of one context length (haystack ids kept) and depth (the fraction of them before the needle);
    ValueError when the haystack is shorter than `length`, the needle empty or the depth outside [0, 1]."""
    if len(haystack) < length:
        raise ValueError(f"the haystack has {len(haystack)} tokens, fewer than the length {length} asked for")
    if not needle:
        raise ValueError("the needle has no token")
    if not 0 <= depth <= 1:
        raise ValueError(f"a depth is a fraction of the haystack, from 0 to 1, not {depth}")
    before = math.floor(depth * length + 0.5)  # rounded half up
    start = (bos is not None) + before
    ids = ([] if bos is None else [bos]) + list(haystack[:before]) + list(needle)
    ids += list(haystack[before:length]) + list(prompt)
    return NeedleTest(length, depth, [int(i) for i in ids], (start, start + len(needle)))


def copying_keys(rows: np.ndarray, sequence: Sequence[int], span: tuple[int, int], produced: int) -> np.ndarray:
    """The copy check of one decoding step: rows [layers, heads, keys] of the query row that produced `produced`, over
    the keys `sequence[:keys]`; per head the key j* = argmax_j of its row where j* lies in the needle `span` and
    sequence[j*] == produced, else -1 ([layers, heads] ints)."""
    best = rows.argmax(axis=-1)
    ids = np.asarray(sequence[: rows.shape[-1]])
    copies = (best >= span[0]) & (best < span[1]) & (ids[best] == produced)
    return np.where(copies, best, -1)


class CopyCounter:
    """g_h of one test: the distinct needle keys each head copied from over the decoding steps (METHODS §20)."""

    def __init__(self, layers: int, heads: int, span: tuple[int, int]) -> None:
        self.span = span
        self.copied: list[list[set[int]]] = [[set() for _ in range(heads)] for _ in range(layers)]

    def step(self, rows: np.ndarray, sequence: Sequence[int], produced: int) -> None:
        """Take one step's rows [layers, heads, keys] (sequence: the input and the tokens decoded before)."""
        keys = copying_keys(rows, sequence, self.span, produced)
        for layer, head in zip(*np.nonzero(keys >= 0)):
            self.copied[layer][head].add(int(keys[layer, head]))

    def scores(self) -> np.ndarray:
        """|g_h| / q per head, [layers, heads]."""
        q = self.span[1] - self.span[0]
        return np.array([[len(g) / q for g in layer] for layer in self.copied], dtype=float).reshape(
            len(self.copied), -1
        )


def copy_scores(steps: Sequence[np.ndarray], input_ids: Sequence[int], span: tuple[int, int],
                decoded: Sequence[int]) -> np.ndarray:  # fmt: skip
    """One test's scores [layers, heads] from every step's rows [layers, heads, len(input_ids) + t]."""
    layers, heads = steps[0].shape[:2]
    counter = CopyCounter(layers, heads, span)
    sequence = list(input_ids) + list(decoded)
    for rows, produced in zip(steps, decoded):
        counter.step(rows, sequence, produced)
    return counter.scores()


def retrieval_heads(scores: np.ndarray, threshold: float = RETRIEVAL_THRESHOLD) -> list[list[int]]:
    """[[layer, head], ...] (0-based, in order) of the heads whose score exceeds the threshold."""
    return [[int(l), int(h)] for l, h in zip(*np.nonzero(np.asarray(scores) > threshold))]


@cache
def _stem():  # NLTK's Porter stemmer (its default mode), which rouge_score's use_stemmer=True uses; imported when asked
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer().stem


def rouge_words(text: str) -> list[str]:
    """The words ROUGE compares, as rouge_score tokenizes with use_stemmer=True: lower-cased, split on anything not a
    letter or digit, words of more than 3 characters Porter-stemmed."""
    stem = _stem()
    return [stem(w) if len(w) > 3 else w for w in _NOT_ALPHANUMERIC.sub(" ", text.lower()).split()]


def rouge1_recall(reference: str, candidate: str) -> float:
    """ROUGE-1 recall: the share of the reference's words (counted with repeats) that the candidate has (0 for a
    reference without words, as rouge_score gives)."""
    wanted, got = Counter(rouge_words(reference)), Counter(rouge_words(candidate))
    return sum((wanted & got).values()) / max(sum(wanted.values()), 1)
