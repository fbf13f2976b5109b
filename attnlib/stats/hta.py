"""Hidden Token Attribution per head (METHODS §9): how much each token feeds each head's output.

Exact mode pushes one forward-mode derivative per input coordinate (n * hidden directions) through every layer,
which gives every layer and head at once; estimate mode pushes k random standard-normal probes per input token
instead: ||J||_F^2 ~ (1/k) sum_p ||J v_p||^2. Directions travel in chunks, each layer linearised at the input:
- self-attention: the tangent of softmax(logits) v written out from the layer's own projections, with the family's
  score terms read off its own code as linear maps (rotary's rotation per position, after Qwen3's and Gemma 3's
  per-head norm of q and k; DeBERTa's c2p and p2c as per-(i, k) terms in q_i and k_k; Gemma 2's soft-cap as its slope
  per score; pre-LN families first pass the tangent through their LayerNorm's Jacobian), all checked against the
  module's output;
- the rest of the layer acts on each token alone, so it becomes one Jacobian per token (LayerNorm, feed-forward,
  LayerNorm; pre-LN: the residual plus a LayerNorm or RMSNorm and the feed-forward, gated in ModernBERT, Phi-3 and
  Llama, its output normalised in Gemma 2 and 3, reading the layer input in GPT-NeoX's parallel residual), built once
  and applied as a batched matrix product (Gemma's norm of the attention output is applied to the tangent).
Two random directions are checked against torch.func.jvp through the model's own layers (attnlib.core.replay), which is
the reference and the path taken wherever the linearisation does not reproduce it: layers of another shape (a
convolution after the first layer, scores that mix heads), or Jacobians over LINEARISED_BUDGET. The previous-layer
contribution is the first step of the same computation started at every layer's input (written out where
linearised, else jvp through the attention block).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch.func import jvp, vjp, vmap

from attnlib.core.families import (
    HeadsCall,
    LayerSite,
    Layout,
    UnsupportedModelError,
    is_linear,
    layer_norm_parameters,
    linear_weight,
    rms_norm_gamma,
    unsupported_reason,
)
from attnlib.core.hooks import hooked
from attnlib.core.model import LoadedModel
from attnlib.core.replay import Recording, captured_contexts, record
from attnlib.core.runner import Encoded, TextOrWords, encode, model_inputs

Mode = Literal["exact", "estimate"]
MODES: tuple[Mode, ...] = ("exact", "estimate")
DEFAULT_PROBES = 12  # benchmarks/bench_hta.py: Pearson >= 0.99 with exact mode at about 20x its speed
DEFAULT_SEED = 0
CHUNK_BUDGET = 4_000_000  # floats in the widest activation of one chunk of directions (about 16 MB)
LINEARISED_BUDGET = 2**27  # floats of per-token Jacobians kept at once (512 MB)


@dataclass
class Attribution:
    """Per-head and layer-output contributions, each row normalised to sum 1 over the input tokens."""

    tokens: list[str]
    input: np.ndarray  # [layers, heads, query j, input token i]: C(e0_i, o(l,h)_j)
    previous: np.ndarray  # [layers, heads, query j, input token i]: C(e(l-1)_i, o(l,h)_j)
    mode: str
    probes: int | None  # k in estimate mode, None in exact mode
    output: np.ndarray | None = None  # [layers, position j, input token i]: G_out, C(e0_i, e(l+1)_j) (METHODS §13)


def _all_heads_function(rec: Recording, with_output: bool) -> Callable:
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


def _block_heads_function(rec: Recording, index: int) -> Callable:
    """e(l-1) -> (o(l) [1, 1, n, hidden], nothing [0, 1, n, hidden]) through layer `index`'s attention block alone."""

    def heads_of_one_layer(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with captured_contexts(rec.layout, [index]) as seen:
            rec.replay_block(index, x)
        return seen[-1][1][None], x.new_zeros(0, *x.shape)

    return heads_of_one_layer


@dataclass
class _LayerAtInput:
    """One layer's self-attention at this input (per head [heads, n, d] or [heads, n, n]) and how a tangent of the
    layer input moves its queries, keys, values and scores."""

    qkv_t: torch.Tensor  # [hidden, 3 * heads * d]: the projections' weights, transposed, columns as (q|k|v, head, d)
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    weights: torch.Tensor  # attention A [heads, n, n]
    heads: torch.Tensor  # o(l) [heads, n, d]
    scale: float
    qk_norms: tuple[_NormAt | None, ...]  # q, k, v: a per-head norm before rotary (Qwen3, Gemma 3), stats [n, heads, d]
    rotations: tuple[_PairRotation | None, ...]  # q, k, v: rotary's map per position, or None
    relative: tuple[torch.Tensor, torch.Tensor] | None  # DeBERTa: logit terms per (i, k) linear in q_i and in k_k
    norm: _NormAt | None  # pre-LN: the LayerNorm or RMSNorm before it
    cap_slope: torch.Tensor | None  # soft-capped logits c tanh(s / c) (Gemma 2): their slope in s [heads, n, n]


def _column_order(lay: Layout, site: LayerSite) -> torch.Tensor:
    """Where the family's split reads q, k and v in the projections' concatenated outputs: indices in (q|k|v, head, d)
    order (the split is linear up to its own biases, which the split of zeros removes)."""
    widths = [linear_weight(p).shape[0] for p in site.projections]
    columns = torch.arange(sum(widths), dtype=torch.float64)[None, None]
    split = lay.family.split
    read = split(site.heads, list(columns.split(widths, -1)), lay.head_dim)
    bias = split(site.heads, list(torch.zeros_like(columns).split(widths, -1)), lay.head_dim)
    return torch.stack([(r - b)[0, :, 0] for r, b in zip(read, bias)]).round().long().flatten()


def _unit_vectors(n_heads: int, n: int, d: int) -> torch.Tensor:
    """[d, heads, n, d]: batch e holds the unit vector e_e at every head and position."""
    return torch.eye(d).reshape(d, 1, 1, d).expand(d, n_heads, n, d).contiguous()


@dataclass
class _PairRotation:
    """A linear map per position that mixes each coordinate e with one partner p(e): out_e = diag_e x_e + off_e x_p(e)
    (rotary's rotation, by coordinate pairs), applied elementwise."""

    diag: torch.Tensor  # [heads, n, d]
    off: torch.Tensor  # [heads, n, d]
    swap: torch.Tensor  # [d, d]: x @ swap = x_p(e) in place e (a permutation matrix: a small product, no gather)

    def rows(self, t: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The map at positions tokens[p] applied to t [c, heads, d]."""
        return t * self.diag[:, tokens].transpose(0, 1) + (t @ self.swap) * self.off[:, tokens].transpose(0, 1)

    def dense(self, t: torch.Tensor) -> torch.Tensor:
        """The map at every position applied to t [n, c, heads, d]."""
        diag, off = self.diag.transpose(0, 1)[:, None], self.off.transpose(0, 1)[:, None]  # [n, 1, heads, d]
        return t * diag + (t @ self.swap) * off


def _pair_rotation(matrices: torch.Tensor) -> _PairRotation | None:
    """matrices [heads, n, d_out, d_in] as a _PairRotation; None when they mix coordinates otherwise."""
    diag = matrices.diagonal(dim1=-2, dim2=-1)
    off_matrices = matrices - torch.diag_embed(diag)
    partner = off_matrices.abs().sum((0, 1)).argmax(-1)  # [d]: p(e)
    index = partner.expand(*matrices.shape[:2], -1)[..., None]
    off = off_matrices.gather(-1, index)[..., 0]
    if not torch.equal(torch.diag_embed(diag).scatter_add(-1, index, off[..., None]), matrices):
        return None
    swap = torch.zeros(len(partner), len(partner), dtype=matrices.dtype)
    swap[partner, torch.arange(len(partner))] = 1.0
    return _PairRotation(diag.contiguous(), off.contiguous(), swap)


def _rotations(lay: Layout, call: HeadsCall, n: int) -> tuple[_PairRotation | None, ...] | None:
    """Rotary's map of q, k and v at each position (None where the family leaves one alone), read off the family's
    own rotation of unit vectors; None when a map is not a rotation by coordinate pairs."""
    if lay.family.positions is None:
        return (None, None, None)
    units = _unit_vectors(lay.n_heads, n, lay.head_dim)
    identity = units.permute(1, 2, 3, 0)
    maps: list[_PairRotation | None] = []
    doubled = lay.family.positions(call, (2 * units, 2 * units, 2 * units))
    for rotated, twice in zip(lay.family.positions(call, (units, units, units)), doubled):
        if not torch.equal(2 * rotated, twice):
            return None
        matrices = rotated.permute(1, 2, 3, 0)  # [heads, n, out, in]
        if torch.equal(matrices, identity):
            maps.append(None)
            continue
        pair = _pair_rotation(matrices)
        if pair is None:
            return None
        maps.append(pair)
    return tuple(maps)


def _relative_terms(lay: Layout, call: HeadsCall, n: int, scale: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    """DeBERTa's c2p and p2c as (P_K, P_Q) [heads, n, n, d]: their logit at (i, k) is q_i . P_K[i, k] + k_k . P_Q[i, k],
    read off the family's own bias of unit queries and keys; None when the call has no relative terms."""
    if lay.family.scores != "disentangled":
        return None
    zeros, units = torch.zeros(lay.head_dim, lay.n_heads, n, lay.head_dim), _unit_vectors(lay.n_heads, n, lay.head_dim)
    base = lay.bias(call, (zeros, zeros, zeros), scale)
    if base is None:
        return None
    by_query = lay.bias(call, (units, zeros, zeros), scale) - base  # [e, heads, i, k] = P_K[h, i, k, e]
    by_key = lay.bias(call, (zeros, units, zeros), scale) - base
    return by_query.permute(1, 2, 3, 0).contiguous(), by_key.permute(1, 2, 3, 0).contiguous()


def _is_layer_norm(module: torch.nn.Module) -> bool:
    """torch's LayerNorm or DeBERTa's own (the same arithmetic, eps inside the root)."""
    return isinstance(module, torch.nn.LayerNorm) or type(module).__name__ == "DebertaLayerNorm"


def _layer_norm_stats(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gamma / sigma [n, hidden], x-hat [n, hidden]) of a LayerNorm at x [n, hidden]: its Jacobian is
    diag(gamma / sigma)(I - 1 1^T / hidden - x-hat x-hat^T / hidden)."""
    gamma, _, eps = layer_norm_parameters(module, x.shape[-1])
    sigma = (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    return gamma / sigma, (x - x.mean(-1, keepdim=True)) / sigma


@dataclass
class _NormAt:
    """A LayerNorm or RMSNorm at this input, per row: its Jacobian is diag(gamma / sigma)(I - 1 1^T / hidden
    - x-hat x-hat^T / hidden), without the 1 1^T term for an RMSNorm (sigma its root mean square, x-hat = x / sigma)."""

    scale: torch.Tensor  # gamma / sigma [n, hidden]
    hat: torch.Tensor  # x-hat [n, hidden]
    centred: bool  # a LayerNorm (centres its input); False: an RMSNorm

    def at(self, index) -> _NormAt:
        """The rows picked by an index of the first dimension (broadcast to the tangents they multiply)."""
        return _NormAt(self.scale[index], self.hat[index], self.centred)

    def tangent(self, tangent: torch.Tensor) -> torch.Tensor:
        """The Jacobian applied to tangents [..., hidden] of rows whose stats are broadcast to them."""
        centred = tangent - tangent.mean(-1, keepdim=True) if self.centred else tangent
        return self.scale * (centred - self.hat * ((self.hat * tangent).sum(-1, keepdim=True) / tangent.shape[-1]))


def _norm_at(module: torch.nn.Module, x: torch.Tensor) -> _NormAt | None:
    """The LayerNorm or RMSNorm module at x [n, hidden]; None for any other module (ModernBERT's Identity). An RMSNorm
    (Llama's, Gemma's, T5's LayerNorm, whatever its class is called) is recognised by its own output at x."""
    if _is_layer_norm(module):
        return _NormAt(*_layer_norm_stats(module, x), centred=True)
    if getattr(module, "weight", None) is None:
        return None
    _, _, eps = layer_norm_parameters(module, x.shape[-1])
    sigma = (x.square().mean(-1, keepdim=True) + eps).sqrt()
    at = _NormAt(rms_norm_gamma(module, x.shape[-1], eps) / sigma, x / sigma, centred=False)
    with torch.no_grad():
        own = module(x).to(x.dtype)
    # float32: gamma read back through one rsqrt, and one product per coordinate
    return at if torch.allclose(at.scale * x, own, rtol=1e-5, atol=1e-6 * float(own.abs().max())) else None


def _layer_at_input(
    lay: Layout, site: LayerSite, call: HeadsCall, layer_input: torch.Tensor, expected: torch.Tensor
) -> _LayerAtInput | None:
    """Recompute a layer's heads from its own projections and the family's score terms; None when that does not
    give what the module computed (the written-out tangent would not be exact for it)."""
    x = call.hidden  # what the heads read: the layer input, or pre-LN its LayerNorm
    n = x.shape[1]
    outputs = [p(x) for p in site.projections]
    q, k, v = (t[0] for t in lay.qkv(site, outputs, call))  # [heads, n, d]
    scale = lay.scale(site)
    logits = q @ k.transpose(1, 2) * scale
    bias = lay.bias(call, (q[None], k[None], v[None]), scale)
    if bias is not None:
        logits = logits + bias[0]
    cap, cap_slope = lay.family.score_cap(site.heads), None
    if cap is not None:
        capped = torch.tanh(logits / cap)
        logits, cap_slope = cap * capped, 1 - capped.square()
    mask = call.arguments.get("attention_mask")
    if isinstance(mask, torch.Tensor):
        logits = logits.masked_fill(~mask[0], float("-inf")) if mask.dtype == torch.bool else logits + mask[0]
    weights = torch.softmax(logits, dim=-1)
    heads = weights @ v
    # heads * d columns, which need not be the hidden size (T5's d_kv, Gemma's head_dim)
    if not torch.allclose(heads.transpose(0, 1).reshape(n, -1), expected, atol=1e-4, rtol=1e-4):
        return None
    qkv_t = torch.cat([linear_weight(p) for p in site.projections])[_column_order(lay, site)].T.contiguous()
    rotations, qk_norms = _rotations(lay, call, n), _qk_norms_at(lay, site, outputs)
    if rotations is None or qk_norms is None:
        return None
    norm = None if lay.family.post_layer_norm else _norm_at(site.norm, layer_input[0])
    relative = _relative_terms(lay, call, n, scale)
    return _LayerAtInput(qkv_t, q, k, v, weights, heads, scale, qk_norms, rotations, relative, norm, cap_slope)


def _qk_norms_at(lay: Layout, site: LayerSite, outputs: list[torch.Tensor]) -> tuple[_NormAt | None, ...] | None:
    """The family's per-head norms of q and k (none of v) at the projections' outputs, stats [n, heads, d]; None when
    one is not a norm that _norm_at recognises."""
    modules = lay.family.qk_norms(site.heads)
    if modules is None:
        return (None, None, None)
    raw = lay.family.split(site.heads, outputs, lay.head_dim)  # [1, heads, n, d] each
    found = [_norm_at(module, t[0].transpose(0, 1)) for module, t in zip(modules, raw)]
    return None if any(f is None for f in found) else (*found, None)


def _row_qkv_tangents(layer: _LayerAtInput, tokens: torch.Tensor, vectors: torch.Tensor) -> list[torch.Tensor]:
    """dq, dk, dv [c, heads, d] when layer input row tokens[p] moves along vectors[p] [c, hidden]."""
    if layer.norm is not None:
        vectors = layer.norm.at(tokens).tangent(vectors)
    n_heads, _, d = layer.q.shape
    raw = (vectors @ layer.qkv_t).reshape(len(tokens), 3, n_heads, d).unbind(1)
    normed = [t if m is None else m.at(tokens).tangent(t) for t, m in zip(raw, layer.qk_norms)]
    return [t if r is None else r.rows(t, tokens) for t, r in zip(normed, layer.rotations)]


def _dense_qkv_tangents(layer: _LayerAtInput, inputs: torch.Tensor) -> list[torch.Tensor]:
    """dq, dk, dv [n, c, heads, d] for a tangent of the layer input [n, c, hidden]."""
    if layer.norm is not None:
        inputs = layer.norm.at((slice(None), None)).tangent(inputs)
    n_heads, n, d = layer.q.shape
    raw = (inputs @ layer.qkv_t).reshape(n, -1, 3, n_heads, d).unbind(2)
    normed = [t if m is None else m.at((slice(None), None)).tangent(t) for t, m in zip(raw, layer.qk_norms)]
    return [t if r is None else r.dense(t) for t, r in zip(normed, layer.rotations)]


def _row_tangent_heads(layer: _LayerAtInput, tokens: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """Tangent of o(l) [n, c, heads, d] when layer input row tokens[p] moves along vectors[p] (and no other row).

    Forward-mode derivative of softmax(logits) v written out for a one-row tangent: the logits move only in row i (a)
    and column i (b), so no n x n tangent is ever formed.
    """
    c = len(tokens)
    dq, dk, dv = _row_qkv_tangents(layer, tokens, vectors)  # [c, heads, d]
    a = layer.scale * torch.einsum("hkd,chd->chk", layer.k, dq)  # logit tangent of row i, [c, heads, key]
    b = layer.scale * torch.einsum("hjd,chd->chj", layer.q, dk)  # logit tangent of column i, [c, heads, query]
    if layer.relative is not None:
        by_query, by_key = layer.relative
        a += torch.einsum("hckd,chd->chk", by_query[:, tokens], dq)
        b += torch.einsum("hjcd,chd->chj", by_key[:, :, tokens], dk)
    if layer.cap_slope is not None:
        a *= layer.cap_slope[:, tokens].transpose(0, 1)
        b *= layer.cap_slope[:, :, tokens].permute(2, 0, 1)
    to_i = layer.weights[:, :, tokens].permute(2, 0, 1)  # A[h, j, i] as [c, heads, query]
    from_i = layer.weights[:, tokens].transpose(0, 1) * a  # A[h, i, k] a_k as [c, heads, key]
    heads_i = layer.heads[:, tokens].transpose(0, 1)  # o_i [c, heads, d]
    v_i = layer.v[:, tokens].transpose(0, 1)
    row_i = torch.einsum("chk,hkd->chd", from_i, layer.v) - from_i.sum(-1, keepdim=True) * heads_i
    tangent = to_i[..., None] * (b[..., None] * (v_i[:, :, None] - layer.heads) + dv[:, :, None])  # [c, h, j, d]
    tangent[torch.arange(c, device=tokens.device), :, tokens] += row_i
    return tangent.permute(2, 0, 1, 3)


def _dense_tangent_heads(layer: _LayerAtInput, inputs: torch.Tensor) -> torch.Tensor:
    """Tangent of o(l) [n, c, heads, d] for a tangent of the layer input [n, c, hidden] (forward mode, written out)."""
    dq, dk, dv = _dense_qkv_tangents(layer, inputs)  # [n, c, heads, d]
    scores = torch.einsum("jchd,hkd->hcjk", dq, layer.k) + torch.einsum("hjd,kchd->hcjk", layer.q, dk)
    scores *= layer.scale
    if layer.relative is not None:
        by_query, by_key = layer.relative
        scores += torch.einsum("jchd,hjkd->hcjk", dq, by_query) + torch.einsum("kchd,hjkd->hcjk", dk, by_key)
    if layer.cap_slope is not None:
        scores *= layer.cap_slope[:, None]
    weights = layer.weights[:, None]  # [heads, 1, query, key]
    softmax = weights * (scores - (weights * scores).sum(-1, keepdim=True))
    return torch.einsum("hcjk,hkd->jchd", softmax, layer.v) + torch.einsum("hjk,kchd->jchd", layer.weights, dv)


def _direction_chunks(
    n: int, hidden: int, mode: str, probes: int, seed: int, chunk: int, device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Chunks of (input token i, direction vector in token i's hidden space [c, hidden])."""
    if mode == "exact":
        total, per_token = n * hidden, hidden
    else:
        total, per_token = n * probes, probes
        generator = torch.Generator().manual_seed(seed)
        probe_vectors = torch.randn(total, hidden, generator=generator).to(device)
    for start in range(0, total, chunk):
        index = torch.arange(start, min(start + chunk, total), device=device)
        if mode == "exact":
            vectors = torch.zeros(len(index), hidden, device=device)
            vectors[torch.arange(len(index)), index % hidden] = 1.0
        else:
            vectors = probe_vectors[index]
        yield index // per_token, vectors


def _plain_input_norms(
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


@dataclass
class _PositionWise:
    """A layer after self-attention, linearised at this input: r = x + N(o W^T) (N the identity, or Gemma's norm of
    the attention output), then e(l)_j = f(r_j) per token; or, with a parallel residual (GPT-NeoX), e(l)_j = r_j +
    g(x_j) - x_j, the per-token part reading the layer input."""

    projection_t: torch.Tensor  # W^T [heads * d, hidden]: the projection applied to the heads' outputs
    jacobian_t: torch.Tensor  # [n, hidden_in, hidden_out]: d f(r_j) / d r_j (parallel: d g(x_j) / d x_j), transposed
    attention_norm: _NormAt | None = None  # N: Gemma 2's and 3's norm of o W^T before the residual
    parallel: bool = False

    def tangent(self, heads: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """Tangent of e(l) [n, c, hidden] from those of the heads' outputs [n, c, heads * d] and of x [n, c, hidden]."""
        attention = heads @ self.projection_t
        if self.attention_norm is not None:
            attention = self.attention_norm.at((slice(None), None)).tangent(attention)
        if self.parallel:
            return attention + torch.bmm(inputs, self.jacobian_t)
        return torch.bmm(attention + inputs, self.jacobian_t)


@dataclass(eq=False)
class _Step:
    """One module call inside a layer: the module, its first input and its output."""

    module: torch.nn.Module
    input: torch.Tensor
    output: torch.Tensor


def _layer_steps(rec: Recording, index: int) -> tuple[list[_Step], torch.Tensor]:
    """Every module call inside layer `index`, in order, with the heads' outputs o(l) of that run."""
    steps: list[_Step] = []
    site, call = rec.layout.sites[index], rec.layers[index]
    n = call.hidden.shape[1]
    views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id -> (tensor, kept alive so ids stay unique; view)

    def per_token(t: torch.Tensor) -> torch.Tensor:
        """[n, width] as [1, n, width] (OPT runs its feed-forward on [batch * n, width]), one view per tensor so that
        `is` still tells which call read which output."""
        if t.dim() != 2 or t.shape[0] != n:
            return t
        return views.setdefault(id(t), (t, t[None]))[1]

    def keep(module, args, output):
        if args and isinstance(args[0], torch.Tensor) and isinstance(output, torch.Tensor):
            steps.append(_Step(module, per_token(args[0]), per_token(output)))

    inside = [m for m in site.layer.modules() if m is not site.layer]
    with hooked(inside, keep, after=True), captured_contexts(rec.layout, [index]) as seen:
        site.layer(*call.args, **call.kwargs)
    return steps, seen[-1][1]


def _ffn_jacobians(
    down_weight: torch.Tensor, slopes: torch.Tensor, up_weight: torch.Tensor, chunk: int
) -> torch.Tensor:
    """W2 diag(slope_j) W1 for every token j [n, out, in], a chunk of tokens at a time."""
    tokens_per_chunk = max(1, chunk // down_weight.numel())
    return torch.cat(
        [
            torch.matmul(down_weight * slopes[s : s + tokens_per_chunk, None, :], up_weight)
            for s in range(0, len(slopes), tokens_per_chunk)
        ]
    )


def _times_norm(jacobian: torch.Tensor, norm: _NormAt) -> torch.Tensor:
    """M J for per-token matrices M [n, out, hidden] (in place), J the LayerNorm's or RMSNorm's Jacobian per token:
    diag(gamma / sigma)(I - 1 1^T / hidden - x-hat x-hat^T / hidden), without the 1 1^T term for an RMSNorm."""
    jacobian.mul_(norm.scale[:, None, :])
    projected = (jacobian @ norm.hat[:, :, None]) * (norm.hat[:, None, :] / norm.hat.shape[-1])
    jacobian -= jacobian.mean(-1, keepdim=True) + projected if norm.centred else projected
    return jacobian


def _norm_times(norm: _NormAt, jacobian: torch.Tensor) -> torch.Tensor:
    """J M for per-token matrices M [n, hidden, in] (in place), J as in _times_norm."""
    projected = norm.hat[:, :, None] * ((norm.hat[:, None, :] / norm.hat.shape[-1]) @ jacobian)
    jacobian -= jacobian.mean(1, keepdim=True) + projected if norm.centred else projected
    return jacobian.mul_(norm.scale[:, :, None])


def _is_norm(module: torch.nn.Module) -> bool:
    """A LayerNorm, or a module that may be an RMSNorm (a weight of one dimension, not a linear map): _norm_at
    tells by its output."""
    weight = getattr(module, "weight", None)
    return _is_layer_norm(module) or (isinstance(weight, torch.Tensor) and weight.dim() == 1 and not is_linear(module))


def _position_wise(rec: Recording, index: int, chunk: int) -> _PositionWise | None:
    """Per-token Jacobians of the layer after its heads: e(l) = LN_b(y + W2 act(W1 y)), y = LN_a(r) post-LN (BERT),
    e(l) = r + N_f(W2 act(W1 LN_b(r))) pre-LN (the decoders, T5, ModernBERT; act(W1 y) is gated, act(a) * g, where W1
    gives a and g as one projection, as ModernBERT's and Phi-3's, or as two, as Llama's; N_f Gemma's norm of the
    feed-forward output, else the identity); r = x + N_a(o W^T), N_a Gemma's norm of the attention output, else the
    identity; a parallel residual (GPT-NeoX) reads x instead of r: e(l) = r + W2 act(W1 LN_b(x)). LN a LayerNorm or
    an RMSNorm, W a Linear or GPT-2's Conv1D.

    The norms' Jacobians are applied in their diagonal-minus-low-rank form. None when the layer is not laid out one
    of these ways (a feed-forward of another shape, norms elsewhere).
    """
    site = rec.layout.sites[index]
    steps, heads = _layer_steps(rec, index)
    post_ln = rec.layout.family.post_layer_norm
    x = rec.layers[index].hidden
    projection = next((s for s in steps if is_linear(s.module) and s.input is heads), None)
    if projection is None:
        return None
    attention, attention_norm = projection, None  # the call whose output the residual adds, and its norm
    if site.attention_norm is not None:
        normed = _call_reading(steps, site.attention_norm, projection.output)
        attention_norm = _norm_of(normed)
        if normed is None or attention_norm is None:
            return None
        attention = normed
    norm_a = next((s for s in _after(steps, attention) if _is_norm(s.module)), None)
    if norm_a is None:
        return None
    parallel = not post_ln and _same(norm_a.input, x)  # the feed-forward reads x, not r = x + attention
    if not parallel and not _same(norm_a.input, x + attention.output):
        return None
    feed_forward, at_a = _feed_forward(steps, norm_a, chunk), _norm_of(norm_a)
    if feed_forward is None or at_a is None:
        return None
    ffn, down = feed_forward  # W2 diag(act') W1 [n, out, in]
    if post_ln:  # LN_b (I + F) LN_a
        at_b = _norm_of(next((s for s in _after(steps, down) if _is_norm(s.module)), None))
        if at_b is None:
            return None
        ffn.diagonal(dim1=1, dim2=2).add_(1.0)
        jacobian = _norm_times(at_b, _times_norm(ffn, at_a))
    else:  # I + N_f F LN_b: here norm_a is the norm in front of the feed-forward block
        jacobian = _times_norm(ffn, at_a)
        if site.feed_forward_norm is not None:
            at_f = _norm_of(_call_reading(steps, site.feed_forward_norm, down.output))
            if at_f is None:
                return None
            jacobian = _norm_times(at_f, jacobian)
        jacobian.diagonal(dim1=1, dim2=2).add_(1.0)
    projection_t = linear_weight(projection.module).T.contiguous()
    return _PositionWise(projection_t, jacobian.transpose(1, 2).contiguous(), attention_norm, parallel)


def _after(steps: list[_Step], step: _Step) -> list[_Step]:
    """The module calls after this one."""
    return steps[steps.index(step) + 1 :]


def _norm_of(step: _Step | None) -> _NormAt | None:
    """The norm that this call ran, at its input (None for no call, or one _norm_at does not recognise)."""
    return None if step is None else _norm_at(step.module, step.input[0])


def _call_reading(steps: list[_Step], module: torch.nn.Module, x: torch.Tensor) -> _Step | None:
    """The call of this module on x, if any."""
    return next((s for s in steps if s.module is module and s.input is x), None)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two activations are the same up to float32 rounding of one addition."""
    return a.shape == b.shape and torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def _feed_forward(steps: list[_Step], norm: _Step, chunk: int) -> tuple[torch.Tensor, _Step] | None:
    """(W2 diag(act'(a)) W1 per token [n, out, in], W2's call) of the feed-forward reading the norm's output, gated
    (W2 [diag(act'(a) g) | diag(act(a))] W1, [a | g] = W1 y) where W1 is two projections or twice as wide as W2 reads;
    None when the calls after the norm are not one of these."""
    fed = [s for s in _after(steps, norm) if is_linear(s.module) and s.input is norm.output]  # W1: one or two
    if not fed or len(fed) > 2:
        return None
    down = next((s for s in _after(steps, fed[-1]) if is_linear(s.module)), None)
    if down is None:
        return None
    down_weight, up_weight = linear_weight(down.module), torch.cat([linear_weight(s.module) for s in fed])
    outputs = torch.cat([s.output[0] for s in fed], dim=-1)  # W1 y (+ b) [n, ffn or 2 ffn]
    gated = outputs.shape[-1] == 2 * down_weight.shape[1]
    a, g = outputs.chunk(2, dim=-1) if gated else (outputs, None)
    if len(fed) == 2 and not gated:
        return None

    def activation(a: torch.Tensor) -> _Step | None:
        return next((s for s in _after(steps, fed[0]) if not is_linear(s.module) and _reads(s, a)), None)

    act = activation(a)
    if act is None and g is not None and len(fed) == 2:  # the activation is on the second projection's output
        a, g, up_weight = g, a, up_weight.roll(-down_weight.shape[1], 0)
        act = activation(a)
    if act is None:
        return None
    slope = jvp(act.module, (a,), (torch.ones_like(a),))[1]  # act'(a) [n, ffn]
    if g is not None:
        slope = torch.cat([slope * g, act.output[0]], dim=-1)
        down_weight = torch.cat([down_weight, down_weight], dim=1)
    return _ffn_jacobians(down_weight, slope, up_weight, chunk), down


def _reads(step: _Step, x: torch.Tensor) -> bool:
    """Whether the module call read x [n, width] (its first input, batch of one)."""
    return step.input.shape[1:] == x.shape and torch.equal(step.input[0], x)


def _linearised_input_norms(
    layers: Sequence[_LayerAtInput], rest: Sequence[_PositionWise], directions: Iterator, with_output: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same sums as _plain_input_norms, with each layer's position-wise part applied as per-token matrices
    (without with_output the last layer stops at its heads and the layer-output sums stay zero)."""
    n_heads, n, d = layers[0].q.shape
    total = torch.zeros(n, len(layers), n, n_heads, device=layers[0].q.device)
    output_total = torch.zeros(n, len(layers), n, device=layers[0].q.device)
    for tokens, vectors in directions:
        c = len(tokens)
        inputs = None  # tangent of the layer input [n, c, hidden]; None while it is one row (the first layer)
        for l, layer in enumerate(layers):
            if inputs is None:
                heads = _row_tangent_heads(layer, tokens, vectors)
            else:
                heads = _dense_tangent_heads(layer, inputs)
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


def _previous_norms(layers: Sequence[_LayerAtInput], directions: Iterator) -> torch.Tensor:
    """Sum over token i's directions v of ||d o(l,h)_j / d e(l-1)_i . v||^2 (the layer alone), as [i, l, j, h]."""
    n_heads, n, _ = layers[0].q.shape
    total = torch.zeros(n, len(layers), n, n_heads, device=layers[0].q.device)
    for tokens, vectors in directions:
        for l, layer in enumerate(layers):
            heads = _row_tangent_heads(layer, tokens, vectors)
            total[:, l].index_add_(0, tokens, heads.square().sum(-1).transpose(0, 1))
    return total


def _normalise(squared: torch.Tensor) -> np.ndarray:
    """[i, layers, j, heads] squared norms -> [layers, heads, j, i] Frobenius norms divided by their sum over i."""
    norms = squared.clamp_min(0).sqrt().permute(1, 3, 2, 0)
    sums = norms.sum(-1, keepdim=True)
    return (norms / torch.where(sums > 0, sums, torch.ones_like(sums))).cpu().numpy().astype(np.float32)


def _normalise_outputs(squared: torch.Tensor) -> np.ndarray:
    """[i, layers, j] squared norms -> [layers, j, i] Frobenius norms divided by their sum over i."""
    return _normalise(squared[..., None])[:, 0]


def default_chunk(n: int, hidden: int, widest: int, n_heads: int) -> int:
    """Directions per vmap chunk so that the widest activation of a chunk stays near CHUNK_BUDGET floats."""
    per_direction = n * max(widest, n_heads * n, hidden)
    return int(max(8, min(1024, CHUNK_BUDGET // per_direction)))


def _widest_activation(encoder: torch.nn.Module, hidden: int) -> int:
    """The widest Linear output in the encoder (the feed-forward size)."""
    return max([m.out_features for m in encoder.modules() if isinstance(m, torch.nn.Linear)] + [hidden])


def _jacobians_fit(n: int, hidden: int, n_layers: int) -> bool:
    """Whether every layer's per-token Jacobians (n * hidden^2 floats each) fit in LINEARISED_BUDGET."""
    return n_layers * n * hidden * hidden <= LINEARISED_BUDGET


def _relative_terms_fit(lay: Layout, n: int, hidden: int) -> bool:
    """Whether every layer's DeBERTa terms P_K and P_Q (n^2 * hidden floats each) fit in LINEARISED_BUDGET."""
    return lay.family.scores != "disentangled" or len(lay.sites) * 2 * n * n * hidden <= LINEARISED_BUDGET


def _linearise(rec: Recording, chunk: int) -> list[_PositionWise] | None:
    """The position-wise part of every layer, or None where one cannot be linearised."""
    rest = []
    for index in range(rec.n_layers):
        part = _position_wise(rec, index, chunk)
        if part is None:
            return None
        rest.append(part)
    return rest


def _agrees_with_model(
    fn: Callable,
    e0: torch.Tensor,
    layers: Sequence[_LayerAtInput],
    rest: Sequence[_PositionWise],
    n_heads: int,
    with_output: bool,
) -> bool:
    """Whether the linearised layers give what the model's own layers give, on two random directions."""
    _, n, hidden = e0.shape
    generator = torch.Generator().manual_seed(DEFAULT_SEED)
    sample = [(torch.tensor([0, n - 1], device=e0.device), torch.randn(2, hidden, generator=generator).to(e0.device))]
    plain = _plain_input_norms(fn, e0, n_heads, iter(sample))
    linearised = _linearised_input_norms(layers, rest, iter(sample), with_output)
    return all(
        bool(torch.allclose(lin, ref, rtol=1e-3, atol=1e-5 * float(ref.abs().max())))
        for lin, ref in zip(linearised, plain)
    )


def _previous_agrees_with_model(rec: Recording, layers: Sequence[_LayerAtInput], n_heads: int) -> bool:
    """Whether each written-out layer gives what jvp through its own attention block gives, on two random
    directions (the previous-layer contribution reads the written-out layers alone)."""
    n, hidden = layers[0].q.shape[1], rec.layers[0].hidden.shape[-1]
    device = layers[0].q.device
    generator = torch.Generator().manual_seed(DEFAULT_SEED)
    sample = [(torch.tensor([0, n - 1], device=device), torch.randn(2, hidden, generator=generator).to(device))]
    for l, layer in enumerate(layers):
        written = _previous_norms([layer], iter(sample))
        plain = _plain_input_norms(_block_heads_function(rec, l), rec.layers[l].hidden, n_heads, iter(sample))[0]
        if not torch.allclose(written, plain, rtol=1e-3, atol=1e-5 * float(plain.abs().max())):
            return False
    return True


@contextlib.contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Dropout off for the duration, whatever the module's mode was."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def hidden_token_attribution(
    lm: LoadedModel,
    encoded: Encoded,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
    chunk_size: int | None = None,
    linearise: bool = True,
    with_output: bool = False,
) -> Attribution:
    """Input and previous-layer contribution of every token to every head's output at every position (METHODS §9),
    and with_output, input contribution to every layer's output (§13, Attribution.output), from the same tangents.

    linearise=False pushes every direction through the model's own layers (slower, same numbers)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "estimate" and probes < 1:
        raise ValueError("probes must be at least 1")
    encoder = lm.encoder
    reason = unsupported_reason(encoder.config, "hta")
    if reason is not None:
        raise UnsupportedModelError(reason)
    f = lm.facts
    n, hidden = encoded.n, f.hidden_size
    batch = model_inputs(lm, [encoded])
    widest = _widest_activation(encoder, hidden)
    through_model, through_rows, through_layers = (
        chunk_size or default_chunk(n, hidden, width, f.n_heads) for width in (widest, hidden, 3 * hidden)
    )

    def directions(chunk: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return _direction_chunks(n, hidden, mode, probes, seed, chunk, lm.device)

    with _eval_mode(encoder), torch.no_grad():
        rec = record(lm, batch, "hta")
        lay = rec.layout
        everything = _all_heads_function(rec, with_output)
        e0 = rec.layers[0].hidden
        head_outputs, _ = everything(e0)  # [layers, 1, n, hidden], also checks the layer loop runs
        layers: list[_LayerAtInput] | None = None
        if linearise and _relative_terms_fit(lay, n, hidden):
            found = [
                _layer_at_input(lay, site, rec.heads[l], rec.layers[l].hidden, head_outputs[l, 0])
                for l, site in enumerate(lay.sites)
            ]
            layers = None if any(layer is None for layer in found) else found  # type: ignore[assignment]
        if layers is not None and not _previous_agrees_with_model(rec, layers, f.n_heads):
            layers = None
        if layers is not None:
            previous_sq = _previous_norms(layers, directions(through_rows))
        else:
            previous_sq = torch.cat(
                [
                    _plain_input_norms(
                        _block_heads_function(rec, l), rec.layers[l].hidden, f.n_heads, directions(through_model)
                    )[0]
                    for l in range(rec.n_layers)
                ],
                dim=1,
            )
        fits = layers is not None and _jacobians_fit(n, hidden, rec.n_layers) and lay.after_first_layer is None
        rest = _linearise(rec, CHUNK_BUDGET) if fits else None
        if (
            layers is not None
            and rest is not None
            and _agrees_with_model(everything, e0, layers, rest, f.n_heads, with_output)
        ):
            input_sq, output_sq = _linearised_input_norms(layers, rest, directions(through_layers), with_output)
        else:
            input_sq, output_sq = _plain_input_norms(everything, e0, f.n_heads, directions(through_model))
    return Attribution(
        tokens=list(encoded.tokens),
        input=_normalise(input_sq),
        previous=_normalise(previous_sq),
        mode=mode,
        probes=probes if mode == "estimate" else None,
        output=_normalise_outputs(output_sq) if with_output else None,
    )


def attribute(
    lm: LoadedModel,
    text_a: TextOrWords,
    text_b: TextOrWords | None = None,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
    with_output: bool = False,
) -> Attribution:
    """Tokenize a sentence or pair and attribute it (see hidden_token_attribution)."""
    encoded = encode(lm, text_a, text_b)
    return hidden_token_attribution(lm, encoded, mode=mode, probes=probes, seed=seed, with_output=with_output)


# ------------------------------------------------------------------------------------------ cost of an exact run

from attnlib.core.model import ModelFacts  # noqa: E402  (this section is appended; the file's imports are edited elsewhere)

EXACT_SECONDS_AT_34_TOKENS = 32.0  # benchmarks/bench_hta.py: the default model (hidden 384, 6 layers) on 2 CPU cores


def exact_seconds(facts: ModelFacts, n_tokens: int) -> float:
    """Rough time of an exact attribution on 2 CPU cores: n * hidden directions, each ~ n * hidden^2 * layers."""
    return EXACT_SECONDS_AT_34_TOKENS * (n_tokens / 34) ** 2 * (facts.hidden_size / 384) ** 3 * facts.n_layers / 6


# ------------------------------------------------------------------------------------------ sampled query rows (§19)


@dataclass
class RowAttribution:
    """Hidden Token Attribution of some query rows only (METHODS §19), each row normalised over the input tokens."""

    rows: np.ndarray  # [m] the query rows j, ascending
    input: np.ndarray  # [layers, heads, m, input token i]: C(e0_i, o(l,h)_j) for j = rows
    previous: np.ndarray  # [layers, heads, m, input token i]: C(e(l-1)_i, o(l,h)_j)
    mode: str
    probes: int | None


def _heads_from_input(rec: Recording, index: int) -> Callable:
    """e0 -> o(l) [1, n, hidden] of layer `index`, running the layers below it and its attention block."""

    def heads(e0: torch.Tensor) -> torch.Tensor:
        h = rec.replay(e0, 0, index)
        with captured_contexts(rec.layout, [index]) as seen:
            rec.replay_block(index, h)
        return seen[-1][1]

    return heads


def _heads_from_layer_input(rec: Recording, index: int) -> Callable:
    """e(l-1) -> o(l) [1, n, hidden] through layer `index`'s attention block alone."""

    def heads(x: torch.Tensor) -> torch.Tensor:
        with captured_contexts(rec.layout, [index]) as seen:
            rec.replay_block(index, x)
        return seen[-1][1]

    return heads


def _row_squared_norms(fn: Callable, x: torch.Tensor, rows: torch.Tensor, n_heads: int, mode: str, probes: int,
                       generator: torch.Generator, chunk: int, done: Callable[[int], None] | None = None,
                       ) -> torch.Tensor:  # fmt: skip
    """[heads, m, i]: ||d o(l,h)_j / d x_i||_F^2 for j = rows[r] (estimate mode: its probe estimate), where
    fn(x) = o(l) [1, n, heads * d] and x holds n * hidden numbers; pull-backs travel `chunk` at a time.

    Pull-back c is row c // (heads * k), head (c // k) % heads and coordinate or probe c % k (k = d in exact mode);
    done(pull-backs) after each chunk."""
    out, pull = vjp(fn, x)
    _, n, width = out.shape
    d = width // n_heads
    per = d if mode == "exact" else probes
    pulled = vmap(pull)
    total = torch.zeros(n_heads, len(rows), n, device=x.device)
    count = len(rows) * n_heads * per
    for start in range(0, count, chunk):
        c = torch.arange(start, min(start + chunk, count), device=x.device)
        row, head, e = c // (n_heads * per), (c // per) % n_heads, c % per
        if mode == "exact":
            values = torch.nn.functional.one_hot(e, d).to(out.dtype)
        else:
            values = torch.randn(len(c), d, generator=generator).to(x.device)
        cot = torch.zeros(len(c), 1, n, width, device=x.device)
        cot[torch.arange(len(c))[:, None], 0, rows[row][:, None], head[:, None] * d + torch.arange(d)] = values
        (grads,) = pulled(cot)
        total.index_put_((head, row), grads.reshape(len(c), n, -1).square().sum(-1), accumulate=True)
        if done is not None:
            done(len(c))
    return total if mode == "exact" else total / probes


def _linearised_heads_function(layers: Sequence[_LayerAtInput], rest: Sequence[_PositionWise], index: int) -> Callable:
    """A tangent of e0 [n, 1, hidden] -> the tangent of o(l) [n, 1, heads, d] of layer `index`, through the
    linearised layers below it (the same arithmetic as _linearised_input_norms, for a dense tangent)."""

    def heads(tangent: torch.Tensor) -> torch.Tensor:
        inputs = tangent
        n, c, _ = tangent.shape
        for l in range(index):
            inputs = rest[l].tangent(_dense_tangent_heads(layers[l], inputs).reshape(n, c, -1), inputs)
        return _dense_tangent_heads(layers[index], inputs)

    return heads


def _linearised_row_norms(layers, rest, index: int, rows: torch.Tensor, mode: str, probes: int, generator,
                          chunk: int, done: Callable[[int], None] | None = None) -> torch.Tensor:  # fmt: skip
    """_row_squared_norms through the linearised layers: the pull-back of the tangent map, which is linear."""
    n_heads, n, d = layers[0].q.shape
    fn = _linearised_heads_function(layers, rest, index)
    zero = torch.zeros(n, 1, layers[0].qkv_t.shape[0], device=layers[0].q.device)
    return _row_squared_norms(lambda t: fn(t).reshape(1, n, n_heads * d), zero, rows, n_heads, mode, probes,
                              generator, chunk, done)  # fmt: skip


@dataclass
class _Tally:
    """Counts the pull-back work of row_attribution: progress after every chunk, the estimate after the first."""

    total: int  # pull-backs times the layers each goes through
    setup: float  # seconds spent before the first pull-back
    progress: Callable[[int, int], None] | None
    estimate: Callable[[float], None] | None
    depth: int = 1  # layers the current pull-backs go through
    done: int = 0
    started: float = field(default_factory=time.perf_counter)

    def __call__(self, pulled: int) -> None:
        first = self.done == 0
        self.done += pulled * self.depth
        if first and self.estimate is not None:
            per_unit = (time.perf_counter() - self.started) / self.done
            self.estimate(self.setup + per_unit * self.total)
        if self.progress is not None:
            self.progress(self.done, self.total)

    def finish(self) -> None:
        """Nothing to pull back (the first layer alone): the estimate is what it took."""
        if self.total == 0 and self.estimate is not None:
            self.estimate(self.setup)


def row_chunk(n: int, n_heads: int) -> int:
    """Pull-backs per vmap chunk so that one chunk's score tangents (heads x n^2 floats each) stay near
    CHUNK_BUDGET * 4 floats."""
    return int(max(1, min(256, 4 * CHUNK_BUDGET // (n_heads * n * n))))


def row_attribution(
    lm: LoadedModel,
    encoded: Encoded,
    rows: Sequence[int] | np.ndarray,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
    chunk_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    linearise: bool = True,
    estimate: Callable[[float], None] | None = None,
) -> RowAttribution:
    """Input and previous-layer contribution (METHODS §9) of the given query rows only.

    Previous-layer contribution (and the input contribution of the first layer, the same thing) comes from the
    forward-mode row tangents of hidden_token_attribution, which cost little for every row; the input contribution of
    the later layers by reverse mode, one pull-back per row, head and output coordinate (exact) or per row, head and
    probe (estimate: k standard-normal probes u of the head's output, ||J||_F^2 ~ (1/k) sum_p ||u_p^T J||^2), through
    the linearised layers where they reproduce the model, else through the model's own layers.

    The pull-backs run from the last layer down; the first chunk's time calibrates estimate(seconds), told once, of
    the whole call; progress(done, total) after every chunk, in pull-backs times the layers each goes through."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    reason = unsupported_reason(lm.encoder.config, "hta")
    if reason is not None:
        raise UnsupportedModelError(reason)
    f = lm.facts
    n, hidden = encoded.n, f.hidden_size
    index = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=lm.device)
    generator = torch.Generator().manual_seed(seed)
    chunk = chunk_size or row_chunk(n, f.n_heads)
    batch = model_inputs(lm, [encoded])
    started = time.perf_counter()
    with _eval_mode(lm.encoder), torch.no_grad():
        rec = record(lm, batch, "hta")
        lay = rec.layout
        e0 = rec.layers[0].hidden
        head_outputs, _ = _all_heads_function(rec, False)(e0)
        layers: list[_LayerAtInput] | None = None
        if linearise and _relative_terms_fit(lay, n, hidden):
            found = [
                _layer_at_input(lay, site, rec.heads[l], rec.layers[l].hidden, head_outputs[l, 0])
                for l, site in enumerate(lay.sites)
            ]
            layers = None if any(layer is None for layer in found) else found  # type: ignore[assignment]
        fits = layers is not None and _jacobians_fit(n, hidden, rec.n_layers) and lay.after_first_layer is None
        rest = _linearise(rec, CHUNK_BUDGET) if fits else None
        if (
            layers is not None
            and rest is not None
            and not _agrees_with_model(_all_heads_function(rec, False), e0, layers, rest, f.n_heads, False)
        ):
            rest = None
        if layers is not None:
            # one row tangent is [n, heads, d]: a chunk of them within CHUNK_BUDGET floats
            row_tangents = int(max(8, min(1024, CHUNK_BUDGET // (n * hidden))))
            directions = _direction_chunks(n, hidden, mode, probes, seed, row_tangents, lm.device)
            previous = _previous_norms(layers, directions)[:, :, index].permute(1, 3, 2, 0)  # [layers, heads, m, i]
        else:
            previous = torch.stack(
                [
                    _row_squared_norms(
                        _heads_from_layer_input(rec, l),
                        rec.layers[l].hidden,
                        index,
                        f.n_heads,
                        mode,
                        probes,
                        generator,
                        chunk,
                    )
                    for l in range(rec.n_layers)
                ]
            )
        per_row = f.n_heads * (f.head_dim if mode == "exact" else probes)
        total = sum(len(index) * per_row * (l + 1) for l in range(1, rec.n_layers))
        tally = _Tally(total, time.perf_counter() - started, progress, estimate)
        inputs: list[torch.Tensor] = [previous[0]] * rec.n_layers
        for l in reversed(range(1, rec.n_layers)):
            tally.depth = l + 1
            if layers is not None and rest is not None:
                inputs[l] = _linearised_row_norms(layers, rest, l, index, mode, probes, generator, chunk, tally)
            else:
                inputs[l] = _row_squared_norms(_heads_from_input(rec, l), e0, index, f.n_heads, mode, probes,
                                               generator, chunk, tally)  # fmt: skip
        tally.finish()
    return RowAttribution(
        rows=index.cpu().numpy(),
        input=_normalise(torch.stack(inputs).permute(3, 0, 2, 1)),
        previous=_normalise(previous.permute(3, 0, 2, 1)),
        mode=mode,
        probes=probes if mode == "estimate" else None,
    )
