"""Head roles (METHODS §20) as plain numpy functions: the repeated-random-tokens probe's ids and its induction,
duplicate-token and previous-token scores, the in-context gain, TransformerLens-compatible pattern detection and the
OV circuit's copying score. Maps are [layers, heads, n, n] (several inputs: [inputs, layers, heads, n, n])."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attnlib.stats.special import first_token_share

PROBE_ROLES = ("previous", "duplicate", "induction")  # the probe's scores, and detection's patterns
DetectMeasure = Literal["mul", "abs"]
DETECT_MEASURES: tuple[DetectMeasure, ...] = ("mul", "abs")
ROLE_THRESHOLD = 0.4  # §20: previous-token, duplicate-token and induction heads score at least this
COPYING_THRESHOLD = 0.5  # §20: a copying head's OV eigenvalue score
CONTROL_DRAWS = 5  # §20: the causal check's control is the mean over this many draws of random heads
ABS_DECIMALS = 3  # TransformerLens's "abs" measure rounds n * mean|A - P| to 3 decimals


@dataclass(frozen=True)
class ProbeIds:
    """The probe's sequences [R, n] (BOS, then s ids repeated r times), and what shaped them."""

    ids: np.ndarray  # [R, b + r s] int64
    repeat_length: int  # s, as used (shorter than asked where the model's maximum length is)
    repeats: int  # r
    bos: int | None  # the BOS id every sequence starts with, or None (b = 0)
    asked_length: int  # s as asked

    @property
    def b(self) -> int:
        """1 where the sequences start with a BOS, else 0."""
        return 0 if self.bos is None else 1

    @property
    def shortened(self) -> bool:
        """Whether s was cut to fit the model's maximum length."""
        return self.repeat_length < self.asked_length

    def position(self, k: int, m: int) -> int:
        """p(k, m) = b + (k - 1) s + (m - 1): the m-th id of repeat k (both from 1)."""
        return self.b + (k - 1) * self.repeat_length + (m - 1)


def probe_length(repeat_length: int, repeats: int, bos: bool, max_length: int) -> int:
    """§20's s: the one asked, or floor((max_length - b) / r) where b + r s would not fit; ValueError below 1."""
    b = int(bos)
    s = min(repeat_length, (max_length - b) // repeats)
    if s < 1:
        raise ValueError(f"the model takes at most {max_length} tokens: too few for {repeats} repeats of one token.")
    return s


def probe_ids(
    ordinary: np.ndarray,
    *,
    sequences: int,
    repeat_length: int,
    repeats: int,
    seed: int,
    bos: int | None,
    max_length: int,
) -> ProbeIds:
    """§20's probe: sequence r is BOS (where given), then s distinct ids drawn without replacement from `ordinary` by
    numpy.random.default_rng(seed + r), repeated `repeats` times; s shrinks to fit max_length."""
    ordinary = np.asarray(ordinary, np.int64)
    s = probe_length(repeat_length, repeats, bos is not None, max_length)
    if s > len(ordinary):
        raise ValueError(f"the vocabulary has {len(ordinary)} ordinary tokens, fewer than s = {s} distinct ones.")
    rows = []
    for r in range(sequences):
        drawn = np.random.default_rng(seed + r).choice(ordinary, size=s, replace=False)
        rows.append(np.concatenate([[bos] if bos is not None else [], np.tile(drawn, repeats)]).astype(np.int64))
    return ProbeIds(np.stack(rows), s, repeats, bos, repeat_length)


def _repeat_positions(b: int, s: int, repeats: int, back: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(queries [q], keys [q, repeats - 1], weights [q, repeats - 1]): every query i = p(k, m) with k >= 2, and for
    each earlier repeat k' < k the key i - (k - k') s + back with weight 1 (the other columns: weight 0)."""
    queries, keys, valid = [], [], []
    for k in range(2, repeats + 1):
        for m in range(1, s + 1):
            i = b + (k - 1) * s + (m - 1)
            row = [i - (k - kk) * s + back for kk in range(1, k)]
            queries.append(i)
            keys.append(row + [i] * (repeats - k))
            valid.append([1.0] * (k - 1) + [0.0] * (repeats - k))
    return np.array(queries), np.array(keys), np.array(valid)


def repeat_score(maps: np.ndarray, b: int, s: int, repeats: int, back: int) -> np.ndarray:
    """Mean over inputs and over the queries of repeats 2..r of sum_{k'<k} A[..., i, i - (k-k') s + back]: maps
    [inputs, layers, heads, n, n] -> [layers, heads]."""
    queries, keys, valid = _repeat_positions(b, s, repeats, back)
    gathered = maps[..., queries[:, None], keys]  # [inputs, layers, heads, q, repeats - 1]
    summed = (gathered.astype(np.float64) * valid).sum(-1)
    return summed.mean(axis=(0, -1))


def induction_score(maps: np.ndarray, b: int, s: int, repeats: int) -> np.ndarray:
    """§20's induction score I[l, h]: attention to the token after each earlier occurrence of the query's token."""
    return repeat_score(maps, b, s, repeats, back=1)


def duplicate_score(maps: np.ndarray, b: int, s: int, repeats: int) -> np.ndarray:
    """§20's duplicate-token score: attention to the earlier occurrences of the query's token."""
    return repeat_score(maps, b, s, repeats, back=0)


def previous_score(maps: np.ndarray, b: int) -> np.ndarray:
    """§20's previous-token score: mean over inputs and over rows i >= b + 1 of A[..., i, i - 1]."""
    n = maps.shape[-1]
    rows = np.arange(b + 1, n)
    return maps[..., rows, rows - 1].astype(np.float64).mean(axis=(0, -1))


def probe_first_share(maps: np.ndarray) -> np.ndarray:
    """§18's first_share of every head over the probe's sequences: [inputs, layers, heads, n, n] -> [layers, heads]."""
    return first_token_share(maps[..., :1].astype(np.float64)).mean(axis=0)  # key 0's column alone, in float64


def probe_scores(maps: np.ndarray, probe: ProbeIds) -> dict[str, np.ndarray]:
    """The probe's previous, duplicate and induction scores and first_share, each [layers, heads]."""
    b, s, r = probe.b, probe.repeat_length, probe.repeats
    return {
        "previous": previous_score(maps, b),
        "duplicate": duplicate_score(maps, b, s, r),
        "induction": induction_score(maps, b, s, r),
        "first_share": probe_first_share(maps),
    }


def repeat_loss(losses: np.ndarray, b: int, s: int, k: int) -> float:
    """L_k: the mean next-token loss at the positions p(k, m), m = 1..s-1, over the inputs; losses [inputs, n - 1]
    with losses[:, i] the loss of predicting token i + 1 at position i."""
    start = b + (k - 1) * s
    return float(np.asarray(losses, np.float64)[:, start : start + s - 1].mean())


def in_context_gain(losses: np.ndarray, b: int, s: int) -> float:
    """§20's G = L_1 - L_2 from per-position next-token losses [inputs, n - 1]."""
    if s < 2:
        raise ValueError("the in-context gain needs at least two tokens per repeat.")
    return repeat_loss(losses, b, s, 1) - repeat_loss(losses, b, s, 2)


def top_heads(scores: np.ndarray, k: int) -> list[tuple[int, int]]:
    """The k heads of highest score (NaN last), ties by layer then head: [(layer, head), ...]."""
    layers, heads = scores.shape
    flat = np.nan_to_num(np.asarray(scores, np.float64).ravel(), nan=-np.inf)
    order = np.lexsort((np.arange(flat.size), -flat))  # score descending, then index (layer, head) ascending
    return [(int(i) // heads, int(i) % heads) for i in order[: min(k, layers * heads)]]


def control_draws(
    n_layers: int, n_heads: int, excluded: Iterable[tuple[int, int]], k: int, seed: int, draws: int = CONTROL_DRAWS
) -> list[list[tuple[int, int]]]:
    """The causal check's controls: `draws` sets of k heads drawn uniformly, without replacement, from the heads not
    excluded (numpy.random.default_rng(seed)); fewer heads where fewer are left."""
    out = set(excluded)
    others = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in out]
    rng = np.random.default_rng(seed)
    size = min(k, len(others))
    return [[others[int(i)] for i in sorted(rng.choice(len(others), size=size, replace=False))] for _ in range(draws)]


def heads_at(scores: np.ndarray, threshold: float) -> list[tuple[int, int]]:
    """The heads whose score is at least the threshold, layer by layer."""
    return [(int(l), int(h)) for l, h in zip(*np.nonzero(np.asarray(scores) >= threshold))]


# ------------------------------------------------------------------------------------ pattern detection


def previous_pattern(n: int) -> np.ndarray:
    """TransformerLens's previous-token pattern: P[i, i-1] = 1."""
    return np.eye(n, k=-1)


def duplicate_pattern(tokens: Sequence[int]) -> np.ndarray:
    """TransformerLens's duplicate-token pattern: P[i, j] = 1 for j < i with x_j = x_i."""
    x = np.asarray(tokens)
    return np.tril(x[:, None] == x[None, :], k=-1).astype(np.float64)


def induction_pattern(tokens: Sequence[int]) -> np.ndarray:
    """TransformerLens's induction pattern: the duplicate pattern moved one key to the right (P[i, j] = 1 for
    1 <= j <= i with x_{j-1} = x_i and j - 1 < i), lower-triangular."""
    duplicate = duplicate_pattern(tokens)
    shifted = np.zeros_like(duplicate)
    shifted[:, 1:] = duplicate[:, :-1]
    return np.tril(shifted)


def detection_patterns(tokens: Sequence[int]) -> dict[str, np.ndarray]:
    """The three patterns of an input's token ids, each [n, n]."""
    return {
        "previous": previous_pattern(len(tokens)),
        "duplicate": duplicate_pattern(tokens),
        "induction": induction_pattern(tokens),
    }


def _excluded(n: int, exclude_first: bool, exclude_current: bool) -> np.ndarray:
    """[n, n] 1 where an entry counts, 0 where the exclusions set it to 0."""
    keep = np.ones((n, n))
    if exclude_first:
        keep[:, 0] = 0
    if exclude_current:
        np.fill_diagonal(keep, 0)
    return keep


def detection_score(
    maps: np.ndarray,
    pattern: np.ndarray,
    measure: DetectMeasure = "mul",
    exclude_first: bool = False,
    exclude_current: bool = False,
) -> np.ndarray:
    """§20's (TransformerLens's `detect_head`) score of every head of one input: maps [..., n, n], pattern [n, n].
    "mul": sum(A' P) / sum(A'), A' the map with the excluded entries 0; "abs": 1 - round(n mean|A - P|, 3), the
    excluded entries of |A - P| 0 and the mean over all n x n entries."""
    n = maps.shape[-1]
    a = np.asarray(maps, np.float64)
    keep = _excluded(n, exclude_first, exclude_current)
    if measure == "mul":
        kept = a * keep
        with np.errstate(invalid="ignore", divide="ignore"):
            return (kept * pattern).sum(axis=(-2, -1)) / kept.sum(axis=(-2, -1))
    if measure != "abs":
        raise ValueError(f"measure must be 'mul' or 'abs', not {measure!r}")
    error = (np.abs(a - pattern) * keep).mean(axis=(-2, -1)) * n
    return 1 - np.round(error, ABS_DECIMALS)


def detection_scores(
    maps: np.ndarray, tokens: Sequence[int], exclude_first: bool = False, exclude_current: bool = False
) -> dict[str, dict[str, np.ndarray]]:
    """Every measure's score of every pattern for one input: {measure: {pattern: [layers, heads]}}."""
    patterns = detection_patterns(tokens)
    return {
        measure: {
            name: detection_score(maps, pattern, measure, exclude_first, exclude_current)
            for name, pattern in patterns.items()
        }
        for measure in DETECT_MEASURES
    }


# ------------------------------------------------------------------------------------ the OV circuit


def eigen_copying(matrix: np.ndarray) -> np.ndarray:
    """sum Re(lambda) / sum |lambda| over the eigenvalues of each square matrix [..., m, m] (NaN where all are 0); torch's
    LAPACK, on torch's threads."""
    eigenvalues = torch.linalg.eigvals(torch.from_numpy(np.asarray(matrix, np.float64))).numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return eigenvalues.real.sum(-1) / np.abs(eigenvalues).sum(-1)


def copying_scores(circuit: np.ndarray, values: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """§20's copying score of every head from W_U W_E [d, d] (`circuit`), W_V^h [layers, heads, d, d_h] (`values`)
    and W_O^h [layers, heads, d_h, d] (`outputs`): the eigenvalues of W_O^h (W_U W_E) W_V^h [d_h, d_h]. The d x d
    product of every head runs in float32 (relative error ~ sqrt(d) eps32), the d_h x d_h rest in float64."""
    reads = torch.from_numpy(np.asarray(outputs, np.float32)) @ torch.from_numpy(np.asarray(circuit, np.float32))
    small = reads.double() @ torch.from_numpy(np.asarray(values, np.float64))
    return eigen_copying(small.numpy())
