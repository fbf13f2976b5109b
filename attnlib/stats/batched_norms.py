"""Every §11-13 map of a padded batch at once, one layer at a time: the corpus engine's fast path.

`norms.py` keeps the per-input functions of numpy arrays that define each map; the tests hold this batch path to
them. Padding never enters a real row: a padded key has attention 0 and no residual weight, so real rows of every
map (and of their rollouts) only mix real keys, and each input's maps are its top-left [n, n] corner.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch


@dataclass
class NormWeights:
    """Per layer, the weights that turn head values into the attention block's output (METHODS §11-12), float32."""

    out_weight: np.ndarray  # [layers, heads, head_dim, hidden]: W_O^h, the rows of W_O that multiply head h
    out_bias: np.ndarray  # [layers, hidden]: b_O
    gamma: np.ndarray  # [layers, hidden]: the first LayerNorm's weight
    beta: np.ndarray  # [layers, hidden]
    eps: np.ndarray  # [layers]
    post_layer_norm: bool = True  # False (pre-LN, ModernBERT): no LayerNorm follows; gamma 1, beta 0, s_i = 1
    # True (Gemma 2 and 3, pre-LN): an RMSNorm scales the attention output before the residual; gamma and eps are its
    # own, and s_i is its divisor r_i = sqrt(mean(o_i^2) + eps) of the attention output o_i (METHODS §12)
    attention_norm: bool = False

    @cached_property
    def out_gram(self) -> np.ndarray:
        """W_O^h (W_O^h)^T [layers, heads, head_dim, head_dim]: ||v W_O^h||^2 = v W_O^h (W_O^h)^T v^T."""
        return np.matmul(self.out_weight, self.out_weight.transpose(0, 1, 3, 2))


@dataclass
class ValueNormMaps:
    """The §11 maps of one input (0-based layers and heads; not row-normalised): all that an encoder-decoder's
    cross-attention has (its keys are the source's tokens, its rows the target's: METHODS §18)."""

    tokens: list[str]  # the queries' (rows')
    value_norm: np.ndarray  # [layers, heads, key]
    weighted_norm: np.ndarray  # [layers, heads, query, key]
    layer_norm: np.ndarray  # [layers, query, key]


@dataclass
class NormMaps(ValueNormMaps):
    """Every §11-13 map of one input (0-based layers and heads; layer-level maps are not row-normalised)."""

    residual_ln: np.ndarray  # [layers, query, key]
    attention_rollout: np.ndarray  # [layers, query, key], rows sum to 1
    residual_ln_rollout: np.ndarray  # [layers, query, key], rows sum to 1

    def measures(self, attentions: np.ndarray) -> dict[str, np.ndarray]:
        """The maps compared with layer-output attribution (§13), each [layers, n, n]: MEASURES in order."""
        return {
            "attention": attentions.mean(1),
            "layer_norm": row_normalised(self.layer_norm),
            "residual_ln": row_normalised(self.residual_ln),
            "attention_rollout": self.attention_rollout,
            "residual_ln_rollout": self.residual_ln_rollout,
        }


def row_normalised(maps: np.ndarray) -> np.ndarray:
    """M[i, j] / sum_t M[i, t] for non-negative maps [..., n, n] (an all-zero row stays zero)."""
    sums = maps.sum(-1, keepdims=True)
    return maps / np.where(sums > 0, sums, 1)


@dataclass
class PaddedNormMaps:
    """The maps of a padded batch (float32 tensors); `input_maps` cuts out one input's."""

    attentions: torch.Tensor  # [batch, layers, heads, n_max, n_max]
    value_norm: torch.Tensor  # [batch, layers, heads, n_max]
    layer_norm: torch.Tensor  # [batch, layers, n_max, n_max]
    residual_ln: torch.Tensor  # [batch, layers, n_max, n_max]
    rollouts: torch.Tensor  # [batch, layers, 2, n_max, n_max]: attention rollout, residual_ln rollout

    def input_maps(self, b: int, tokens: list[str]) -> NormMaps:
        """Input b's maps, cut to its own n = len(tokens) (contiguous copies)."""
        n = len(tokens)

        def cut(t: torch.Tensor) -> np.ndarray:
            return np.ascontiguousarray(t[b, ..., :n, :n].numpy())

        value_norm = np.ascontiguousarray(self.value_norm[b, ..., :n].numpy())
        attentions = self.attentions[b, ..., :n, :n].numpy()
        return NormMaps(
            tokens=tokens,
            value_norm=value_norm,
            weighted_norm=attentions * value_norm[..., None, :],
            layer_norm=cut(self.layer_norm),
            residual_ln=cut(self.residual_ln),
            attention_rollout=cut(self.rollouts[:, :, 0]),
            residual_ln_rollout=cut(self.rollouts[:, :, 1]),
        )


def _mixed_squared(weights: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """sum_{k,g} w[..,j,i,k] w[..,j,i,g] gram[..,j,k,g]: weights [.., j, i, k], gram [.., j, k, k] -> [.., j, i]."""
    return torch.matmul(weights, gram).mul_(weights).sum(-1)


def padded_norm_maps(
    attentions: torch.Tensor,  # [batch, layers, heads, n, n]
    values: torch.Tensor,  # [batch, layers, n, hidden]: v = x W_V + b_V, heads side by side
    layer_inputs: torch.Tensor,  # [batch, layers, n, hidden]: x
    scale: torch.Tensor,  # [batch, layers, n]: the LayerNorm divisors s_i
    w: NormWeights,
) -> PaddedNormMaps:
    """Every map of a padded batch (float32 tensors, as run_encoded stacks them)."""
    batch, layers, heads, n, _ = attentions.shape
    hidden = layer_inputs.shape[-1]
    out_weight, gamma = torch.from_numpy(w.out_weight), torch.from_numpy(w.gamma)
    value_norm = torch.empty(batch, layers, heads, n)
    layer_norm, residual_ln = torch.empty(batch, layers, n, n), torch.empty(batch, layers, n, n)
    # the weight of each vector in z_ij, by key: [batch, j, i, heads + 1]; the residual x_j is one more head, weight [i = j]
    mix = torch.zeros(batch, n, n, heads + 1)
    mix[..., heads] = torch.eye(n)
    # f_h(x_j) for each head, then x_j: written head-major by the matmul, read by key through a view
    vectors = torch.empty(heads + 1, batch * n, hidden)
    by_key = vectors.transpose(0, 1)  # [batch * n, heads + 1, hidden]
    for l in range(layers):
        v = values[:, l].reshape(batch * n, heads, -1).transpose(0, 1)  # [heads, batch * n, head_dim]
        torch.matmul(v, out_weight[l], out=vectors[:heads])
        vectors[heads] = layer_inputs[:, l].reshape(batch * n, hidden)
        gram = torch.matmul(by_key[:, :heads], by_key[:, :heads].transpose(1, 2)).view(batch, n, heads, heads)
        value_norm[:, l] = torch.diagonal(gram, dim1=-2, dim2=-1).clamp(min=0).sqrt().transpose(1, 2)
        mix[..., :heads] = attentions[:, l].permute(0, 3, 2, 1)
        layer_norm[:, l] = _mixed_squared(mix[..., :heads], gram).clamp_(min=0).sqrt_().transpose(1, 2)
        if w.post_layer_norm:  # g_i without its 1 / s_i: gamma (z - mean z); pre-LN: z itself (no LayerNorm follows)
            vectors.sub_(vectors.mean(-1, keepdim=True)).mul_(gamma[l])
        elif w.attention_norm:  # the heads' part of z_ij is gamma f_h(x_j) A[i,j] / r_i; the residual's is x_i
            vectors[:heads].mul_(gamma[l])
            mix[..., :heads].div_(scale[:, l, None, :, None])
        centred = torch.matmul(by_key, by_key.transpose(1, 2)).view(batch, n, heads + 1, heads + 1)
        residual_ln[:, l] = _mixed_squared(mix, centred).clamp_(min=0).sqrt_().transpose(1, 2)
        if w.post_layer_norm:
            residual_ln[:, l] /= scale[:, l, :, None]
    steps = torch.stack([0.5 * attentions.mean(2) + 0.5 * torch.eye(n), row_normalised_tensor(residual_ln)], dim=2)
    rollouts = rollout_tensor(steps.transpose(0, 1)).transpose(0, 1)
    return PaddedNormMaps(attentions, value_norm, layer_norm, residual_ln, rollouts)


def row_normalised_tensor(maps: torch.Tensor) -> torch.Tensor:
    """row_normalised of a tensor."""
    sums = maps.sum(-1, keepdim=True)
    return maps / torch.where(sums > 0, sums, torch.ones_like(sums))


def rollout_tensor(per_layer: torch.Tensor) -> torch.Tensor:
    """P_0 = R_0, P_l = R_l @ P_(l-1) for R [layers, ..., n, n] (any batch of maps rolled out together)."""
    rolled = torch.empty_like(per_layer)
    rolled[0] = per_layer[0]
    for l in range(1, len(per_layer)):
        torch.matmul(per_layer[l], rolled[l - 1], out=rolled[l])
    return rolled
