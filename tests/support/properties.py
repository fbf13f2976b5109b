"""Hypothesis strategies and fake runs of the property tests (stats/test_properties.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from attnlib.core.runner import RunResult
from support.results import fake_result

WORDS = ["the", "cat", "sat", "on", "mat", ".", ",", "!", "dog", "ran"]  # few words: repeats and punctuation are common


DROPPED = "\u200b"  # a word the fake tokenizer gives no piece, as a real one does for a lone zero-width space

LAYERS, HEADS = 2, 3


def stochastic(rng: np.random.Generator, shape: tuple[int, ...], concentration: float) -> np.ndarray:
    """Random float32 rows that sum to 1; a small concentration makes them nearly one-hot."""
    x = rng.gamma(concentration, size=shape) + 1e-30
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def fake_run(
    words_a: list[str],
    pieces_a: list[int],
    words_b: list[str] | None,
    pieces_b: list[int] | None,
    seed: int,
    concentration: float,
    layers: int = LAYERS,
    heads: int = HEADS,
) -> RunResult:
    """A RunResult as the runner builds it: [CLS] A-pieces [SEP] (B-pieces [SEP]); words with 0 pieces are dropped."""
    tokens, segments, word_ids, words = ["[CLS]"], [0], [None], []
    for segment, (ws, ps) in enumerate([(words_a, pieces_a)] + ([(words_b, pieces_b)] if words_b is not None else [])):
        for w, p in zip(ws, ps):
            if p == 0:
                continue
            tokens += [w] + [f"##{w[:1]}"] * (p - 1)
            segments += [segment] * p
            word_ids += [len(words)] * p
            words.append(w)
        tokens.append("[SEP]")
        segments.append(segment)
        word_ids.append(None)
    n = len(tokens)
    rng = np.random.default_rng(seed)
    attentions = stochastic(rng, (layers, heads, n, n), concentration)
    return fake_result(attentions, tokens, segments=segments, word_ids=word_ids, words=words)


concentrations = st.sampled_from([0.02, 0.3, 1.0, 10.0])


seeds = st.integers(0, 2**32 - 1)


@st.composite
def sentences(draw, min_words: int = 1, max_words: int = 7, allow_dropped: bool = False):
    """(words, pieces per word) of one sentence."""
    words = draw(
        st.lists(st.sampled_from(WORDS + ([DROPPED] if allow_dropped else [])), min_size=min_words, max_size=max_words)
    )
    if allow_dropped and all(w == DROPPED for w in words):
        words[0] = "cat"
    pieces = [0 if w == DROPPED else draw(st.integers(1, 3)) for w in words]
    return words, pieces


@st.composite
def runs(draw, pairs: bool | None = None):
    """A fake single sentence or pair run."""
    words_a, pieces_a = draw(sentences())
    is_pair = draw(st.booleans()) if pairs is None else pairs
    words_b, pieces_b = draw(sentences()) if is_pair else (None, None)
    return fake_run(words_a, pieces_a, words_b, pieces_b, draw(seeds), draw(concentrations))
