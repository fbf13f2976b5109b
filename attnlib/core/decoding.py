"""Greedy decoding of a decoder with its KV cache, handing over each step's query row of attention: the row r that
produced the step's token, every layer and head over every key so far (METHODS §20's retrieval test).

The prompt's prefill runs block-wise (METHODS §19) where the family allows, keeping only its last row, so a long
prompt never holds a layer's whole [heads, n, n] map; each later step is one row of the model's own eager attention
(the `attn` hook site)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import numpy as np
import torch

from attnlib.core.blockwise import (
    BLOCKWISE_FROM,
    Block,
    blockwise_attention,
    default_block_rows,
    supports_blockwise,
)
from attnlib.core.families import UnsupportedModelError
from attnlib.core.hooks import ATTENTION, Cache, hooks
from attnlib.core.memory import check_memory, memory_limit, run_size
from attnlib.core.model import LoadedModel

StepRows = Callable[[int, int, np.ndarray], None]  # (step t, y_t, rows [layers, heads, keys] of the row producing y_t)


def check_decoder(lm: LoadedModel, forced: bool) -> None:
    """UnsupportedModelError (in words) for an encoder, an encoder-decoder, or greedy decoding without a trained LM
    head (teacher forcing needs none: it reads no prediction)."""
    kind = lm.facts.kind
    if kind != "decoder":
        what = "an encoder: its attention is bidirectional" if kind == "encoder" else "an encoder-decoder"
        raise UnsupportedModelError(
            f"'{lm.facts.name}' is {what}, and decoding with a needle test needs a decoder (GPT-2, Llama, Qwen, ...)."
        )
    if lm.causal_lm is None and not forced:
        raise UnsupportedModelError(
            f"'{lm.facts.name}' has no trained LM head, so it cannot decode greedily; teacher forcing (forced) feeds "
            "the needle's own tokens instead."
        )


def _row_over(row: np.ndarray, keys: int) -> np.ndarray:
    """A row [heads, k] over the last k of `keys` keys (a sliding window's cache keeps only its last keys) as a row
    over all of them (the keys left out have weight 0)."""
    if row.shape[-1] == keys:
        return row
    full = np.zeros((*row.shape[:-1], keys), np.float32)
    full[..., keys - row.shape[-1] :] = row
    return full


def greedy_decode(
    lm: LoadedModel,
    input_ids: Sequence[int],
    steps: int,
    forced: Sequence[int] | None = None,
    on_rows: StepRows | None = None,
    block_rows: int | None = None,
    head: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> list[int]:
    """Decode up to `steps` tokens greedily after input_ids (stopping after the EOS token), or feed `forced` (teacher
    forcing: its tokens are the decoded ones); returns the decoded ids. With `on_rows`, each step's token and the
    attention row that produced it are handed over before the next step runs; without it nothing is captured.
    `head` maps the stack's last hidden state to next-token logits (greedy decoding needs it; the stack runs alone,
    so every family's attention passes its `attn` hook site)."""
    check_decoder(lm, forced is not None)
    if forced is None and head is None:
        raise ValueError("greedy decoding needs the model's LM head")
    steps = min(steps, len(forced)) if forced is not None else steps
    f, n, model = lm.facts, len(input_ids), lm.encoder
    eos = getattr(lm.tokenizer, "eos_token_id", None)
    ids = torch.tensor([list(input_ids)], device=lm.device)
    rows = np.zeros((f.n_layers, f.n_heads, n), np.float32)

    def take_last(block: Block) -> None:
        if block.first_row + block.rows == n:
            rows[block.layer] = 0
            last = block.probs[0, :, -1].float().cpu().numpy()
            rows[block.layer, :, block.first_key : block.first_key + last.shape[-1]] = last

    with torch.inference_mode():
        if on_rows is None:
            out = model(input_ids=ids, use_cache=True)
        elif supports_blockwise(lm.encoder):
            height = default_block_rows(n, f.n_heads) if block_rows is None else block_rows
            check_memory(run_size(lm, n, 1), memory_limit(device=lm.device), height)
            with blockwise_attention(lm.encoder, take_last, height, n > BLOCKWISE_FROM) as active:
                out = model(input_ids=ids, use_cache=True)
            if active.calls != f.n_layers:
                raise RuntimeError(f"block-wise attention saw {active.calls} layers, not the model's {f.n_layers}")
        else:
            with hooks(lm, ATTENTION) as cache:
                out = model(input_ids=ids, use_cache=True)
            rows = np.stack([a[0, :, -1].float().cpu().numpy() for a in cache.attn])
        decoded: list[int] = []
        for t in range(steps):
            if forced is not None:
                token = int(forced[t])
            else:
                assert head is not None
                token = int(head(out.last_hidden_state[0, -1]).argmax())
            decoded.append(token)
            if on_rows is not None:
                on_rows(t, token, rows)
            if t == steps - 1 or (forced is None and token == eos):
                break
            step_ids = torch.tensor([[token]], device=lm.device)
            captured: contextlib.AbstractContextManager[Cache | None] = (
                hooks(lm, ATTENTION) if on_rows is not None else contextlib.nullcontext()
            )
            with captured as step_cache:
                out = model(input_ids=step_ids, cache=out.cache, use_cache=True)
            if step_cache is not None:
                keys = n + t + 1
                rows = np.stack([_row_over(a[0, :, -1].float().cpu().numpy(), keys) for a in step_cache.attn])
    return decoded
