"""RunResults built by hand for tests of the statistics: given attention, or random."""

from __future__ import annotations

import numpy as np

from attnlib.core.runner import RunResult


def fake_result(
    attn: np.ndarray,  # [layers, heads, n, n]
    tokens: list[str],
    cls: np.ndarray | None = None,
    sep: np.ndarray | None = None,
    *,
    segments: list[int] | None = None,
    word_ids: list[int | None] | None = None,
    words: list[str] | None = None,
) -> RunResult:
    """A RunResult built by hand: [CLS] and [SEP] found by name unless their masks are given; no words unless given."""
    n = len(tokens)
    cls = np.array([t == "[CLS]" for t in tokens]) if cls is None else cls
    sep = np.array([t == "[SEP]" for t in tokens]) if sep is None else sep
    return RunResult(
        input_ids=list(range(n)),
        token_type_ids=None,
        tokens=tokens,
        segments=np.zeros(n, np.int8) if segments is None else np.array(segments, np.int8),
        word_ids=[None] * n if word_ids is None else word_ids,
        words=[] if words is None else words,
        cls_mask=cls,
        sep_mask=sep,
        special_mask=cls | sep,
        n_tokens_full=n,
        attentions=np.array(attn, np.float32),
    )


def random_input(rng: np.random.Generator, layers: int = 2, heads: int = 3, pair: bool | None = None) -> RunResult:
    """A random input of random length with CLS, words, punctuation, one or two SEPs."""
    n = int(rng.integers(4, 12))
    tokens = ["[CLS]"] + [str(rng.choice(["a", "b", ".", ",", "!"])) for _ in range(n - 2)] + ["[SEP]"]
    sep = np.zeros(n, bool)
    sep[-1] = True
    if pair if pair is not None else rng.random() < 0.5:
        tokens[n // 2] = "[SEP]"
        sep[n // 2] = True
    cls = np.zeros(n, bool)
    cls[0] = True
    x = rng.random((layers, heads, n, n)) ** 3
    return fake_result(x / x.sum(-1, keepdims=True), tokens, cls, sep)
