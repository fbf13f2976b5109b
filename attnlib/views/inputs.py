"""What the notebook views take: one of our RunResults, or plain arrays as bertviz takes them, from any model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..runner import RunResult


def as_numpy(x: Any) -> np.ndarray:
    """A numpy array of x (a torch tensor on any device and in any dtype, or anything np.asarray takes), float32."""
    if hasattr(x, "detach"):  # a torch tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def per_layer(values: Any, name: str, last: str) -> np.ndarray:
    """[layers, heads, n, last] (last: n for attention, d for queries and keys) from an array of that shape, one with
    a batch of one after the layers, or a list or tuple of per-layer arrays or tensors [(1,) heads, n, last] (what HF
    models return with output_attentions=True)."""
    if isinstance(values, list | tuple):
        if not values:
            raise ValueError(f"{name}: no layers.")
        array = np.stack([as_numpy(v) for v in values])
    else:
        array = as_numpy(values)
    if array.ndim == 5:
        if array.shape[1] != 1:
            raise ValueError(
                f"{name}: a batch of {array.shape[1]} inputs; a view shows one (e.g. [a[i : i + 1] for a in {name}])."
            )
        array = array[:, 0]
    if array.ndim != 4:
        raise ValueError(
            f"{name}: expected [layers][heads][n][{last}] (per layer [heads][n][{last}]), got {array.shape}"
        )
    return array


def attention_of(attention: RunResult | Any) -> np.ndarray:
    """Attention maps [layers, heads, n, n] of a RunResult or of arrays (see per_layer)."""
    maps = attention.attentions if isinstance(attention, RunResult) else per_layer(attention, "attention", "n")
    if maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f"attention: maps must be square [n][n], got {maps.shape[-2]} x {maps.shape[-1]}")
    return maps


def tokens_of(attention: RunResult | Any, tokens: Sequence[str] | None, n: int) -> list[str]:
    """The n token labels: those given, else the RunResult's."""
    if tokens is None:
        if not isinstance(attention, RunResult):
            raise ValueError("tokens: give the tokens of the input (arrays carry none).")
        tokens = attention.tokens
    labels = [str(t) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"tokens: {len(labels)} tokens for attention over {n} positions.")
    return labels


def segments_of(attention: RunResult | Any, sentence_b_start: int | None, n: int) -> list[int] | None:
    """Segment of each position (0 = sentence A, 1 = B): from sentence_b_start (bertviz's argument, the position of
    B's first token), else the RunResult's for a pair, else None (a single sentence)."""
    if sentence_b_start is not None:
        if not 0 < sentence_b_start < n:
            raise ValueError(f"sentence_b_start: {sentence_b_start} is not a position between 1 and {n - 1}.")
        return [0] * sentence_b_start + [1] * (n - sentence_b_start)
    if isinstance(attention, RunResult) and int(np.max(attention.segments, initial=0)) == 1:
        return [int(s) for s in attention.segments]
    return None


def check_index(value: int, size: int, name: str) -> int:
    """A 0-based index checked against its range."""
    if not 0 <= value < size:
        raise ValueError(f"{name} {value} is out of range: 0 to {size - 1} (0-based).")
    return int(value)
