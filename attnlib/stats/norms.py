"""Value-weighted norms, the residual + LayerNorm decomposition and rollout (METHODS §11-13), and their corpus sums.

Every map is a plain function of numpy arrays; `norm_maps` feeds them from a RunResult made with capture_norms=True.
Norms of sums of vectors go through Gram matrices: ||sum_k w_k v_k||^2 = sum_{k,g} w_k w_g <v_k, v_g>, so no
[n, n, hidden] array is formed.

`padded_norm_maps` computes every map of a padded batch at once, one layer at a time (the corpus engine's fast path,
which `run_batches(..., batch_maps=batch_norm_maps)` runs); the tests hold it to the per-input functions. Padding
never enters a real row: a padded key has attention 0 and no residual weight, so real rows of every map (and of their
rollouts) only mix real keys, and each input's maps are its top-left [n, n] corner.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION, NORMS, Capture
from attnlib.core.runner import Encoded, NormWeights, PaddedCaptures, RunResult
from attnlib.core.seq2seq import Seq2SeqMaps
from attnlib.results.files import ResultFileError, numeric_array
from attnlib.stats.special import CLASS_KEYS, class_masks, punct_mask

MEASURES = ("attention", "layer_norm", "residual_ln", "attention_rollout", "residual_ln_rollout")
VALUE_KEYS = tuple(f"value_{key}" for key in CLASS_KEYS)
NORM_KEYS = CLASS_KEYS + VALUE_KEYS


# ------------------------------------------------- every map of a padded batch at once (the corpus engine's fast path)


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


def batch_norm_maps(batch: PaddedCaptures, encoded: Sequence[Encoded]) -> list[NormMaps]:
    """Every §11-13 map of each input of a padded batch (run_encoded's batch_maps), computed for the batch at once."""
    padded = padded_norm_maps(batch.attentions, batch.values, batch.layer_inputs, batch.block_scale, batch.weights)
    return [padded.input_maps(b, list(e.tokens)) for b, e in enumerate(encoded)]


def _mixed_squared_by_key(weights: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """sum_{k,g} w[..,j,i,k] w[..,j,i,g] gram[..,j,k,g] in float32: weights [.., j, i, k], gram [.., j, k, k] -> [.., j, i]."""
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
        layer_norm[:, l] = _mixed_squared_by_key(mix[..., :heads], gram).clamp_(min=0).sqrt_().transpose(1, 2)
        if w.post_layer_norm:  # g_i without its 1 / s_i: gamma (z - mean z); pre-LN: z itself (no LayerNorm follows)
            vectors.sub_(vectors.mean(-1, keepdim=True)).mul_(gamma[l])
        elif w.attention_norm:  # the heads' part of z_ij is gamma f_h(x_j) A[i,j] / r_i; the residual's is x_i
            vectors[:heads].mul_(gamma[l])
            mix[..., :heads].div_(scale[:, l, None, :, None])
        centred = torch.matmul(by_key, by_key.transpose(1, 2)).view(batch, n, heads + 1, heads + 1)
        residual_ln[:, l] = _mixed_squared_by_key(mix, centred).clamp_(min=0).sqrt_().transpose(1, 2)
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


# ------------------------------------------------------------------------- the per-input functions that define them


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A numpy array as a torch tensor (shared memory when already contiguous)."""
    return torch.from_numpy(np.ascontiguousarray(a))


def _head_vectors(values: torch.Tensor, out_weight: torch.Tensor) -> torch.Tensor:
    """f_h(x_j) = v_j W_O^h, by key: values [layers, heads, n, d], out_weight [.., d, hidden] -> [layers, n, heads, hidden]."""
    return torch.matmul(values, out_weight).transpose(1, 2).contiguous()


def head_vectors(values: np.ndarray, out_weight: np.ndarray) -> np.ndarray:
    """f_h(x_j) = v_j W_O^h: values [layers, heads, n, d] @ out_weight [layers, heads, d, hidden] -> [.., n, hidden]."""
    return _head_vectors(_tensor(values), _tensor(out_weight)).transpose(1, 2).numpy()


def value_norms(vectors: np.ndarray) -> np.ndarray:
    """||f_h(x_j)||_2 of head vectors [layers, heads, n, hidden] -> [layers, heads, n]."""
    return np.linalg.norm(vectors, axis=-1)


def value_norms_from_values(values: np.ndarray, out_gram: np.ndarray) -> np.ndarray:
    """||v_j W_O^h||_2 without forming f_h(x_j): values [layers, heads, n, d], out_gram (NormWeights) -> [layers, heads, n]."""
    v = _tensor(values)
    return torch.matmul(v, _tensor(out_gram)).mul_(v).sum(-1).clamp_(min=0.0).sqrt_().numpy()


def weighted_norms(attentions: np.ndarray, value_norm: np.ndarray) -> np.ndarray:
    """||A[l,h,i,j] f_h(x_j)|| = A * value_norm: attentions [layers, heads, n, n], value_norm [layers, heads, n]."""
    return attentions * value_norm[..., None, :]


def _gram(by_key: torch.Tensor) -> torch.Tensor:
    """<v_k, v_g> per key j, float32: vectors [layers, n, k, hidden] -> [layers, n, k, k]."""
    return torch.matmul(by_key, by_key.transpose(-1, -2))


def _mixed_squared(weights: torch.Tensor, gram: torch.Tensor) -> torch.Tensor:
    """sum_{k,g} w[l,k,i,j] w[l,g,i,j] gram[l,j,k,g] in float64: weights [layers, k, n, n] -> [layers, i, j]."""
    w = weights.permute(0, 3, 2, 1).double()  # [layers, j, i, k]
    return (torch.matmul(w, gram.double()) * w).sum(-1).transpose(1, 2)


def _root(squared: torch.Tensor) -> torch.Tensor:
    """sqrt of squared norms, rounding errors below zero clipped."""
    return squared.clamp(min=0.0).sqrt()


def mixed_norms(weights: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """||sum_k weights[l,k,i,j] vectors[l,k,j]||_2: weights [layers, k, n, n], vectors [layers, k, n, hidden] -> [layers, n, n]."""
    gram = _gram(_tensor(vectors).transpose(1, 2))
    return _root(_mixed_squared(_tensor(weights), gram)).float().numpy()


def layer_norm_map(attentions: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """GlobEnc's N (§12): ||sum_h A[l,h,i,j] f_h(x_j)||: attentions [layers, heads, n, n], vectors [.., n, hidden] -> [layers, n, n]."""
    return mixed_norms(attentions, vectors)


def _block_scale(
    attentions: torch.Tensor,
    by_key: torch.Tensor,
    layer_inputs: torch.Tensor,
    out_bias: np.ndarray,
    eps: np.ndarray,
    attention_norm: bool = False,
) -> torch.Tensor:
    """s_i (float64 [layers, n]) from attentions [layers, heads, n, n] and f_h(x_j) by key [layers, n, heads, hidden];
    attention_norm: r_i of the attention output o_i, without the residual."""
    layers, heads, n, _ = attentions.shape
    mixed = torch.matmul(
        attentions.transpose(1, 2).reshape(layers, n, heads * n), by_key.transpose(1, 2).reshape(layers, heads * n, -1)
    )
    if attention_norm:
        o = (mixed + _tensor(out_bias)[:, None, :]).double()
        return (o.square().mean(-1) + _tensor(eps).double()[:, None]).sqrt()
    u = mixed + layer_inputs + _tensor(out_bias)[:, None, :]
    return (u.double().var(-1, correction=0) + _tensor(eps).double()[:, None]).sqrt()


def block_scale(
    attentions: np.ndarray,
    vectors: np.ndarray,
    layer_inputs: np.ndarray,
    out_bias: np.ndarray,
    eps: np.ndarray,
    attention_norm: bool = False,
) -> np.ndarray:
    """s_i = sqrt(var(u_i) + eps), u_i = sum_h (A_h F_h)_i + x_i + b_O, the LayerNorm's divisor per row: [layers, n];
    attention_norm (Gemma 2 and 3): r_i = sqrt(mean(o_i^2) + eps), o_i = sum_h (A_h F_h)_i + b_O."""
    by_key = _tensor(vectors).transpose(1, 2)
    return _block_scale(
        _tensor(attentions), by_key, _tensor(layer_inputs), out_bias, eps, attention_norm=attention_norm
    ).numpy()


def _residual_ln(
    attentions: torch.Tensor,
    by_key: torch.Tensor,
    layer_inputs: torch.Tensor,
    gamma: np.ndarray,
    out_bias: np.ndarray,
    eps: np.ndarray,
    scale: torch.Tensor | None = None,
    post_layer_norm: bool = True,
    attention_norm: bool = False,
) -> torch.Tensor:
    """N_ResLN as float32 [layers, n, n] from torch attentions, f_h(x_j) by key [layers, n, heads, hidden] and x
    (and s_i [layers, n] when the run captured it, else computed from the rest); pre-LN: N_Res, ||z_ij||; with an
    RMSNorm of the attention output (attention_norm): ||gamma (sum_h A f_h(x_j)) / r_i + [i = j] x_i||."""
    layers, heads, n, _ = attentions.shape
    centred = torch.empty(layers, n, heads + 1, by_key.shape[-1], dtype=by_key.dtype)
    centred[:, :, :heads] = by_key
    centred[:, :, heads] = layer_inputs  # the residual x_j as one more head
    if post_layer_norm:
        centred.sub_(centred.mean(-1, keepdim=True)).mul_(_tensor(gamma).to(by_key.dtype)[:, None, None, :])
    weights = attentions
    if attention_norm:
        centred[:, :, :heads].mul_(_tensor(gamma).to(by_key.dtype)[:, None, None, :])
        if scale is None:
            scale = _block_scale(attentions, by_key, layer_inputs, out_bias, eps, attention_norm=True)
        weights = attentions / scale[:, None, :, None].to(attentions.dtype)
    eye = torch.eye(n, dtype=attentions.dtype).expand(layers, 1, n, n)  # its weight is [i = j]
    squared = _mixed_squared(torch.cat([weights, eye], dim=1), _gram(centred))
    if not post_layer_norm:
        return _root(squared).float()
    if scale is None:
        scale = _block_scale(attentions, by_key, layer_inputs, out_bias, eps)
    return (_root(squared) / scale[:, :, None]).float()


def residual_ln_map(
    attentions: np.ndarray,
    vectors: np.ndarray,
    layer_inputs: np.ndarray,
    out_bias: np.ndarray,
    gamma: np.ndarray,
    eps: np.ndarray,
    post_layer_norm: bool = True,
    attention_norm: bool = False,
) -> np.ndarray:
    """GlobEnc's N_ResLN (§12): ||g_i(z_ij)||, g_i(z) = gamma (z - mean z) / s_i -> [layers, n, n]; for a pre-LN
    family (post_layer_norm=False) N_Res, ||z_ij|| (§12, pre-LayerNorm encoders); attention_norm (Gemma 2 and 3, with
    post_layer_norm=False): z_ij with the heads' part through the RMSNorm of the attention output (§12, decoders).

    attentions [layers, heads, n, n], vectors f_h(x_j) [layers, heads, n, hidden], layer_inputs x [layers, n, hidden],
    out_bias b_O, gamma [layers, hidden], eps [layers]. The residual enters as one more head with weight [i = j] and
    vector x_j, so sum_k w[k,i,j] vec[k,j] = z_ij of §12."""
    by_key = _tensor(vectors).transpose(1, 2)
    return _residual_ln(
        _tensor(attentions),
        by_key,
        _tensor(layer_inputs),
        gamma,
        out_bias,
        eps,
        post_layer_norm=post_layer_norm,
        attention_norm=attention_norm,
    ).numpy()


@dataclass
class LayerNormParts:
    """One layer's block output split as sum_j g_i(z_ij) + g_i(b_O) + beta (§12); pre-LN: g_i is the identity and
    beta 0, so the parts sum to the block's output x_i + c_i W_O + b_O; with an RMSNorm of the attention output (Gemma 2
    and 3) the parts are gamma (sum_h A f_h(x_j)) / r_i + [i = j] x_i and they sum to x_i + RMSNorm(c_i W_O + b_O)."""

    parts: np.ndarray  # [n, n, hidden]: g_i(z_ij)
    bias: np.ndarray  # [n, hidden]: g_i(b_O)
    beta: np.ndarray  # [hidden]
    scale: np.ndarray  # [n]: s_i (r_i with an RMSNorm of the attention output)

    def output(self) -> np.ndarray:
        """LN(u_i) rebuilt from the parts: [n, hidden]."""
        return self.parts.sum(1) + self.bias + self.beta


def layer_norm_parts(
    attentions: np.ndarray,
    vectors: np.ndarray,
    layer_input: np.ndarray,
    out_bias: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float,
    post_layer_norm: bool = True,
    attention_norm: bool = False,
) -> LayerNormParts:
    """The decomposition of one layer written out (attentions [heads, n, n], vectors [heads, n, hidden], x [n, hidden]);
    post_layer_norm=False: the pre-LN decomposition (no LayerNorm after the residual); attention_norm as well: an
    RMSNorm (gamma, eps) of the attention output before the residual."""
    x = layer_input.astype(np.float64)
    z = np.einsum("hij,hjd->ijd", attentions.astype(np.float64), vectors.astype(np.float64))
    bias = np.broadcast_to(out_bias, x.shape).astype(np.float64)
    if attention_norm:
        r = np.sqrt(np.square(z.sum(1) + bias).mean(-1) + eps)
        z *= gamma.astype(np.float64) / r[:, None, None]
        bias = gamma * bias / r[:, None]
    z[np.arange(len(x)), np.arange(len(x))] += x
    u = z.sum(1) + out_bias
    if not post_layer_norm:
        scale = r if attention_norm else np.ones(len(x))
        return LayerNormParts(z, bias, np.zeros(len(beta)), scale)
    scale = np.sqrt(u.var(-1) + eps)

    def g(t: np.ndarray) -> np.ndarray:
        return gamma * (t - t.mean(-1, keepdims=True)) / scale.reshape(-1, *([1] * (t.ndim - 1)))

    return LayerNormParts(g(z), g(np.broadcast_to(out_bias, u.shape)), beta.astype(np.float64), scale)


def rollout(per_layer: np.ndarray) -> np.ndarray:
    """P_0 = R_0, P_l = R_l @ P_(l-1) for row-stochastic R [layers, n, n] -> P [layers, n, n]."""
    return rollout_tensor(_tensor(per_layer)).numpy()


def _attention_step(attentions: torch.Tensor) -> torch.Tensor:
    """R_l = 0.5 mean_h A[l,h] + 0.5 I: attentions [layers, heads, n, n] -> [layers, n, n]."""
    n = attentions.shape[-1]
    return 0.5 * attentions.mean(1) + 0.5 * torch.eye(n, dtype=attentions.dtype)


def attention_rollout(attentions: np.ndarray) -> np.ndarray:
    """Abnar & Zuidema: R_l = 0.5 mean_h A[l,h] + 0.5 I, rolled out; attentions [layers, heads, n, n] -> [layers, n, n]."""
    return rollout_tensor(_attention_step(_tensor(attentions))).numpy()


def residual_ln_rollout(residual_ln: np.ndarray) -> np.ndarray:
    """GlobEnc: R_l = the row-normalised residual_ln[l], rolled out; [layers, n, n] -> [layers, n, n]."""
    return rollout_tensor(row_normalised_tensor(_tensor(residual_ln))).numpy()


def _captured(result: RunResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, NormWeights]:
    """(values, layer inputs, LayerNorm divisors, weights) of a result, or a clear error when it was run without
    capture_norms."""
    if (
        result.values is None
        or result.layer_inputs is None
        or result.block_scale is None
        or result.norm_weights is None
    ):
        raise ValueError("This run has no value vectors: run it with capture_norms=True.")
    return result.values, result.layer_inputs, result.block_scale, result.norm_weights


def norm_maps(result: RunResult) -> NormMaps:
    """Every §11-13 map of one run made with capture_norms=True: the batch's when it ran with
    batch_maps=batch_norm_maps, else computed now as a batch of one."""
    if isinstance(result.maps, NormMaps):
        return result.maps
    values, inputs, scale, w = _captured(result)
    return _one_input_maps(result.attentions, values, inputs, scale, w, list(result.tokens))


def _one_input_maps(
    attentions: np.ndarray, values: np.ndarray, inputs: np.ndarray, scale: np.ndarray, w: NormWeights, tokens: list[str]
) -> NormMaps:
    """Every §11-13 map of one input as a batch of one: attentions [layers, heads, n, n], values [layers, heads, n, d],
    layer inputs [layers, n, hidden], LayerNorm divisors [layers, n]."""
    layers, _, n, _ = values.shape
    padded = padded_norm_maps(
        _tensor(attentions)[None],
        _tensor(values).permute(0, 2, 1, 3).reshape(1, layers, n, -1),  # heads joined again, as the model has them
        _tensor(inputs)[None],
        _tensor(scale)[None],
        w,
    )
    return padded.input_maps(0, tokens)


def part_norm_maps(maps: Seq2SeqMaps) -> ValueNormMaps:
    """An encoder-decoder's part from a run_seq2seq made with `norms=part` (METHODS §18): the decoder's every §11-13
    map (a NormMaps, causal: zero above the diagonal); the cross-attention's §11 maps alone (a ValueNormMaps: rows the
    target's tokens, keys the source's; §12-13 have no meaning for it, families.CROSS_RESIDUAL)."""
    v = maps.values
    if v is None:
        raise ValueError("This run has no value vectors: run it with run_seq2seq(..., norms=part).")
    attentions, queries, _ = maps.part(v.part)
    if v.layer_inputs is None or v.block_scale is None:
        value_norm = value_norms_from_values(v.values, v.weights.out_gram)
        vectors = head_vectors(v.values, v.weights.out_weight)
        layer_norm = layer_norm_map(attentions, vectors)
        return ValueNormMaps(list(queries), value_norm, weighted_norms(attentions, value_norm), layer_norm)
    return _one_input_maps(attentions, v.values, v.layer_inputs, v.block_scale, v.weights, list(queries))


def norm_class_statistics(
    attentions: np.ndarray, value_norm: np.ndarray, classes: np.ndarray, causal: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§11 for one input: norm share of each class [layers, heads, 4], mean value norm per class [layers, heads, 4]
    (NaN for a class with no position) and which classes occur [4]; classes is class_masks' [n, 4]. Causal (a decoder,
    §18): the first class (FIRST) over rows i >= 1, as its attention share."""
    to_class = np.matmul(attentions, value_norm[..., None] * classes)  # sum_{j in C} A[i,j] vn[j]: [l, h, n, 4]
    totals = to_class.sum(-1, keepdims=True)
    row_shares = to_class / np.where(totals > 0, totals, 1)
    shares = row_shares.mean(-2)
    if causal and row_shares.shape[-2] > 1:  # row 0 of a decoder sees only itself
        shares[..., 0] = row_shares[..., 1:, 0].mean(-1)
    present = classes.sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        by_class = (value_norm @ classes) / present
    return shares, by_class, present > 0


@dataclass
class NormShareResult:
    """Corpus means per head ([layers, heads]) of the §11 norm shares (cls, sep, punct, other) and value norms."""

    n_inputs: int
    heads: dict[str, np.ndarray]  # NORM_KEYS -> [layers, heads]

    @property
    def layers(self) -> dict[str, np.ndarray]:
        """Each statistic per layer: the mean over that layer's heads."""
        return {key: v.mean(axis=1) for key, v in self.heads.items()}

    def to_json(self) -> dict:
        """`norm_layers` (one object per layer) and `norm_heads` ([layer][head] per key), 0-based."""
        layers = self.layers
        n_layers = len(layers["cls"])
        return {
            "norm_layers": [{key: float(layers[key][l]) for key in NORM_KEYS} for l in range(n_layers)],
            "norm_heads": {key: self.heads[key] for key in NORM_KEYS},
        }


@dataclass
class NormShareStats:
    """Accumulator of §11 statistics: per-input shares and class value norms summed per head, with their counts."""

    captures: ClassVar[frozenset[Capture]] = ATTENTION | NORMS  # value vectors, layer inputs, block scales
    n_layers: int
    n_heads: int
    all_punct: bool = False
    causal: bool = False  # a decoder's (§18): FIRST's norm share over rows i >= 1
    shares: np.ndarray = field(default=None)  # type: ignore[arg-type]  # [layers, heads, 4]
    value_sums: np.ndarray = field(default=None)  # type: ignore[arg-type]  # [layers, heads, 4]
    value_counts: np.ndarray = field(default=None)  # type: ignore[arg-type]  # [4] inputs with such a position
    n_inputs: int = 0

    def __post_init__(self) -> None:
        shape = (self.n_layers, self.n_heads, len(CLASS_KEYS))
        self.shares = np.zeros(shape) if self.shares is None else self.shares
        self.value_sums = np.zeros(shape) if self.value_sums is None else self.value_sums
        self.value_counts = np.zeros(len(CLASS_KEYS), np.int64) if self.value_counts is None else self.value_counts

    def add(self, result: RunResult, item: CorpusInput | None = None) -> None:
        """Add one input run with capture_norms=True (no padding in it)."""
        values, _, _, w = _captured(result)
        value_norm = value_norms_from_values(values, w.out_gram) if result.value_norm is None else result.value_norm
        classes = class_masks(
            result.cls_mask, result.sep_mask, punct_mask(result.tokens, result.special_mask, self.all_punct)
        )
        shares, by_class, present = norm_class_statistics(result.attentions, value_norm, classes, self.causal)
        self.shares += shares
        self.value_sums[..., present] += by_class[..., present]
        self.value_counts += present
        self.n_inputs += 1

    def merge(self, other: NormShareStats) -> NormShareStats:
        """The accumulator over both input sets; neither operand changes."""
        if (self.n_layers, self.n_heads, self.all_punct, self.causal) != (
            other.n_layers,
            other.n_heads,
            other.all_punct,
            other.causal,
        ):
            raise ValueError("Cannot merge norm statistics of different models or punctuation options.")
        return NormShareStats(
            self.n_layers,
            self.n_heads,
            self.all_punct,
            self.causal,
            self.shares + other.shares,
            self.value_sums + other.value_sums,
            self.value_counts + other.value_counts,
            self.n_inputs + other.n_inputs,
        )

    def result(self) -> NormShareResult:
        """Unweighted means over inputs (a class's value norm over the inputs that have that class)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = self.shares / self.n_inputs if self.n_inputs else np.full_like(self.shares, np.nan)
            values = np.where(self.value_counts > 0, self.value_sums / np.maximum(self.value_counts, 1), np.nan)
        heads = {key: shares[..., c] for c, key in enumerate(CLASS_KEYS)}
        heads |= {key: values[..., c] for c, key in enumerate(VALUE_KEYS)}
        return NormShareResult(self.n_inputs, heads)


def special_norms_from_json(result: dict) -> NormShareResult | None:
    """The NormShareResult of a `special --norms` JSON, or None when the run had no --norms."""
    if result.get("norm_heads") is None:
        return None
    try:
        heads = {key: numeric_array(result["norm_heads"][key], key, 2) for key in NORM_KEYS}
        if len({v.shape for v in heads.values()}) != 1:
            raise ResultFileError("the per-head norm statistics have different shapes.")
        return NormShareResult(int(result["n_inputs"]), heads)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"the `special --norms` result is incomplete or malformed ({exc!r}).") from exc
