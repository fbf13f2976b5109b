"""Exact block-wise attention for long inputs (METHODS §19): each layer's attention computed by the library in blocks
of query rows, from the family's own projected, normed and rotated queries and keys, its masks (causal, padding,
local windows) and soft-cap, so that no more than heads x one block x n scores are held at a time.

Families whose attention modules call transformers' attention interface (`ALL_ATTENTION_FUNCTIONS`) run block-wise:
while `blockwise_attention` is active, their configs name this module's attention function, which hands each
block's probabilities to a consumer and accumulates the layer's output from them. The others (DeBERTa, MPNet,
RoFormer, which compute attention in their own code) run on the eager path (`supports_blockwise` says which).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .model import LoadedModel, parse_megabytes

NAME = "attnlib_blockwise"
MAX_RUN_MB_ENV = "ATTNLIB_MAX_RUN_MB"  # refuse (or run block-wise) runs whose estimated peak memory exceeds this
BLOCKWISE_FROM = 1024  # inputs longer than this run block-wise when every statistic asked can take blocks
BLOCK_BYTES = 64 * 2**20  # scores of one block: heads x rows x n floats within this
Consumer = Callable[[int, int, torch.Tensor], None]  # (layer, first row, probabilities [batch, heads, rows, n])


@dataclass
class _Active:
    """The block-wise run of one thread: its consumer, block height and the layer applications seen so far."""

    consumer: Consumer
    block_rows: int
    calls: int = 0


_ACTIVE = threading.local()


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """The attention function registered as NAME: eager attention's arithmetic, one block of query rows at a time.

    In a thread with no block-wise run (another visitor of a shared model), one block of every row, whose weights
    are returned as eager attention returns them."""
    active: _Active | None = getattr(_ACTIVE, "run", None)
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: query head h reads key/value head h // groups, as repeat_kv does
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    n_rows = query.shape[2]
    rows = n_rows if active is None else active.block_rows
    layer = -1
    if active is not None:
        layer, active.calls = active.calls, active.calls + 1
    out = query.new_empty(*query.shape[:3], value.shape[-1])
    kept = []
    for start in range(0, n_rows, rows):
        scores = torch.matmul(query[:, :, start : start + rows], key.transpose(2, 3)) * scaling
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if attention_mask is not None:
            mask = attention_mask[:, :, start : start + rows] if attention_mask.shape[2] > 1 else attention_mask
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            else:
                scores = scores + mask
        probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        del scores
        if active is not None:
            active.consumer(layer, start, probs)
        else:
            kept.append(probs)
        out[:, :, start : start + rows] = torch.matmul(probs, value)
    return out.transpose(1, 2).contiguous(), (torch.cat(kept, dim=2) if kept else None)


def _boolean_mask(*args, **kwargs):
    """transformers' boolean mask (True: attend), always made (never skipped as implied by is_causal)."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, _boolean_mask)


_register()


def supports_blockwise(encoder: torch.nn.Module) -> bool:
    """Whether the model's attention goes through transformers' attention interface (so it can run block-wise)."""
    modules = {sys.modules.get(type(m).__module__) for m in encoder.modules()}
    return any(m is not None and "ALL_ATTENTION_FUNCTIONS" in vars(m) for m in modules)


def _configs(encoder: torch.nn.Module) -> list:
    """Every distinct config the model's modules read their attention implementation from."""
    found = {
        id(m.config): m.config for m in encoder.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")
    }
    return list(found.values())


@contextlib.contextmanager
def blockwise_attention(encoder: torch.nn.Module, consumer: Consumer, block_rows: int) -> Iterator[_Active]:
    """Within the block, the model's attention runs block-wise in this thread, each block handed to consumer."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be at least 1, not {block_rows}.")
    configs = _configs(encoder)
    saved = [c._attn_implementation for c in configs]
    active = _Active(consumer, block_rows)
    _ACTIVE.run = active
    try:
        for c in configs:
            c._attn_implementation = NAME
        yield active
    finally:
        _ACTIVE.run = None
        for c, implementation in zip(configs, saved):
            c._attn_implementation = implementation


def default_block_rows(n: int, heads: int, budget: int = BLOCK_BYTES) -> int:
    """Rows per block so that one block's float32 scores (heads x rows x n) stay within budget bytes."""
    return max(1, min(n, budget // (4 * heads * max(n, 1))))


def run_blockwise(lm: LoadedModel, batch: dict, consumer: Consumer, block_rows: int | None = None) -> torch.Tensor:
    """One forward pass of a batch with block-wise attention; returns the last hidden state [batch, n, hidden].

    consumer(layer, first_row, probs) sees every layer application's probabilities [batch, heads, rows, n] once,
    in order of rows; it must copy what it keeps (the tensor is freed after the call)."""
    if not supports_blockwise(lm.encoder):
        raise BlockwiseUnsupportedError(
            f"{lm.facts.model_type} computes attention in its own code, not through transformers' attention "
            "interface: it runs on the eager path."
        )
    n = batch["input_ids"].shape[1]
    rows = default_block_rows(n, lm.facts.n_heads) if block_rows is None else block_rows
    with blockwise_attention(lm.encoder, consumer, rows) as active, torch.inference_mode():
        out = lm.encoder(**batch, output_attentions=False)
    if active.calls != lm.facts.n_layers:
        raise BlockwiseUnsupportedError(
            f"block-wise attention saw {active.calls} layer applications, not the model's {lm.facts.n_layers}."
        )
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    return hidden


class BlockwiseUnsupportedError(RuntimeError):
    """The model's family cannot run block-wise attention."""


def reduce_map(attn: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """METHODS §19's reduced map of [..., n, n] attention: cells of b x b tokens (b the smallest power of two with
    ceil(n / b) <= width), each the maximum of its weights; returns the [..., ceil(n / b), ceil(n / b)] map and b."""
    n = attn.shape[-1]
    b = 1
    while math.ceil(n / b) > width:
        b *= 2
    cells = math.ceil(n / b)
    padded = np.full((*attn.shape[:-2], cells * b, cells * b), -np.inf, dtype=attn.dtype)
    padded[..., :n, :n] = attn
    shaped = padded.reshape(*attn.shape[:-2], cells, b, cells, b)
    return shaped.max(axis=(-3, -1)), b


class MemoryLimitError(ValueError):
    """A run would need more memory than this server allows; the message says how much and what to do."""


@dataclass(frozen=True)
class RunSize:
    """What decides a forward pass's peak memory: batch, length, layers, heads, hidden width, bytes per value."""

    n: int
    layers: int
    heads: int
    hidden: int
    dtype_bytes: int = 4
    batch: int = 1


def estimate_peak_bytes(size: RunSize, block_rows: int | None = None) -> int:
    """An upper estimate of a forward pass's peak memory beyond the weights.

    Eager (block_rows None): every layer's [batch, heads, n, n] maps kept for output_attentions, a float32 copy
    when the runner stacks them and one more per input when it cuts them, and one layer's scores while softmax
    makes the next. Block-wise: three blocks of [batch, heads, rows, n] float32 scores, a boolean mask of
    [batch, n, n] per mask kind (full and local: two) and the per-row statistics. Both: hidden states of every
    layer and a layer's activations (16 values of hidden width per token)."""
    b, n, h = size.batch, size.n, size.heads
    activations = (size.layers + 16) * b * n * size.hidden * size.dtype_bytes
    if block_rows is None:
        maps = (
            b * h * n * n * (size.layers * (size.dtype_bytes + 4) + 2 * size.dtype_bytes) + size.layers * h * n * n * 4
        )
        return maps + b * n * n * size.dtype_bytes + activations
    rows = min(block_rows, n)
    return 3 * b * h * rows * n * 4 + 2 * b * n * n + size.layers * b * h * n * 8 * 4 + activations


def available_bytes(device: str = "cpu") -> int:
    """Memory a run may take now: the GPU's free memory, or the machine's available memory (Linux), else 0."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory_limit(max_megabytes: float | None = None, device: str = "cpu") -> int | None:
    """The byte limit of one run: max_megabytes, else ATTNLIB_MAX_RUN_MB, else the memory available now (None when
    unknown)."""
    limit = max_megabytes if max_megabytes is not None else parse_megabytes(os.environ.get(MAX_RUN_MB_ENV))
    if limit is not None:
        return int(limit * 2**20)
    free = available_bytes(device)
    return free or None


def check_memory(size: RunSize, limit: int | None, block_rows: int | None = None) -> None:
    """MemoryLimitError, in words, when the run's estimated peak exceeds limit bytes (None: no limit)."""
    need = estimate_peak_bytes(size, block_rows)
    if limit is None or need <= limit:
        return
    how = "block-wise" if block_rows is not None else "with every layer's full attention maps"
    raise MemoryLimitError(
        f"An input of {size.n:,} tokens run {how} needs about {need / 2**20:,.0f} MB ({size.layers} layers x "
        f"{size.heads} heads x {size.n:,}^2 attention weights); this server allows {limit / 2**20:,.0f} MB per run. "
        "Use a shorter text, or a statistic that runs block-wise."
    )


def run_size(lm: LoadedModel, n: int, batch: int = 1) -> RunSize:
    """The RunSize of a batch of inputs of n tokens on this model."""
    dtype_bytes = torch.finfo(getattr(torch, lm.facts.dtype, torch.float32)).bits // 8
    f = lm.facts
    return RunSize(n, f.n_layers, f.n_heads, f.hidden_size, dtype_bytes, batch)


def stack_blocks(blocks: Sequence[tuple[int, int, np.ndarray]], layers: int) -> np.ndarray:
    """[layers, heads, n, n] from (layer, first_row, [heads, rows, n]) blocks (tests and short inputs only)."""
    heads, _, n = blocks[0][2].shape
    out = np.zeros((layers, heads, n, n), np.float32)
    for layer, start, probs in blocks:
        out[layer, :, start : start + probs.shape[1]] = probs
    return out
