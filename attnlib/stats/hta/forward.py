"""Forward mode written out: the directions' tangents through the linearised layers (attnlib.stats.hta.attention and
.position_wise), and the check, on two random directions, that they give what the model's own layers give."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch

from attnlib.core.replay import Recording
from attnlib.stats.hta.attention import LayerAtInput, dense_tangent_heads, row_tangent_heads
from attnlib.stats.hta.common import DEFAULT_SEED
from attnlib.stats.hta.position_wise import PositionWise
from attnlib.stats.hta.through_model import block_heads_function, plain_input_norms


def linearised_input_norms(
    layers: Sequence[LayerAtInput], rest: Sequence[PositionWise], directions: Iterator, with_output: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same sums as plain_input_norms, with each layer's position-wise part applied as per-token matrices
    (without with_output the last layer stops at its heads and the layer-output sums stay zero)."""
    n_heads, n, d = layers[0].q.shape
    total = torch.zeros(n, len(layers), n, n_heads, device=layers[0].q.device)
    output_total = torch.zeros(n, len(layers), n, device=layers[0].q.device)
    for tokens, vectors in directions:
        c = len(tokens)
        inputs = None  # tangent of the layer input [n, c, hidden]; None while it is one row (the first layer)
        for l, layer in enumerate(layers):
            heads = row_tangent_heads(layer, tokens, vectors) if inputs is None else dense_tangent_heads(layer, inputs)
            total[:, l].index_add_(0, tokens, heads.square().sum(-1).transpose(0, 1))
            if l + 1 == len(layers) and not with_output:
                break
            if inputs is None:
                inputs = vectors.new_zeros(n, c, vectors.shape[-1])
                inputs[tokens, torch.arange(c, device=tokens.device)] = vectors
            inputs = rest[l].tangent(heads.reshape(n, c, n_heads * d), inputs)  # of the layer output e(l+1)
            if with_output:
                output_total[:, l].index_add_(0, tokens, inputs.square().sum(-1).transpose(0, 1))
    return total, output_total


def previous_norms(layers: Sequence[LayerAtInput], directions: Iterator) -> torch.Tensor:
    """Sum over token i's directions v of ||d o(l,h)_j / d e(l-1)_i . v||^2 (the layer alone), as [i, l, j, h]."""
    n_heads, n, _ = layers[0].q.shape
    total = torch.zeros(n, len(layers), n, n_heads, device=layers[0].q.device)
    for tokens, vectors in directions:
        for l, layer in enumerate(layers):
            heads = row_tangent_heads(layer, tokens, vectors)
            total[:, l].index_add_(0, tokens, heads.square().sum(-1).transpose(0, 1))
    return total


def agrees_with_model(
    fn: Callable,
    e0: torch.Tensor,
    layers: Sequence[LayerAtInput],
    rest: Sequence[PositionWise],
    n_heads: int,
    with_output: bool,
) -> bool:
    """Whether the linearised layers give what the model's own layers give, on two random directions."""
    _, n, hidden = e0.shape
    generator = torch.Generator().manual_seed(DEFAULT_SEED)
    sample = [(torch.tensor([0, n - 1], device=e0.device), torch.randn(2, hidden, generator=generator).to(e0.device))]
    plain = plain_input_norms(fn, e0, n_heads, iter(sample))
    linearised = linearised_input_norms(layers, rest, iter(sample), with_output)
    return all(
        bool(torch.allclose(lin, ref, rtol=1e-3, atol=1e-5 * float(ref.abs().max())))
        for lin, ref in zip(linearised, plain)
    )


def previous_agrees_with_model(rec: Recording, layers: Sequence[LayerAtInput], n_heads: int) -> bool:
    """Whether each written-out layer gives what jvp through its own attention block gives, on two random
    directions (the previous-layer contribution reads the written-out layers alone)."""
    n, hidden = layers[0].q.shape[1], rec.layers[0].hidden.shape[-1]
    device = layers[0].q.device
    generator = torch.Generator().manual_seed(DEFAULT_SEED)
    sample = [(torch.tensor([0, n - 1], device=device), torch.randn(2, hidden, generator=generator).to(device))]
    for l, layer in enumerate(layers):
        written = previous_norms([layer], iter(sample))
        plain = plain_input_norms(block_heads_function(rec, l), rec.layers[l].hidden, n_heads, iter(sample))[0]
        if not torch.allclose(written, plain, rtol=1e-3, atol=1e-5 * float(plain.abs().max())):
            return False
    return True
