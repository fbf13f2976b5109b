"""Exact block-wise attention for long inputs (METHODS §19): each layer's attention computed by the library in blocks
of query rows, from the family's own projected, normed and rotated queries and keys, its masks (causal, padding,
local windows) and soft-cap, so that no more than heads x one block x n scores are held at a time. A block's scores
cover only the keys its rows attend (from the first to the last the mask lets through): a local window's band, a causal
block's past; every other weight is exactly 0.

Families whose attention modules call transformers' attention interface (`ALL_ATTENTION_FUNCTIONS`) run block-wise:
while `blockwise_attention` is active, their configs name this module's attention function, which hands each
block's probabilities to a consumer and accumulates the layer's output from them. The others (DeBERTa, MPNet,
RoFormer, which compute attention in their own code) run on the eager path (`supports_blockwise` says which).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import platform
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from attnlib.core.hooks import hooks, switched_attention
from attnlib.core.memory import check_memory, memory_limit, run_size
from attnlib.core.model import LoadedModel
from attnlib.core.runner import Encoded, model_inputs

NAME = "attnlib_blockwise"
BLOCKWISE_FROM = 1024  # inputs longer than this run block-wise when every statistic asked can take blocks
BLOCK_BYTES = 16 * 2**20  # scores of one block: heads x rows x n floats within this (the run holds a few blocks)
MASK_STEP = 2**20  # query rows x keys the mask function is evaluated on at a time (its int64 temporaries: 8 MB)


@dataclass
class Block:
    """One block of a layer's attention weights: query rows first_row.. over keys first_key..; every other key of
    these rows is masked (weight exactly 0), so only a local window's band or a causal block's keys are computed."""

    layer: int
    first_row: int
    first_key: int
    probs: torch.Tensor  # [batch, heads, rows, keys]
    n: int  # the keys of the whole input

    @property
    def rows(self) -> int:
        """The block's query rows."""
        return self.probs.shape[2]

    def dense(self, out: np.ndarray | None = None) -> np.ndarray:
        """The weights over every key, float32 [batch, heads, rows, n] (into `out`, a buffer of at least that size)."""
        shape = (*self.probs.shape[:3], self.n)
        dense = np.empty(shape, np.float32) if out is None else out.reshape(-1)[: math.prod(shape)].reshape(shape)
        keys = slice(self.first_key, self.first_key + self.probs.shape[3])
        dense[..., : keys.start] = 0
        dense[..., keys.stop :] = 0
        dense[..., keys] = self.probs.float().cpu().numpy()
        return dense


Consumer = Callable[[Block], None]


@dataclass
class _Active:
    """The block-wise run of one thread: its consumer, block height and the layer applications seen so far."""

    consumer: Consumer
    block_rows: int
    calls: int = 0


_ACTIVE = threading.local()


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, position_bias=None,
               **kwargs):  # fmt: skip
    """The attention function registered as NAME: eager attention's arithmetic, one block of query rows at a time
    (T5's relative `position_bias` added to the scores before the mask, as its eager attention adds it).

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
    n_keys = key.shape[2]
    kept = []
    # a block-wise run writes every block's scores and probabilities into the same two buffers: freed and made again
    # per block, the allocator keeps tens of MB of their pieces at 8,192 tokens
    buffers = None if active is None else _BlockBuffers(query, key, rows)
    for start in range(0, n_rows, rows):
        # in place where eager attention makes a new tensor (the same values): one block of scores held, not two
        block_query = query[:, :, start : start + rows]
        mask = _block_mask(attention_mask, start, start + rows)
        keys = _keys_attended(mask, n_keys) if active is not None else slice(0, n_keys)
        if mask is not None:
            mask = mask[..., keys]
        block_key = key[:, :, keys]
        scores = torch.matmul(block_query, block_key.transpose(2, 3), **_into(buffers, "scores", block_query, keys))
        scores = scores.mul_(scaling)
        if softcap is not None:
            scores = scores.div_(softcap).tanh_().mul_(softcap)
        if position_bias is not None:
            rows_bias = position_bias[:, :, start : start + rows] if position_bias.shape[2] > 1 else position_bias
            scores = scores.add_(rows_bias[..., keys])
        if mask is not None:
            if mask.dtype == torch.bool:
                scores = scores.masked_fill_(~mask, torch.finfo(scores.dtype).min)
            else:
                scores = scores.add_(mask)
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32, **_into(buffers, "probs", block_query, keys)).to(
            query.dtype
        )
        del scores
        if active is not None:
            active.consumer(Block(layer, start, keys.start, probs, n_keys))
        else:
            kept.append(probs)
        out[:, :, start : start + rows] = torch.matmul(probs, value[:, :, keys])
    return out.transpose(1, 2).contiguous(), (torch.cat(kept, dim=2) if kept else None)


class _BlockBuffers:
    """The scores and probabilities of the largest block of one layer's call, reused by every block."""

    def __init__(self, query: torch.Tensor, key: torch.Tensor, rows: int) -> None:
        size = query.shape[0] * query.shape[1] * min(rows, query.shape[2]) * key.shape[2]
        self.scores = query.new_empty(size)
        self.probs = torch.empty(size, dtype=torch.float32, device=query.device)

    def view(self, name: str, block_query: torch.Tensor, keys: slice) -> torch.Tensor:
        """The named buffer's first elements as a contiguous [batch, heads, rows, keys] tensor."""
        shape = (*block_query.shape[:3], keys.stop - keys.start)
        return getattr(self, name)[: math.prod(shape)].view(shape)


def _into(buffers: _BlockBuffers | None, name: str, block_query: torch.Tensor, keys: slice) -> dict:
    """The out= argument that writes a block into its buffer (none outside a block-wise run)."""
    return {} if buffers is None else {"out": buffers.view(name, block_query, keys)}


def _block_mask(attention_mask, start: int, stop: int) -> torch.Tensor | None:
    """The mask of query rows start..stop-1 ([batch, 1, rows or 1, keys]), or None."""
    if attention_mask is None:
        return None
    if isinstance(attention_mask, _RowMask):
        return attention_mask.rows(start, stop)
    return attention_mask[:, :, start:stop] if attention_mask.shape[2] > 1 else attention_mask


def _keys_attended(mask: torch.Tensor | None, n_keys: int) -> slice:
    """The keys from the first to the last that some row of a boolean block mask attends: outside them every weight
    is exactly 0 (exp of the dtype's minimum less the row's maximum). All keys when a row attends none, since
    softmax then spreads it over every key, or when the mask is additive."""
    if mask is None or mask.dtype != torch.bool or not mask.any(dim=-1).all():
        return slice(0, n_keys)
    attended = torch.nonzero(mask.reshape(-1, mask.shape[-1]).any(dim=0))
    return slice(int(attended[0]), int(attended[-1]) + 1)


class _RowMask:
    """transformers' boolean mask (True: attend) of a block-wise run, made a block of query rows at a time from the
    mask function and padding that the model's mask factory passed, never as a whole [batch, 1, n, n] tensor (at
    8,192 tokens a sliding window's whole mask takes 1 GB of int64 distances to make). Every layer of a kind reads
    the same mask: it is made once and kept packed, 8 keys a byte (8 MB at 8,192 tokens).

    Model code that uses the mask other than through `_attention` gets the whole mask (`__torch_function__` and
    attribute look-ups materialise it), so it stays correct, only not lean."""

    def __init__(self, kwargs: dict) -> None:
        self.kwargs = kwargs
        self.shape = torch.Size((kwargs["batch_size"], 1, kwargs["q_length"], kwargs["kv_length"]))
        self.dtype, self.device = torch.bool, torch.device(kwargs.get("device", "cpu"))
        self.bits: np.ndarray | None = None  # [batch, 1, q_length, ceil(kv_length / 8)], made on first use

    def _made(self, start: int, stop: int) -> np.ndarray:
        """transformers' mask of query rows start..stop-1, packed."""
        from transformers.masking_utils import sdpa_mask

        q_offset = self.kwargs.get("q_offset", 0) + start
        mask = sdpa_mask(**{**self.kwargs, "q_length": stop - start, "q_offset": q_offset})
        return np.packbits(mask.cpu().numpy(), axis=-1)

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """The mask of query rows start..stop-1, [batch, 1, rows, kv_length]."""
        q, kv = self.shape[2], self.shape[3]
        if self.bits is None:
            step = max(1, MASK_STEP // max(kv, 1))
            self.bits = np.concatenate([self._made(s, min(s + step, q)) for s in range(0, q, step)], axis=2)
        rows = np.unpackbits(self.bits[:, :, start:stop], axis=-1, count=kv).view(bool)
        return torch.from_numpy(rows).to(self.device)

    def whole(self) -> torch.Tensor:
        """The whole mask, as transformers makes it."""
        return self.rows(0, self.shape[2])

    def __getattr__(self, name: str):
        if name in ("kwargs", "shape", "bits"):  # not set yet (copy, pickle): no recursion through whole()
            raise AttributeError(name)
        return getattr(self.whole(), name)

    def __getitem__(self, index):
        return self.whole()[index]

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def whole(x):
            return x.whole() if isinstance(x, _RowMask) else x

        return func(*map(whole, args), **{k: whole(v) for k, v in (kwargs or {}).items()})


def _mask(*args, **kwargs):
    """The mask function registered as NAME: in a block-wise run, transformers' boolean mask (True: attend), always
    made (never left to is_causal), as a `_RowMask` (None where transformers would skip it: no padding, no window);
    in any other thread, eager attention's float mask, so a forward pass that runs while another thread's block-wise
    run has switched the config gets the masks eager attention expects."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    if getattr(_ACTIVE, "run", None) is None:
        return eager_mask(*args, **kwargs)
    kwargs["allow_is_causal_skip"] = False
    if args or sdpa_mask(**{**kwargs, "q_length": 0}) is None:  # no query rows: only the skip decision is made
        return sdpa_mask(*args, **kwargs)
    return _RowMask({**kwargs, "allow_is_bidirectional_skip": False})


@functools.cache
def _register() -> None:
    """Register the attention and mask functions with transformers, once (on first use: importing attnlib does not
    import transformers)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, _attention)
    AttentionMaskInterface.register(NAME, _mask)


def supports_blockwise(encoder: torch.nn.Module) -> bool:
    """Whether the model's attention goes through transformers' attention interface (so it can run block-wise)."""
    modules = {sys.modules.get(type(m).__module__) for m in encoder.modules()}
    return any(m is not None and "ALL_ATTENTION_FUNCTIONS" in vars(m) for m in modules)


_RUNS_LOCK = threading.Lock()
_RUNS = [0]  # block-wise runs of long inputs under way in this process

# glibc maps allocations above a threshold that grows to 32 MB with what is freed; below it, a run's activations
# (25-75 MB each at 8,192 tokens, made and freed per layer) leave pieces that the allocator keeps: ~125 MB more at the
# peak of a 3-layer ModernBERT-base-sized pass than the memory in use. While block-wise runs are under way, arrays of
# MAPPED_FROM bytes and more are mapped and given back when freed (measured: ~5% more time), then the threshold is
# left at glibc's ceiling. Inputs of BLOCKWISE_FROM tokens or fewer leave it: their peak is the model's loading, and
# mapping costs them time (0.5 s of 2 at 512 tokens of a ModernBERT-base-sized model).
MAPPED_FROM = 2**20
_GLIBC_CEILING = 32 * 2**20
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (glibc's malloc.h)


@functools.cache
def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's mallopt, or None on another C library."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


def _map_large_arrays(runs: int) -> None:
    """Set the allocator's mapping threshold for this many block-wise runs under way (called under _RUNS_LOCK)."""
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MAPPED_FROM if runs else _GLIBC_CEILING)


@contextlib.contextmanager
def blockwise_attention(
    encoder: torch.nn.Module, consumer: Consumer, block_rows: int, long_input: bool = True
) -> Iterator[_Active]:
    """Within the block, the model's attention runs block-wise in this thread, each block handed to consumer (while a
    long input's run is under way, large arrays are mapped: MAPPED_FROM).

    The model's attention kernel is switched to NAME through attnlib.core.hooks (until the last block-wise run on its
    configs ends: threads of the app share a model); other threads' forward passes meanwhile compute eager attention
    in `_attention`."""
    if block_rows < 1:
        raise ValueError(f"block_rows must be at least 1, not {block_rows}.")
    _register()
    with switched_attention(encoder, NAME):
        with _RUNS_LOCK:
            _RUNS[0] += long_input
            if long_input and _RUNS[0] == 1:
                _map_large_arrays(1)
        active = _Active(consumer, block_rows)
        _ACTIVE.run = active
        try:
            yield active
        finally:
            _ACTIVE.run = None
            with _RUNS_LOCK:
                _RUNS[0] -= long_input
                if long_input and _RUNS[0] == 0:
                    _map_large_arrays(0)


def default_block_rows(n: int, heads: int, budget: int = BLOCK_BYTES) -> int:
    """Rows per block so that one block's float32 scores (heads x rows x n) stay within budget bytes."""
    return max(1, min(n, budget // (4 * heads * max(n, 1))))


def run_blockwise(
    lm: LoadedModel, batch: dict, consumer: Consumer, block_rows: int | None = None, hidden_state: int | None = None
) -> torch.Tensor:
    """One forward pass of a batch with block-wise attention; returns the last hidden state [batch, n, hidden], or
    with `hidden_state` the model's `hidden_states[hidden_state]` (0: the embedding output; the last: after the final
    norm where the model applies one), the only one transformers then keeps.

    consumer(block) sees every layer application's blocks of probabilities once, in order of rows; it must copy what
    it keeps (the block's memory holds the next block after the call)."""
    if not supports_blockwise(lm.encoder):
        raise BlockwiseUnsupportedError(
            f"{lm.facts.model_type} computes attention in its own code, not through transformers' attention "
            "interface: it runs on the eager path."
        )
    b, n = batch["input_ids"].shape
    rows = default_block_rows(n, lm.facts.n_heads) if block_rows is None else block_rows
    check_memory(run_size(lm, n, b), memory_limit(device=lm.device), rows)
    with blockwise_attention(lm.encoder, consumer, rows, n > BLOCKWISE_FROM) as active, torch.inference_mode():
        kept = {} if hidden_state is None else {"output_hidden_states": [hidden_state]}
        out = lm.encoder(**batch, output_attentions=False, **kept)
    if active.calls != lm.facts.n_layers:
        raise BlockwiseUnsupportedError(
            f"block-wise attention saw {active.calls} layer applications, not the model's {lm.facts.n_layers}."
        )
    if hidden_state is not None:
        return out.hidden_states[hidden_state]
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


class BlockwiseUnsupportedError(RuntimeError):
    """The model's family cannot run block-wise attention."""


def cell_size(n: int, width: int) -> int:
    """METHODS §19: the smallest power of two b with ceil(n / b) <= width."""
    b = 1
    while math.ceil(n / b) > width:
        b *= 2
    return b


def _max_pool(x: np.ndarray, b: int) -> np.ndarray:
    """[..., rows, cols] pooled into b x b cells (the last ones cut short), each the maximum of its values."""
    rows, cols = math.ceil(x.shape[-2] / b), math.ceil(x.shape[-1] / b)
    padded = np.full((*x.shape[:-2], rows * b, cols * b), -np.inf, dtype=x.dtype)
    padded[..., : x.shape[-2], : x.shape[-1]] = x
    return padded.reshape(*x.shape[:-2], rows, b, cols, b).max(axis=(-3, -1))


def reduce_map(attn: np.ndarray, width: int) -> tuple[np.ndarray, int]:
    """METHODS §19's reduced map of [..., n, n] attention: cells of b x b tokens (b = cell_size(n, width)), each the
    maximum of its weights, so a single strong link is never averaged away; returns the pooled map and b."""
    b = cell_size(attn.shape[-1], width)
    return _max_pool(attn, b), b


def reduced_maps(
    lm: LoadedModel, encoded: Encoded, width: int, block_rows: int | None = None
) -> tuple[np.ndarray, int]:
    """reduce_map of one input's every layer and head, [layers, heads, cells, cells], computed block-wise (never the
    whole [heads, n, n] map of a layer); and b. The blocks are whole cells high: block_rows rounded down to b's
    multiple (at least b)."""
    n, f = encoded.n, lm.facts
    b = cell_size(n, width)
    out = np.zeros((f.n_layers, f.n_heads, math.ceil(n / b), math.ceil(n / b)), np.float32)
    rows = default_block_rows(n, f.n_heads) if block_rows is None else block_rows
    rows = max(b, rows // b * b)

    def take(block: Block) -> None:
        pooled = _max_pool(block.dense()[0], b)
        out[block.layer, :, block.first_row // b : block.first_row // b + pooled.shape[1]] = pooled

    run_blockwise(lm, model_inputs(lm, [encoded]), take, rows)
    return out, b


class RowConsumer(Protocol):
    """One input's statistic taken block by block of query rows, then finished (added to its accumulator)."""

    def block(self, block: Block) -> None:
        """Take one block of one layer's attention (copy what is kept: its memory holds the next block)."""

    def finish(self) -> None:
        """Every block taken: add the input."""


def run_rows(
    lm: LoadedModel, encoded: Encoded, consumers: Sequence[RowConsumer], block_rows: int | None = None
) -> None:
    """Run one input block-wise, handing each block of each layer to every consumer, then finish them."""

    def take(block: Block) -> None:
        for consumer in consumers:
            consumer.block(block)

    run_blockwise(lm, model_inputs(lm, [encoded]), take, block_rows)
    for consumer in consumers:
        consumer.finish()


class _LayerDone(Exception):
    """window_heads has its layer's rows, queries and keys: the pass stops there."""


@dataclass
class WindowHeads:
    """One layer's queries and keys of every head over a whole input, and the model's own weights of a window's query
    rows, from one block-wise pass (METHODS §19): what the neuron view of a window of a long input draws."""

    layer: int  # 0-based
    start: int  # the window's first query row, 0-based
    end: int  # past its last
    queries: np.ndarray  # [heads, n, d] as q.k sees them (rotary applied), float32
    keys: np.ndarray  # [heads, n, d]
    scale: float  # the factor of q.k in the logits
    rows: np.ndarray  # [heads, end - start, n] the model's attention weights of the window's rows, float32
    cap: float | None = None  # c of soft-capped logits c tanh(s / c) (Gemma 2), or None


def window_heads(
    lm: LoadedModel, encoded: Encoded, layer: int, start: int, end: int, block_rows: int | None = None
) -> WindowHeads:
    """The queries and keys of one layer (0-based) from the model's own pass over the whole input, run block-wise (so
    positions, local windows and masks are the model's) up to that layer, and the weights of query rows start:end
    (0-based, half-open); only that layer's projections are kept, and never more than one block of scores. ValueError
    for a family whose logits add relative terms to q.k (held as [n, n]) or whose queries and keys attnlib cannot
    take."""
    n, f = encoded.n, lm.facts
    if not 0 <= layer < f.n_layers or not 0 <= start < end <= n:
        raise ValueError(
            f"layer {layer} and rows {start}:{end} must lie in the model's {f.n_layers} layers and {n} rows"
        )
    rows = np.zeros((f.n_heads, end - start, n), np.float32)

    def take(block: Block) -> None:
        first_row = block.first_row
        lo, hi = max(start, first_row), min(end, first_row + block.rows)
        if block.layer == layer and lo < hi:
            rows[:, lo - start : hi - start] = block.dense()[0, :, lo - first_row : hi - first_row]
        if block.layer == layer and first_row + block.rows >= n:
            raise _LayerDone  # q and k were captured before its attention: the later layers are not needed

    with hooks(lm, {"qk"}, layers=[layer]) as cache:
        if "qk" not in cache.captured:
            raise ValueError(f"{f.model_type}: attnlib does not take this family's queries and keys")
        with contextlib.suppress(_LayerDone):
            run_blockwise(lm, model_inputs(lm, [encoded]), take, block_rows)
    heads = cache.heads()
    if heads.biases[0] is not None:
        raise ValueError(f"{f.model_type}: its logits add relative terms to q.k, which a long input makes too large")
    q, k = (t[0].float().cpu().numpy() for t in (heads.queries[0], heads.keys[0]))
    return WindowHeads(layer, start, end, q, k, heads.scales[0], rows, heads.caps[0])
