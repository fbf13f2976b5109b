"""METHODS §20's probe scores written as loops over sequences, repeats and positions, from the definitions alone (the
independent computation that tests/stats/test_roles.py and tests/analyses/test_roles.py hold attnlib's to)."""

from __future__ import annotations

import numpy as np


def looped_repeat_score(maps: np.ndarray, b: int, s: int, r: int, back: int) -> np.ndarray:
    """Mean over sequences and queries i = p(k, m), k >= 2, of sum_{k' < k} A[:, :, i, i - (k - k') s + back]
    (back 1: induction, 0: duplicate-token); maps [inputs, layers, heads, n, n] -> [layers, heads]."""
    out = np.zeros(maps.shape[1:3])
    count = 0
    for seq in maps:
        for k in range(2, r + 1):
            for m in range(1, s + 1):
                i = b + (k - 1) * s + (m - 1)
                out += sum(seq[:, :, i, i - (k - kk) * s + back] for kk in range(1, k))
                count += 1
    return out / count


def looped_previous_score(maps: np.ndarray, b: int) -> np.ndarray:
    """Mean over sequences and rows i >= b + 1 of A[:, :, i, i - 1]."""
    n = maps.shape[-1]
    return np.mean([seq[:, :, i, i - 1] for seq in maps for i in range(b + 1, n)], axis=0)
