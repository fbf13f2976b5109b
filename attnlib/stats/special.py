"""Special-token statistics over a corpus (METHODS sections 1-3): shares, [SEP] no-op, offsets and entropy."""

from __future__ import annotations

import math
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import torch

from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION, Capture

if TYPE_CHECKING:
    from attnlib.core.blockwise import Block
from attnlib.core.runner import Encoded, RunResult
from attnlib.results.files import ResultFileError, numeric_array

CLASS_KEYS: tuple[str, ...] = ("cls", "sep", "punct", "other")
OFFSET_KEYS = ("prev", "self", "next")
OFFSETS = {"prev": -1, "self": 0, "next": 1}
STAT_KEYS = CLASS_KEYS + OFFSET_KEYS + ("entropy", "cls_entropy", "sep_to_sep", "rest_to_sep")
CLARK_PUNCT = frozenset({".", ","})
WORDPIECE_MARKERS = ("##", "Ġ", "▁")  # BERT continuation, byte-level BPE space, SentencePiece space
ENTROPY_SMOOTHING = 1e-4  # METHODS §3: p = 0.9999 * A + 0.0001 / n
GATHERED_KEYS = 16  # class_row_mass gathers a class of at most this many keys, else multiplies by its indicator
ENTROPY_CHUNK = 2**20  # weights per piece of row_entropy's work (4 MB in float32)
SINK_THRESHOLD = 0.3  # METHODS §18 (Gu et al. 2024): a sink head sends more than this share to the first token


def strip_wordpiece_marker(token: str) -> str:
    """The token's text without a leading '##', 'Ġ' or '▁'."""
    for marker in WORDPIECE_MARKERS:
        if token.startswith(marker):
            return token[len(marker) :]
    return token


@lru_cache(maxsize=65536)
def is_punctuation(token: str, all_punct: bool = False) -> bool:
    """Whether a token is '.' or ',' (Clark et al.), or with all_punct any token made only of punctuation."""
    text = strip_wordpiece_marker(token) or token
    if not all_punct:
        return text in CLARK_PUNCT
    return bool(text) and all(c in string.punctuation or unicodedata.category(c).startswith("P") for c in text)


def punct_mask(tokens: Sequence[str], special_mask: np.ndarray | None = None, all_punct: bool = False) -> np.ndarray:
    """Boolean [n] mask of punctuation tokens; special tokens are never punctuation."""
    mask = np.fromiter((is_punctuation(t, all_punct) for t in tokens), dtype=bool, count=len(tokens))
    if special_mask is not None:
        mask &= ~np.asarray(special_mask, dtype=bool)
    return mask


def class_masks(cls_mask: np.ndarray, sep_mask: np.ndarray, punct: np.ndarray) -> np.ndarray:
    """[n, 4] float32 indicator of the classes cls, sep, punct, other (each token in exactly one)."""
    cls_mask = np.asarray(cls_mask, bool)
    sep_mask = np.asarray(sep_mask, bool) & ~cls_mask
    punct = np.asarray(punct, bool) & ~cls_mask & ~sep_mask
    other = ~(cls_mask | sep_mask | punct)
    return np.stack([cls_mask, sep_mask, punct, other], axis=1).astype(np.float32)


def class_share(attn: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """METHODS §2: (1/n) sum_i sum_{j in mask} A[..., i, j], for attention [..., n, n]."""
    return attn[..., np.asarray(mask, bool)].sum(axis=-1).mean(axis=-1)


def first_token_share(attn: np.ndarray) -> np.ndarray:
    """METHODS §18: a decoder's first_share of one input, (1/(n-1)) sum_{i>=1} A[..., i, 0] (row 0 alone when n = 1)."""
    rows = attn[..., 1:, 0] if attn.shape[-2] > 1 else attn[..., 0]
    return rows.mean(axis=-1)


def offset_share(attn: np.ndarray, offset: int) -> np.ndarray:
    """METHODS §2: (1/n) sum_i A[..., i, i + offset]; rows without such a key add 0."""
    return offset_sum(row_offsets(attn, (offset,))[..., 0], offset) / attn.shape[-1]


def offset_sum(weights: np.ndarray, offset: int) -> np.ndarray:
    """Sum over the rows [..., n] of each row's weight on key i + offset, over the rows that have that key only (the
    same terms in the same order as the map's diagonal, so the float32 sum is the diagonal's)."""
    n = weights.shape[-1]
    return weights[..., max(0, -offset) : n - max(0, offset)].sum(axis=-1)


def row_offsets(
    attn: np.ndarray, offsets: Sequence[int] = (-1, 0, 1), first_row: int = 0, first_key: int = 0
) -> np.ndarray:
    """[..., rows, len(offsets)]: each row's weight on key i + offset, row i = first_row + its place in the block
    of rows [..., rows, keys] whose keys start at first_key (0 where the block has no such key: masked or none)."""
    rows, keys = attn.shape[-2:]
    i = np.arange(rows)
    out = np.zeros((*attn.shape[:-1], len(offsets)), attn.dtype)
    for c, offset in enumerate(offsets):
        j = first_row + i + offset - first_key
        inside = (j >= 0) & (j < keys)
        out[..., inside, c] = attn[..., i[inside], j[inside]]
    return out


def rows_to_mask(attn: np.ndarray, rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over the selected query rows of their mass to the keys in mask (NaN when no row is selected)."""
    rows = np.asarray(rows, bool)
    if not rows.any():
        return np.full(attn.shape[:-2], np.nan)
    return attn[..., rows, :][..., np.asarray(mask, bool)].sum(axis=-1).mean(axis=-1)


def row_entropy(
    attn: np.ndarray,
    causal: bool = False,
    first_row: int = 0,
    scratch: Scratch | None = None,
    first_key: int = 0,
    n: int | None = None,
) -> np.ndarray:
    """METHODS §3: entropy in nats of each row of 0.9999 * A + 0.0001 / n; returns [..., rows] for rows [..., rows, keys]
    whose first is row first_row. Causal (§18): row i over its own i + 1 keys, smoothed with 0.0001 / (i + 1).

    A block of keys first_key.. of n (the others masked, weight 0) adds each missing key's smoothing term in closed
    form."""
    rows, keys = attn.shape[-2:]
    n = keys if n is None else n
    scratch = Scratch() if scratch is None else scratch
    dtype = np.result_type(attn.dtype, np.float32)
    i = first_row + np.arange(rows)
    if not causal:
        floor = np.full(rows, np.float32(ENTROPY_SMOOTHING / n))
        missing = np.full(rows, n - keys)
    else:
        floor = np.float32(ENTROPY_SMOOTHING) / (i + 1).astype(np.float32)  # row i has i + 1 keys
        missing = np.minimum(i + 1, first_key) + np.maximum(0, i + 1 - (first_key + keys))
    weights = _tensor(attn, dtype)
    entropy = np.empty(attn.shape[:-1], dtype)
    # a few rows at a time, so that the three passes over them stay in the cache (at 8,192 keys: 2.7 ms a block
    # of 12 heads x 42 rows, against 3.9 ms in one piece); torch's threads multiply, add and sum, numpy takes the
    # logarithm (twice as fast as torch's here)
    step = max(1, ENTROPY_CHUNK // max(1, math.prod(attn.shape[:-2]) * keys))
    for start in range(0, rows, step):
        part = slice(start, min(start + step, rows))
        shape = (*attn.shape[:-2], part.stop - start, keys)
        p = scratch.array(0, shape, dtype)
        torch.add(torch.from_numpy(floor[part, None]), weights[..., part, :], alpha=1 - ENTROPY_SMOOTHING,
                  out=torch.from_numpy(p))  # fmt: skip
        if causal:
            np.copyto(p, 1, where=first_key + np.arange(keys)[None, :] > i[part, None])  # later keys: 1 log 1 = 0
        terms = np.log(p, out=scratch.array(1, shape, dtype))
        entropy[..., part] = torch.from_numpy(terms).mul_(torch.from_numpy(p)).sum(-1).neg_().numpy()
    if missing.any():
        entropy -= (missing * floor * np.log(floor)).astype(dtype)
    return entropy


def _tensor(a: np.ndarray, dtype) -> torch.Tensor:
    """The array as a tensor of dtype, sharing its memory where it can."""
    if a.dtype != dtype or not a.flags.writeable or not a.flags.c_contiguous:
        a = np.ascontiguousarray(a, dtype)
    return torch.from_numpy(a)


class Scratch:
    """Working arrays that every block of a block-wise run reuses: made once, not per block (at 8,192 tokens the
    allocator keeps pieces of arrays freed and made again per block)."""

    def __init__(self) -> None:
        self._flat: dict[int, np.ndarray] = {}

    def array(self, slot: int, shape: tuple[int, ...], dtype) -> np.ndarray:
        """Slot's memory as a contiguous array of this shape (its values are whatever was left there)."""
        size = math.prod(shape)
        flat = self._flat.get(slot)
        if flat is None or flat.size < size or flat.dtype != dtype:
            flat = self._flat[slot] = np.empty(size, dtype)
        return flat[:size].reshape(shape)


def uniform_entropy(n: int, causal: bool = False) -> float:
    """The entropy reference of one input of n tokens: ln n, or causal (§18) the mean of ln(i + 1) over rows i >= 1."""
    if not causal:
        return float(np.log(n))
    return float(np.log(np.arange(2, n + 1)).mean()) if n > 1 else float("nan")


def sink_rate(first_share: np.ndarray, threshold: float = SINK_THRESHOLD) -> dict:
    """METHODS §18: the fraction of heads whose first-token share exceeds the threshold, overall and per layer."""
    sinks = np.asarray(first_share) > threshold
    return {"overall": float(sinks.mean()), "per_layer": sinks.mean(axis=1)}


def class_row_mass(attn: np.ndarray, classes: np.ndarray, first_key: int = 0) -> np.ndarray:
    """Mass each row of attention [..., rows, keys] sends to the keys of each class ([n, 4] indicator): [..., rows, 4];
    the block's keys start at first_key (the others masked).

    A class of a few keys ([CLS], [SEP]) is gathered and summed, a larger one (punctuation) is the product with its
    indicator, and "other" is the row's total less those. One product with all four classes' [n, 4] indicator runs
    on BLAS threads that wait for each other, 50-250 times slower on a busy machine for this skinny shape; a product
    with one indicator does not (at 8,192 keys: 0.6-1.1 ms for 504 rows, loaded or not, against 0.9-2.0 ms for
    numpy's gather of the ~800 punctuation keys)."""
    member = np.asarray(classes, bool)[first_key : first_key + attn.shape[-1]]
    weights = _tensor(attn, attn.dtype if attn.dtype in (np.float32, np.float64) else np.float32)
    every_row = weights.reshape(-1, weights.shape[-1])
    mass = torch.empty((every_row.shape[0], member.shape[1]), dtype=torch.float32)
    for c in range(member.shape[1] - 1):
        keys = np.flatnonzero(member[:, c])
        if len(keys) <= GATHERED_KEYS:
            mass[:, c] = every_row.index_select(-1, torch.from_numpy(keys)).sum(-1)
        else:
            mass[:, c] = torch.mv(every_row, torch.from_numpy(member[:, c]).to(every_row.dtype))
    mass[:, -1] = every_row.sum(-1) - mass[:, :-1].sum(-1)  # |error| <= (n + 3) eps: rows sum to 1
    mass = mass.reshape(*attn.shape[:-1], member.shape[1])
    return mass.numpy()


@dataclass
class InputRows:
    """Per-row statistics of one input's attention, filled block by block of query rows (METHODS §19): each row's
    mass per class, its weight on the previous, own and next key, and its entropy; [layers, heads, n, ...] each."""

    classes: np.ndarray  # [n, 4] class_masks
    causal: bool
    mass: np.ndarray  # [layers, heads, n, 4]
    offsets: np.ndarray  # [layers, heads, n, 3]: OFFSETS' keys
    entropy: np.ndarray  # [layers, heads, n]
    scratch: Scratch = field(default_factory=Scratch)

    @classmethod
    def empty(cls, layers: int, heads: int, classes: np.ndarray, causal: bool, dtype=np.float32) -> InputRows:
        """Rows yet to be filled for an input of len(classes) tokens."""
        n = len(classes)
        return cls(
            classes,
            causal,
            np.zeros((layers, heads, n, len(CLASS_KEYS)), dtype),
            np.zeros((layers, heads, n, len(OFFSETS)), dtype),
            np.zeros((layers, heads, n), dtype),
        )

    def add_block(
        self, probs: np.ndarray, first_row: int, layer: int | slice = slice(None), first_key: int = 0
    ) -> None:
        """Fill the rows of a block of attention: [heads, rows, keys] of one layer, or [layers, heads, rows, keys], over
        keys first_key.. (every other key masked)."""
        rows, n = slice(first_row, first_row + probs.shape[-2]), len(self.classes)
        self.mass[layer, :, rows] = class_row_mass(probs, self.classes, first_key)
        self.offsets[layer, :, rows] = row_offsets(probs, tuple(OFFSETS.values()), first_row, first_key)
        self.entropy[layer, :, rows] = row_entropy(probs, self.causal, first_row, self.scratch, first_key, n)

    def statistics(self) -> dict[str, np.ndarray]:
        """Every statistic of the input as [layers, heads] arrays (sep_to_sep NaN without SEP): input_statistics."""
        layers, heads, n = self.entropy.shape
        shares = self.mass.mean(axis=2)
        stats = {key: shares[..., c] for c, key in enumerate(CLASS_KEYS)}
        rows = slice(1, None) if self.causal and n > 1 else slice(None)  # row 0 of a decoder sees only itself
        if self.causal:
            stats["cls"] = self.mass[..., rows, 0].mean(axis=-1)
        for c, (key, offset) in enumerate(OFFSETS.items()):
            stats[key] = offset_sum(self.offsets[..., c], offset) / n
        stats["entropy"] = self.entropy[..., rows].mean(axis=-1)
        stats["cls_entropy"] = self.entropy[..., 0]
        sep_rows = self.classes[:, 1].astype(bool)
        to_sep = self.mass[..., 1]
        nan = np.full((layers, heads), np.nan)
        stats["sep_to_sep"] = to_sep[..., sep_rows].mean(axis=-1) if sep_rows.any() else nan
        stats["rest_to_sep"] = to_sep[..., ~sep_rows].mean(axis=-1) if (~sep_rows).any() else nan
        return stats


def input_statistics(
    attn: np.ndarray, cls_mask: np.ndarray, sep_mask: np.ndarray, punct: np.ndarray, causal: bool = False
) -> dict[str, np.ndarray]:
    """Every statistic of one input's attention [layers, heads, n, n] as [layers, heads] arrays (sep_to_sep NaN without SEP).

    Causal (a decoder, METHODS §18): cls_mask is FIRST (position 0), its share and the entropy over rows i >= 1."""
    dtype = np.result_type(attn.dtype, np.float32)
    layers, heads = attn.shape[:2]
    rows = InputRows.empty(layers, heads, class_masks(cls_mask, sep_mask, punct), causal, dtype)
    rows.add_block(attn, 0)
    return rows.statistics()


def input_layer_statistics(attn: np.ndarray, encoded: Encoded, causal: bool = False) -> dict[str, np.ndarray]:
    """Every statistic of one input's maps [layers, heads, n, n] (weights, or norm rows) per layer: the mean over its
    heads of input_statistics, punctuation found in its tokens."""
    punct = punct_mask(encoded.tokens, encoded.special_mask)
    stats = input_statistics(attn, encoded.cls_mask, encoded.sep_mask, punct, causal)
    return {key: values.mean(axis=1) for key, values in stats.items()}


@dataclass
class SpecialTokenResult:
    """Corpus means of every statistic, per head ([layers, heads]); per layer is the mean over heads."""

    n_inputs: int
    heads: dict[str, np.ndarray]
    uniform_entropy: float
    all_punct: bool = False
    n_truncated: int = 0
    causal: bool = False  # a decoder's statistics (METHODS §18): `cls` is the first token's share over rows i >= 1

    @property
    def first_share(self) -> np.ndarray:
        """METHODS §18 per head: a decoder's first-token share; an encoder's CLS+SEP share, to stand beside it."""
        return self.heads["cls"] if self.causal else self.heads["cls"] + self.heads["sep"]

    @property
    def sink_rate(self) -> dict:
        """The share of sink heads (first_share > 0.3), overall and per layer."""
        return sink_rate(self.first_share)

    @property
    def layers(self) -> dict[str, np.ndarray]:
        """Each statistic per layer: the mean over that layer's heads."""
        return {key: v.mean(axis=1) for key, v in self.heads.items()}

    def layer_rows(self) -> list[dict[str, float]]:
        """One dict per layer with every statistic (0-based layer order)."""
        layers = self.layers
        return [{key: float(layers[key][l]) for key in STAT_KEYS} for l in range(len(layers["cls"]))]

    def to_json(self) -> dict:
        """The JSON object of the `special` command (0-based layers and heads)."""
        return {
            "n_inputs": self.n_inputs,
            "layers": self.layer_rows(),
            "heads": {key: self.heads[key] for key in STAT_KEYS},
            "uniform_entropy": self.uniform_entropy,
            "punctuation": "all" if self.all_punct else ". and ,",
            "n_truncated": self.n_truncated,
            "kind": "decoder" if self.causal else "encoder",
            "first_share": self.first_share,
            "sink_rate": self.sink_rate,
        }

    @classmethod
    def from_json(cls, result: dict) -> SpecialTokenResult:
        """Read back what to_json wrote (the `special` command's JSON); ResultFileError when malformed."""
        try:
            heads = {key: numeric_array(result["heads"][key], key, 2) for key in STAT_KEYS}
            if any(v.shape != heads["cls"].shape for v in heads.values()):
                raise ResultFileError("the per-head statistics have different shapes.")
            return cls(
                int(result["n_inputs"]),
                heads,
                float(result["uniform_entropy"]),
                result.get("punctuation") == "all",
                int(result.get("n_truncated", 0)),
                result.get("kind") == "decoder",
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ResultFileError):
                raise
            raise ResultFileError(f"the `special` result is incomplete or malformed ({exc!r}).") from exc


def _zeros(layers: int, heads: int) -> dict[str, np.ndarray]:
    return {key: np.zeros((layers, heads)) for key in STAT_KEYS}


@dataclass
class SpecialTokenStats:
    """Accumulator of METHODS §2-3 statistics: per-input values summed per head, with the counts to average them."""

    n_layers: int
    n_heads: int
    all_punct: bool = False
    causal: bool = False
    sums: dict[str, np.ndarray] = field(default_factory=dict)
    n_inputs: int = 0
    n_with_sep_rows: int = 0
    n_with_rest_rows: int = 0
    log_n_sum: float = 0.0
    n_truncated: int = 0
    captures: ClassVar[frozenset[Capture]] = ATTENTION  # what each input's run holds for it

    def __post_init__(self) -> None:
        if not self.sums:
            self.sums = _zeros(self.n_layers, self.n_heads)

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        """Add one input's statistics (its attention has no padding)."""
        punct = punct_mask(result.tokens, result.special_mask, self.all_punct)
        stats = input_statistics(result.attentions, result.cls_mask, result.sep_mask, punct, self.causal)
        self.add_statistics(stats, result)

    def row_consumer(self, encoded: Encoded, item: CorpusInput | None = None) -> SpecialRows:
        """A consumer of one input's attention in blocks of rows (METHODS §19) that adds it here when finished."""
        punct = punct_mask(encoded.tokens, encoded.special_mask, self.all_punct)
        classes = class_masks(encoded.cls_mask, encoded.sep_mask, punct)
        return SpecialRows(self, encoded, InputRows.empty(self.n_layers, self.n_heads, classes, self.causal))

    def add_statistics(self, stats: dict[str, np.ndarray], encoded: Encoded) -> None:
        """Add one input's input_statistics."""
        counted = {key: not np.isnan(value).all() for key, value in stats.items()}  # only the SEP row means can be NaN
        for key, value in stats.items():
            if counted[key]:
                self.sums[key] += value
        self.n_inputs += 1
        self.n_with_sep_rows += counted["sep_to_sep"]
        self.n_with_rest_rows += counted["rest_to_sep"]
        self.log_n_sum += uniform_entropy(encoded.n, self.causal)
        self.n_truncated += int(encoded.truncated)

    def merge(self, other: SpecialTokenStats) -> SpecialTokenStats:
        """The accumulator over both input sets; neither operand changes."""
        if (self.n_layers, self.n_heads, self.all_punct, self.causal) != (
            other.n_layers,
            other.n_heads,
            other.all_punct,
            other.causal,
        ):
            raise ValueError("Cannot merge statistics of different models or punctuation options.")
        return SpecialTokenStats(
            self.n_layers,
            self.n_heads,
            self.all_punct,
            self.causal,
            sums={key: self.sums[key] + other.sums[key] for key in STAT_KEYS},
            n_inputs=self.n_inputs + other.n_inputs,
            n_with_sep_rows=self.n_with_sep_rows + other.n_with_sep_rows,
            n_with_rest_rows=self.n_with_rest_rows + other.n_with_rest_rows,
            log_n_sum=self.log_n_sum + other.log_n_sum,
            n_truncated=self.n_truncated + other.n_truncated,
        )

    def result(self) -> SpecialTokenResult:
        """Unweighted means over inputs (sep_to_sep over inputs that have SEP rows)."""
        counts = {key: self.n_inputs for key in STAT_KEYS}
        counts["sep_to_sep"] = self.n_with_sep_rows
        counts["rest_to_sep"] = self.n_with_rest_rows
        heads = {
            key: self.sums[key] / counts[key] if counts[key] else np.full((self.n_layers, self.n_heads), np.nan)
            for key in STAT_KEYS
        }
        uniform = self.log_n_sum / self.n_inputs if self.n_inputs else float("nan")
        return SpecialTokenResult(self.n_inputs, heads, uniform, self.all_punct, self.n_truncated, self.causal)


@dataclass
class SpecialRows:
    """One input's block-wise consumer for SpecialTokenStats (blockwise.RowConsumer)."""

    stats: SpecialTokenStats
    encoded: Encoded
    rows: InputRows

    def block(self, block: Block) -> None:
        """Take a block of one layer's attention."""
        self.rows.add_block(block.probs[0].float().cpu().numpy(), block.first_row, block.layer, block.first_key)

    def finish(self) -> None:
        """Add the input, every block taken, to the accumulator."""
        self.stats.add_statistics(self.rows.statistics(), self.encoded)


def heads_above(values: np.ndarray, threshold: float = 0.5) -> list[tuple[int, int, float]]:
    """(layer, head, value) of every head whose value exceeds threshold, 0-based, largest first."""
    layers, heads = np.nonzero(values > threshold)
    found = [(int(l), int(h), float(values[l, h])) for l, h in zip(layers, heads)]
    return sorted(found, key=lambda x: -x[2])
