"""The reference way: forward-mode derivatives (torch.func.jvp) through the model's own layers (attnlib.core.replay),
for every layer's heads and outputs, or for one layer's attention block."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.func import jvp, vmap

from attnlib.core.replay import Recording, captured_contexts


def all_heads_function(rec: Recording, with_output: bool) -> Callable:
    """e0 -> (o(l) of every layer, e(l+1) of every layer), each [layers, 1, n, hidden], running the layers themselves.

    Without with_output the last layer runs only up to o and the layer outputs are an empty [0, 1, n, hidden]."""
    last = rec.n_layers - 1

    def heads_of_every_layer(e0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, outputs = e0, []
        with captured_contexts(rec.layout) as seen:
            for l in range(rec.n_layers if with_output else last):
                h = rec.replay(h, l, l + 1)
                outputs.append(h)
            if not with_output:
                rec.replay_block(last, h)
        heads = torch.stack([c for _, c in seen])
        return heads, torch.stack(outputs) if with_output else e0.new_zeros(0, *e0.shape)

    return heads_of_every_layer


def heads_from_layer_input(rec: Recording, index: int) -> Callable:
    """e(l-1) -> o(l) [1, n, hidden] through layer `index`'s attention block alone."""

    def heads(x: torch.Tensor) -> torch.Tensor:
        with captured_contexts(rec.layout, [index]) as seen:
            rec.replay_block(index, x)
        return seen[-1][1]

    return heads


def heads_from_input(rec: Recording, index: int) -> Callable:
    """e0 -> o(l) [1, n, hidden] of layer `index`, running the layers below it and its attention block."""

    through_block = heads_from_layer_input(rec, index)

    def heads(e0: torch.Tensor) -> torch.Tensor:
        return through_block(rec.replay(e0, 0, index))

    return heads


def block_heads_function(rec: Recording, index: int) -> Callable:
    """e(l-1) -> (o(l) [1, 1, n, hidden], nothing [0, 1, n, hidden]) through layer `index`'s attention block alone."""
    heads = heads_from_layer_input(rec, index)

    def heads_of_one_layer(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return heads(x)[None], x.new_zeros(0, *x.shape)

    return heads_of_one_layer


def plain_input_norms(
    fn: Callable, e0: torch.Tensor, n_heads: int, directions: Iterator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums over token i's directions v of ||d o(l,h)_j / d e0_i . v||^2 as [i, layers, j, heads], and of
    ||d e(l+1)_j / d e0_i . v||^2 as [i, layers, j] (zeros where fn gives no layer outputs), through the model."""
    _, n, hidden = e0.shape

    def squared_norms(tangent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        heads, outputs = jvp(fn, (e0,), (tangent,))[1]  # [layers, 1, n, hidden] each; outputs may be [0, 1, n, hidden]
        squared_heads = heads.reshape(heads.shape[0], n, n_heads, -1).square().sum(-1)
        squared_outputs = outputs[:, 0].square().sum(-1) if len(outputs) else torch.zeros_like(squared_heads[..., 0])
        return squared_heads, squared_outputs

    batched = vmap(squared_norms)
    totals: tuple[torch.Tensor, torch.Tensor] | None = None
    for tokens, vectors in directions:
        tangents = torch.zeros(len(tokens), 1, n, hidden, device=e0.device)
        tangents[torch.arange(len(tokens)), 0, tokens] = vectors
        sq = batched(tangents)
        if totals is None:
            totals = (
                torch.zeros((n, *sq[0].shape[1:]), device=e0.device),
                torch.zeros((n, *sq[1].shape[1:]), device=e0.device),
            )
        totals[0].index_add_(0, tokens, sq[0])
        totals[1].index_add_(0, tokens, sq[1])
    assert totals is not None  # every input has at least one direction
    return totals
