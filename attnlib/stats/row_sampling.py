"""Uniform random samples of query rows and the offset sums estimated from them (METHODS §19).

For one input of n rows whose rows S (m of them, drawn uniformly without replacement) were computed, the offset sum
T[k] = sum over rows i with 0 <= i+k < n of M[i, i+k] is estimated by (n / m) sum_{i in S} y_i[k], y_i[k] = M[i, i+k]
(0 where i+k is out of range): every row is in S with probability m / n, so the estimate is unbiased. Its variance
n^2 (1 - m/n) S_y^2 / m (S_y^2: the variance of y_i[k] over the n rows) is estimated with the sample variance of y over
S, which is unbiased for S_y^2 under sampling without replacement. Divided by the exact number of (input, i) pairs with
offset k, the sums over inputs give an unbiased H[k] of METHODS §8 and, inputs being independent, its standard error.
"""

from __future__ import annotations

import numpy as np


def sampled_rows(n: int, sample_rows: int, sample_from: int, seed: int, input_index: int) -> np.ndarray | None:
    """The query rows of an input to compute, ascending: None (every row) when n <= sample_from or sample_rows >= n,
    else sample_rows rows drawn uniformly without replacement with a generator seeded by (seed, input_index)."""
    if n <= sample_from or sample_rows >= n:
        return None
    rng = np.random.default_rng([seed, input_index])
    return np.sort(rng.choice(n, size=sample_rows, replace=False))


def sampled_offset_sums(
    row_maps: np.ndarray, rows: np.ndarray, keep: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """From rows `rows` [m] of an input's maps (row_maps [..., m, n]): per offset k = j - i in -(n-1)..n-1, the
    unbiased estimate of the offset sum over all n rows and the estimate of its variance, each [..., 2n - 1].

    `keep` ([n] bool) drops the positions that are False as queries and as keys (their y is 0). With m = n the sums
    are the exact ones and the variance 0; m must be at least 2 otherwise."""
    m, n = row_maps.shape[-2:]
    keep = np.ones(n, bool) if keep is None else np.asarray(keep, bool)
    sums = np.zeros((*row_maps.shape[:-2], 2 * n - 1))
    squares = np.zeros_like(sums)
    for r, i in enumerate(np.asarray(rows)):
        y = row_maps[..., r, :].astype(np.float64) * (keep * keep[i])
        lo = n - 1 - i  # key j sits at offset j - i, index j - i + n - 1
        sums[..., lo : lo + n] += y
        squares[..., lo : lo + n] += y * y
    if m == n:
        return sums, np.zeros_like(sums)
    if m < 2:
        raise ValueError("a sample of query rows needs at least 2 rows for its standard error")
    sample_variance = np.clip(squares - sums * sums / m, 0.0, None) / (m - 1)
    return sums * (n / m), sample_variance * (n * n * (1 - m / n) / m)
