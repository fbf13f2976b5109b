"""Word-level attention (METHODS section 6): columns of a word's pieces summed, rows merged by mean, first or max."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

RowRule = Literal["mean", "first", "max"]
ROW_RULES: tuple[RowRule, ...] = ("mean", "first", "max")


def word_groups(word_ids: Sequence[int | None]) -> list[list[int]]:
    """Token positions of each unit in order: special tokens stay alone, a word's pieces form one group."""
    groups: list[list[int]] = []
    last_word: int | None = None
    for pos, w in enumerate(word_ids):
        if w is not None and w == last_word:
            groups[-1].append(pos)
        else:
            groups.append([pos])
        last_word = w
    return groups


def word_level_attention(attn: np.ndarray, word_ids: Sequence[int | None], rule: RowRule = "mean") -> np.ndarray:
    """Map [..., n, n] token attention to [..., u, u] over units (words, plus each special token on its own)."""
    if rule not in ROW_RULES:
        raise ValueError(f"row rule must be one of {ROW_RULES}, not {rule!r}")
    groups = word_groups(word_ids)
    n = attn.shape[-1]
    member = np.zeros((n, len(groups)), dtype=attn.dtype)
    for u, g in enumerate(groups):
        member[g, u] = 1.0
    cols = attn @ member  # [..., n, u]: attention TO a word sums its pieces' columns
    if rule == "mean":
        rows = (member / member.sum(0, keepdims=True)).T @ cols
    elif rule == "first":
        rows = cols[..., [g[0] for g in groups], :]
    else:
        rows = np.stack([cols[..., g, :].max(axis=-2) for g in groups], axis=-2)
        rows = rows / rows.sum(axis=-1, keepdims=True)
    return rows


def unit_labels(tokens: Sequence[str], words: Sequence[str], word_ids: Sequence[int | None]) -> list[str]:
    """Label of each unit: the word for word groups, the token itself for special tokens."""
    labels = []
    for group in word_groups(word_ids):
        word = word_ids[group[0]]
        labels.append(tokens[group[0]] if word is None else words[word])
    return labels
