"""Self-attention linearised at this input: each layer's heads recomputed from its own projections and the family's
score terms (rotary's rotation per position, norms of q and k per head or over the whole projection, DeBERTa's relative terms, Gemma 2's soft-cap,
a pre-LN norm), and the forward-mode tangent of softmax(logits) v written out, for one-row and for dense tangents."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlib.core.families import HeadsCall, LayerSite, Layout, linear_weight
from attnlib.stats.hta.norms import NormAt, norm_at


@dataclass
class LayerAtInput:
    """One layer's self-attention at this input (per head [heads, n, d] or [heads, n, n]) and how a tangent of the
    layer input moves its queries, keys, values and scores."""

    qkv_t: torch.Tensor  # [hidden, 3 * heads * d]: the projections' weights, transposed, columns as (q|k|v, head, d)
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    weights: torch.Tensor  # attention A [heads, n, n]
    heads: torch.Tensor  # o(l) [heads, n, d]
    scale: float
    qk_norms: tuple[NormAt | _WholeProjection | None, ...]  # q, k, v: a norm before rotary, stats [n, heads, d] per
    # head (Qwen3, Gemma 3) or [n, heads * d] over the whole projection (OLMo 2)
    rotations: tuple[_PairRotation | None, ...]  # q, k, v: rotary's map per position, or None
    relative: tuple[torch.Tensor, torch.Tensor] | None  # DeBERTa: logit terms per (i, k) linear in q_i and in k_k
    norm: NormAt | None  # pre-LN: the LayerNorm or RMSNorm before it
    cap_slope: torch.Tensor | None  # soft-capped logits c tanh(s / c) (Gemma 2): their slope in s [heads, n, n]


@dataclass
class _WholeProjection:
    """A norm over a whole projection (OLMo 2's q_norm and k_norm: every head's d together, before the split), its
    stats [n, heads * d] in the split's column order (a grouped-query key head repeated for each query head that reads
    it: the mean over the repeats is the projection's own)."""

    norm: NormAt

    def at(self, index) -> _WholeProjection:
        return _WholeProjection(self.norm.at(index))

    def tangent(self, tangent: torch.Tensor) -> torch.Tensor:
        """The Jacobian applied to tangents [..., heads, d]."""
        return self.norm.tangent(tangent.flatten(-2)).unflatten(-1, tangent.shape[-2:])


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


def pair_rotation(matrices: torch.Tensor) -> _PairRotation | None:
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
        pair = pair_rotation(matrices)
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


def layer_at_input(
    lay: Layout, site: LayerSite, call: HeadsCall, layer_input: torch.Tensor, expected: torch.Tensor
) -> LayerAtInput | None:
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
    norm = None if lay.family.post_layer_norm else norm_at(site.norm, layer_input[0])
    relative = _relative_terms(lay, call, n, scale)
    return LayerAtInput(qkv_t, q, k, v, weights, heads, scale, qk_norms, rotations, relative, norm, cap_slope)


def _qk_norms_at(
    lay: Layout, site: LayerSite, outputs: list[torch.Tensor]
) -> tuple[NormAt | _WholeProjection | None, ...] | None:
    """The family's norms of q and k (none of v) at the projections' outputs, stats [n, heads, d] per head, or over the
    whole projection in the split's columns; None when one is not a norm that norm_at recognises."""
    modules = lay.family.qk_norms(site.heads)
    if modules is None:
        return (None, None, None)
    if lay.family.qk_norm_over == "projection":
        q_at, k_at = (norm_at(module, t[0]) for module, t in zip(modules, outputs))  # stats [n, width] of q, of k
        if q_at is None or k_at is None:
            return None
        whole = (q_at, k_at)
        n, order = outputs[0].shape[1], _column_order(lay, site)

        def in_split(stat: str) -> list[torch.Tensor]:
            columns = torch.cat([getattr(w, stat) for w in whole] + [torch.ones_like(t[0]) for t in outputs[2:]], -1)
            return list(columns[:, order].reshape(n, 3, -1).unbind(1))

        scales, hats = in_split("scale"), in_split("hat")
        return (*(_WholeProjection(NormAt(scales[i], hats[i], whole[i].centred)) for i in range(2)), None)
    raw = lay.family.split(site.heads, outputs, lay.head_dim)  # [1, heads, n, d] each
    found = [norm_at(module, t[0].transpose(0, 1)) for module, t in zip(modules, raw)]
    return None if any(f is None for f in found) else (*found, None)


def _row_qkv_tangents(layer: LayerAtInput, tokens: torch.Tensor, vectors: torch.Tensor) -> list[torch.Tensor]:
    """dq, dk, dv [c, heads, d] when layer input row tokens[p] moves along vectors[p] [c, hidden]."""
    if layer.norm is not None:
        vectors = layer.norm.at(tokens).tangent(vectors)
    n_heads, _, d = layer.q.shape
    raw = (vectors @ layer.qkv_t).reshape(len(tokens), 3, n_heads, d).unbind(1)
    normed = [t if m is None else m.at(tokens).tangent(t) for t, m in zip(raw, layer.qk_norms)]
    return [t if r is None else r.rows(t, tokens) for t, r in zip(normed, layer.rotations)]


def _dense_qkv_tangents(layer: LayerAtInput, inputs: torch.Tensor) -> list[torch.Tensor]:
    """dq, dk, dv [n, c, heads, d] for a tangent of the layer input [n, c, hidden]."""
    if layer.norm is not None:
        inputs = layer.norm.at((slice(None), None)).tangent(inputs)
    n_heads, n, d = layer.q.shape
    raw = (inputs @ layer.qkv_t).reshape(n, -1, 3, n_heads, d).unbind(2)
    normed = [t if m is None else m.at((slice(None), None)).tangent(t) for t, m in zip(raw, layer.qk_norms)]
    return [t if r is None else r.dense(t) for t, r in zip(normed, layer.rotations)]


def row_tangent_heads(layer: LayerAtInput, tokens: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
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


def dense_tangent_heads(layer: LayerAtInput, inputs: torch.Tensor) -> torch.Tensor:
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
