"""Distances between heads (METHODS §4, Clark Fig. 6): summed Jensen-Shannon divergence, MDS map, behaviour labels."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION, Capture
from attnlib.core.runner import RunResult
from attnlib.results.files import ResultFileError, numeric_array
from attnlib.stats.special import SpecialTokenResult

JS_SMOOTHING = 1e-3  # METHODS §4: 0.999 * A + 0.001 / n
DEFAULT_BUFFER_COLUMNS = 16384

# Behaviour labels of the head map. Clark et al. do not publish their thresholds; these are ours.
SHARE_THRESHOLD = 0.5  # a head is "next", "prev", "[CLS]", "[SEP]" or "punctuation" when that share exceeds this
BROAD_ENTROPY_FRACTION = 0.8  # a head is "broad" when its mean entropy exceeds this fraction of mean ln n
SHARE_BEHAVIOURS = {"next": "next", "prev": "prev", "cls": "[CLS]", "sep": "[SEP]", "punct": "punctuation"}
BEHAVIOURS = ("next", "prev", "broad", "[CLS]", "[SEP]", "punctuation", "other")


def smoothed(attn: np.ndarray) -> np.ndarray:
    """0.999 * A + 0.001 / n in float32, for attention [..., n, n]."""
    n = attn.shape[-1]
    return attn.astype(np.float32, copy=False) * np.float32(1 - JS_SMOOTHING) + np.float32(JS_SMOOTHING / n)


def js_divergence_rows(p: np.ndarray, q: np.ndarray) -> float:
    """Sum over rows of the Jensen-Shannon divergence (nats) between matching rows of two [rows, n] distributions."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    m = (p + q) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_p = np.where(p > 0, p * np.log(p / m), 0.0)
        kl_q = np.where(q > 0, q * np.log(q / m), 0.0)
    return float(0.5 * kl_p.sum() + 0.5 * kl_q.sum())


# Float32 error analysis of the pairwise pass, for the float32 smoothed maps (u = 2**-24, float32's unit roundoff).
# Each term t = s ln s, s = p_a + p_b, is s rounded once (exact when a = b: s = 2 p_a) times the kernel's log (within
# LOG_REL_ERROR = 2.9 u relatively, attnlib.stats.js_kernel), rounded once more: |t_float - t| <= 3.9 u |t| + u (|t| + s),
# the last term from rounding s (the derivative of s ln s is ln s + 1). Terms are summed in float64, so order and
# tiling change nothing at float32's scale. A row's terms have sum s = 2 and s >= 2c (c = 0.001 / n), so
# sum |t| <= L = 2 ln(500 n); a row's JS divergence, (S_aa + S_bb) / 4 - S_ab / 2, is then within
# 2 * 3.9 u L / 4 + (4.9 u L + 2 u) / 2 = 4.4 u L + u (js_row_error): 6.6e-6 for n = 512, 4.8e-6 for n = 16, worst
# case. Rounding errors of independent terms add like a random walk, to far less: on 200 EWT dev sentences the summed
# divergences are within 2.4e-8 relatively of a float64 computation (4e-9 per row; numpy's float32 log and sums: 5e-7),
# against JS values of 0.04-0.7 per row between trained heads.
TILE_COLUMNS = 2048  # one tile's [heads, 2048] float32 maps stay in a core's L2 cache


def js_row_error(n: int) -> float:
    """Worst-case float32 error of one row's JS divergence between two heads, for inputs of n tokens (derived above)."""
    return 4.4 * 2.0**-24 * 2 * np.log(500 * n) + 2.0**-24


def threaded_sum(function: Callable[[int], np.ndarray], items: Sequence[int]) -> np.ndarray:
    """sum(function(i) for i in items), on as many threads of our own as torch uses (at most one per item)."""
    threads = min(torch.get_num_threads(), len(items))
    if threads <= 1:
        return sum(map(function, items), np.zeros(()))
    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(function, items), np.zeros(()))


def _pairwise_block(p: np.ndarray, columns: int) -> np.ndarray:
    """Summed JS divergence [K, K] (upper triangle filled) between the rows of p[:, :columns] (p [K, N] float32, columns:
    all rows' columns laid end to end).

    With S_ab = sum s ln s, s = p_a + p_b (so S_aa = 2 sum p ln p + 2 ln 2 mass_a), JS = sum p ln p / 2 + sum q ln q / 2
    - sum m ln m, m = s / 2, is (S_aa + S_bb) / 4 - S_ab / 2: the masses cancel and one kernel gives every term.
    Column tiles run on as many threads as torch uses for the forward pass (the kernel releases the GIL; threads of
    their own, unlike OpenMP's, never wait on each other, which matters on a busy machine)."""
    from attnlib.stats.js_kernel import (
        pair_sums,  # numba: imported when the first head map is computed, not with attnlib
    )

    p = np.ascontiguousarray(p, np.float32)  # a buffer already is: its first columns are read in place
    starts = range(0, columns, TILE_COLUMNS)

    def tile(start: int) -> np.ndarray:
        return pair_sums(p, start, min(start + TILE_COLUMNS, columns))

    s_log_s = threaded_sum(tile, starts)
    diagonal = np.diag(s_log_s)
    return np.maximum(np.triu(0.25 * (diagonal[:, None] + diagonal[None, :]) - 0.5 * s_log_s, 1), 0.0)


def pairwise_js(attn: np.ndarray) -> np.ndarray:
    """Summed JS divergence [K, K] between all heads (K = layers * heads) of one input's attention [layers, heads, n, n]."""
    layers, heads, n, _ = attn.shape
    upper = _pairwise_block(smoothed(attn).reshape(layers * heads, n * n), n * n)
    return upper + upper.T


class HeadDistances:
    """Accumulator of the JS divergence between every pair of heads, summed over all rows of all inputs.

    Smoothed maps are buffered side by side (bounded by buffer_columns) so the pairwise pass runs on large blocks.
    """

    captures: ClassVar[frozenset[Capture]] = ATTENTION  # what each input's run holds for it

    def __init__(self, n_layers: int, n_heads: int, buffer_columns: int = DEFAULT_BUFFER_COLUMNS) -> None:
        self.n_layers, self.n_heads = n_layers, n_heads
        self.buffer_columns = buffer_columns
        self.divergence = np.zeros((n_layers * n_heads,) * 2)  # upper triangle, summed
        self.n_inputs = 0
        self.n_rows = 0
        self._buffer: np.ndarray | None = None
        self._fill = 0

    @property
    def n_head_total(self) -> int:
        return self.n_layers * self.n_heads

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        """Add every row of one input."""
        attn = result.attentions
        n = attn.shape[-1]
        block = smoothed(attn).reshape(self.n_head_total, n * n)
        self.n_inputs += 1
        self.n_rows += n
        if n * n > self.buffer_columns:
            self.divergence += _pairwise_block(block, n * n)
            return
        if self._fill + n * n > self.buffer_columns:
            self._flush()
        if self._buffer is None:
            self._buffer = np.empty((self.n_head_total, self.buffer_columns), np.float32)
        self._buffer[:, self._fill : self._fill + n * n] = block
        self._fill += n * n

    def _flush(self) -> None:
        """Move the buffered rows into the sums (the accumulated value does not change)."""
        if self._fill and self._buffer is not None:
            self.divergence += _pairwise_block(self._buffer, self._fill)
            self._fill = 0

    def merge(self, other: HeadDistances) -> HeadDistances:
        """The accumulator over both input sets; neither operand's value changes."""
        if (self.n_layers, self.n_heads) != (other.n_layers, other.n_heads):
            raise ValueError("Cannot merge head distances of different models.")
        self._flush()
        other._flush()
        merged = HeadDistances(self.n_layers, self.n_heads, self.buffer_columns)
        merged.divergence = self.divergence + other.divergence
        merged.n_inputs = self.n_inputs + other.n_inputs
        merged.n_rows = self.n_rows + other.n_rows
        return merged

    def result(self) -> np.ndarray:
        """The symmetric [K, K] matrix of summed JS divergences; head k is layer k // n_heads, head k % n_heads."""
        self._flush()
        return self.divergence + self.divergence.T


def classical_mds(distances: np.ndarray, dims: int = 2) -> np.ndarray:
    """Classical (Torgerson) MDS: [K, dims] coordinates whose Euclidean distances approximate the matrix."""
    d = np.asarray(distances, np.float64)
    k = len(d)
    centre = np.eye(k) - 1.0 / k
    gram = -0.5 * centre @ (d**2) @ centre
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)
    order = np.argsort(values)[::-1][:dims]
    coords = vectors[:, order] * np.sqrt(np.clip(values[order], 0, None))
    signs = np.sign(coords[np.abs(coords).argmax(axis=0), np.arange(coords.shape[1])])
    return coords * np.where(signs == 0, 1, signs)  # fixed orientation: the largest coordinate of each axis is positive


def behaviour_labels(
    special: SpecialTokenResult,
    share_threshold: float = SHARE_THRESHOLD,
    broad_fraction: float = BROAD_ENTROPY_FRACTION,
) -> np.ndarray:
    """[layers, heads] label per head: the largest of the next/prev/[CLS]/[SEP]/punctuation shares above
    share_threshold; else "broad" when mean entropy > broad_fraction * mean ln n; else "other"."""
    keys = list(SHARE_BEHAVIOURS)
    shares = np.stack([special.heads[k] for k in keys])  # [5, layers, heads]
    best = shares.argmax(axis=0)
    labels = np.array([SHARE_BEHAVIOURS[k] for k in keys], dtype=object)[best]
    labels[shares.max(axis=0) <= share_threshold] = "other"
    broad = (labels == "other") & (special.heads["entropy"] > broad_fraction * special.uniform_entropy)
    labels[broad] = "broad"
    return labels


@dataclass
class HeadMap:
    """2-D map of the heads: coordinates [K, 2], 0-based layer and head of each point, behaviour labels, distances."""

    coords: np.ndarray
    layer: np.ndarray
    head: np.ndarray
    labels: np.ndarray
    divergence: np.ndarray

    def to_json(self) -> dict:
        """Points and the distance matrix, 0-based."""
        return {
            "x": self.coords[:, 0],
            "y": self.coords[:, 1],
            "layer": self.layer,
            "head": self.head,
            "behaviour": list(self.labels),
            "js_divergence": self.divergence,
            "thresholds": {"share": SHARE_THRESHOLD, "broad_entropy_fraction": BROAD_ENTROPY_FRACTION},
        }

    @classmethod
    def from_json(cls, m: dict, n_heads_total: int) -> HeadMap:
        """Read back what to_json wrote, for a model of n_heads_total heads; ResultFileError when malformed."""
        try:
            coords = np.column_stack([numeric_array(m["x"], "x", 1), numeric_array(m["y"], "y", 1)])
            hm = cls(
                coords,
                numeric_array(m["layer"], "layer", 1, int),
                numeric_array(m["head"], "head", 1, int),
                np.array([str(b) for b in m["behaviour"]], dtype=object),
                numeric_array(m["js_divergence"], "js_divergence", 2),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ResultFileError):
                raise
            raise ResultFileError(f"the head map is incomplete or malformed ({exc!r}).") from exc
        k = n_heads_total
        if coords.shape[0] != k or hm.divergence.shape != (k, k) or len(hm.labels) != k:
            raise ResultFileError("the head map does not match the number of heads.")
        return hm


def head_map(divergence: np.ndarray, special: SpecialTokenResult) -> HeadMap:
    """Embed the summed JS divergences in 2-D (as METHODS §4 says) and label each head's behaviour."""
    layers, heads = special.heads["cls"].shape
    index = np.arange(layers * heads)
    return HeadMap(
        classical_mds(divergence), index // heads, index % heads, behaviour_labels(special).reshape(-1), divergence
    )


def special_from_json(result: dict) -> tuple[SpecialTokenResult, HeadMap | None]:
    """(SpecialTokenResult, HeadMap or None) from the `special` command's JSON; ResultFileError when malformed."""
    special = SpecialTokenResult.from_json(result)
    if result.get("head_map") is None:
        return special, None
    return special, HeadMap.from_json(result["head_map"], special.heads["cls"].size)
