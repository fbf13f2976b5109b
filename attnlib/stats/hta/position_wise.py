"""The rest of a layer after its heads, linearised at this input: the attention output's projection, the residual,
the norms and the feed-forward act on each token alone, so they become one Jacobian per token, read off the module
calls the layer makes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import jvp

from attnlib.core.families import is_linear, linear_weight
from attnlib.core.hooks import hooked
from attnlib.core.replay import Recording, captured_contexts
from attnlib.stats.hta.norms import NormAt, is_norm, norm_at, norm_times, times_norm


@dataclass
class PositionWise:
    """A layer after self-attention, linearised at this input: r = x + N(o W^T) (N the identity, or Gemma's norm of
    the attention output), then e(l)_j = f(r_j) per token; or, with a parallel residual (GPT-NeoX), e(l)_j = r_j +
    g(x_j) - x_j, the per-token part reading the layer input."""

    projection_t: torch.Tensor  # W^T [heads * d, hidden]: the projection applied to the heads' outputs
    jacobian_t: torch.Tensor  # [n, hidden_in, hidden_out]: d f(r_j) / d r_j (parallel: d g(x_j) / d x_j), transposed
    attention_norm: NormAt | None = None  # N: Gemma 2's and 3's norm of o W^T before the residual
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


def _position_wise(rec: Recording, index: int, chunk: int) -> PositionWise | None:
    """Per-token Jacobians of the layer after its heads: e(l) = LN_b(y + W2 act(W1 y)), y = LN_a(r) post-LN (BERT),
    e(l) = r + N_f(W2 act(W1 LN_b(r))) pre-LN (the decoders, T5, ModernBERT; act(W1 y) is gated, act(a) * g, where W1
    gives a and g as one projection, as ModernBERT's and Phi-3's, or as two, as Llama's; N_f Gemma's norm of the
    feed-forward output, else the identity); r = x + N_a(o W^T), N_a Gemma's norm of the attention output, else the
    identity; a parallel residual (GPT-NeoX) reads x instead of r: e(l) = r + W2 act(W1 LN_b(x)); a family without a
    norm before attention (OLMo 2) has none before the feed-forward either: LN_b is the identity. LN a LayerNorm or an
    RMSNorm, W a Linear or GPT-2's Conv1D.

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
    if rec.layout.family.norm is None:  # the feed-forward reads r itself: an identity step in front of its first call
        norm_a = _unnormed_input(steps, attention, x + attention.output)
    else:
        norm_a = next((s for s in _after(steps, attention) if is_norm(s.module)), None)
    if norm_a is None:
        return None
    parallel = not post_ln and _same(norm_a.input, x)  # the feed-forward reads x, not r = x + attention
    if not parallel and not _same(norm_a.input, x + attention.output):
        return None
    feed_forward = _feed_forward(steps, norm_a, chunk)
    at_a = None if isinstance(norm_a.module, torch.nn.Identity) else _norm_of(norm_a)
    if feed_forward is None or (at_a is None and not isinstance(norm_a.module, torch.nn.Identity)):
        return None
    ffn, down = feed_forward  # W2 diag(act') W1 [n, out, in]
    if post_ln:  # LN_b (I + F) LN_a
        at_b = _norm_of(next((s for s in _after(steps, down) if is_norm(s.module)), None))
        if at_b is None or at_a is None:
            return None
        ffn.diagonal(dim1=1, dim2=2).add_(1.0)
        jacobian = norm_times(at_b, times_norm(ffn, at_a))
    else:  # I + N_f F LN_b: here norm_a is the norm in front of the feed-forward block
        jacobian = ffn if at_a is None else times_norm(ffn, at_a)
        if site.feed_forward_norm is not None:
            at_f = _norm_of(_call_reading(steps, site.feed_forward_norm, down.output))
            if at_f is None:
                return None
            jacobian = norm_times(at_f, jacobian)
        jacobian.diagonal(dim1=1, dim2=2).add_(1.0)
    projection_t = linear_weight(projection.module).T.contiguous()
    return PositionWise(projection_t, jacobian.transpose(1, 2).contiguous(), attention_norm, parallel)


def _after(steps: list[_Step], step: _Step) -> list[_Step]:
    """The module calls after this one."""
    return steps[steps.index(step) + 1 :]


def _unnormed_input(steps: list[_Step], attention: _Step, r: torch.Tensor) -> _Step | None:
    """An identity step put in front of the first linear call after the attention output that reads r = x + attention
    (a feed-forward without a norm before it), its output that call's own input; None when no call reads r."""
    reader = next((s for s in _after(steps, attention) if is_linear(s.module) and _same(s.input, r)), None)
    if reader is None:
        return None
    step = _Step(torch.nn.Identity(), reader.input, reader.input)
    steps.insert(steps.index(reader), step)
    return step


def _norm_of(step: _Step | None) -> NormAt | None:
    """The norm that this call ran, at its input (None for no call, or one norm_at does not recognise)."""
    return None if step is None else norm_at(step.module, step.input[0])


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


def position_wise_parts(rec: Recording, chunk: int) -> list[PositionWise] | None:
    """The position-wise part of every layer, or None where one cannot be linearised."""
    rest = []
    for index in range(rec.n_layers):
        part = _position_wise(rec, index, chunk)
        if part is None:
            return None
        rest.append(part)
    return rest
