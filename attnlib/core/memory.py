"""The memory guard (METHODS §19): a forward pass's peak memory estimated from n, layers, heads and dtype before it
runs, and refused in words above the server's limit (ATTNLIB_MAX_RUN_MB, else the memory available now)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from attnlib.core.errors import InputError
from attnlib.core.model import LoadedModel, parse_megabytes

MAX_RUN_MB_ENV = "ATTNLIB_MAX_RUN_MB"  # refuse (or run block-wise) runs whose estimated peak memory exceeds this


class MemoryLimitError(InputError):
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
    makes the next; the hidden states of every layer and a layer's activations (16 values of hidden width per
    token). Block-wise: four blocks of [batch, heads, rows, n] float32 values (scores, probabilities and the
    statistics' two temporaries; masks are made a block at a time, booleans), the per-row statistics and one
    layer's activations (no layer's hidden states are kept). Measured (ModernBERT, 4 layers, 12 heads, hidden 384,
    n = 2,246, CPU): eager +2.9 GB of resident memory against 3.3 GB estimated; ModernBERT-base-sized (22 layers, 12
    heads, hidden 768), n = 8,192, block-wise: +540 MB over the warm process against 513 MB estimated (the rest:
    freed memory the C allocator keeps; benchmarks/README.md, bench_long)."""
    b, n, h = size.batch, size.n, size.heads
    layer = 16 * b * n * size.hidden * size.dtype_bytes
    if block_rows is None:
        maps = (
            b * h * n * n * (size.layers * (size.dtype_bytes + 4) + 2 * size.dtype_bytes) + size.layers * h * n * n * 4
        )
        return maps + b * n * n * size.dtype_bytes + size.layers * b * n * size.hidden * size.dtype_bytes + layer
    rows = min(block_rows, n)
    return 4 * b * h * rows * n * 4 + size.layers * b * h * n * 8 * 4 + layer


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
    limit = (
        max_megabytes
        if max_megabytes is not None
        else parse_megabytes(os.environ.get(MAX_RUN_MB_ENV), "run memory limit")
    )
    if limit is not None:
        return int(limit * 2**20)
    free = available_bytes(device)
    return free or None


def bytes_text(size: float) -> str:
    """'8,192 MB', or for less than 10 MB two significant digits ('0.37 MB')."""
    mb = size / 2**20
    return f"{mb:,.0f} MB" if mb >= 10 else f"{mb:.2g} MB"


SHORTER_OR_BLOCKWISE = "Use a shorter text, or a statistic that runs block-wise."


def check_memory(
    size: RunSize, limit: int | None, block_rows: int | None = None, advice: str = SHORTER_OR_BLOCKWISE
) -> None:
    """MemoryLimitError, in words ending in `advice` (what makes the run fit), when the run's estimated peak exceeds
    limit bytes (None: no limit)."""
    need = estimate_peak_bytes(size, block_rows)
    if limit is None or need <= limit:
        return
    how = "block-wise" if block_rows is not None else "with every layer's full attention maps"
    raise MemoryLimitError(
        f"An input of {size.n:,} tokens run {how} needs about {bytes_text(need)} ({size.layers} layers x "
        f"{size.heads} heads x {size.n:,}^2 attention weights); this server allows {bytes_text(limit)} per run. "
        + advice
    )


def run_size(lm: LoadedModel, n: int, batch: int = 1) -> RunSize:
    """The RunSize of a batch of inputs of n tokens on this model."""
    dtype_bytes = torch.finfo(getattr(torch, lm.facts.dtype, torch.float32)).bits // 8
    f = lm.facts
    return RunSize(n, f.n_layers, f.n_heads, f.hidden_size, dtype_bytes, batch)
