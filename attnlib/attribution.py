"""Hidden Token Attribution per head (METHODS §9): how much each token feeds each head's output.

Exact mode pushes one forward-mode derivative per input coordinate through the model (torch.func.jvp
under torch.func.vmap, in chunks of directions), which gives every layer and head at once. Estimate
mode pushes k random standard-normal probes per input token instead: ||J||_F^2 ~ (1/k) sum_p ||J v_p||^2.
The input contribution runs the model's own layers; the previous-layer contribution differentiates each layer's
own self-attention (its query/key/value projections and scaled dot-product attention, checked against the
module's output) with respect to that layer's input, one token row at a time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Literal, Sequence

import numpy as np
import torch
from torch.func import jvp, vmap

from .model import LoadedModel
from .runner import KEY_NAMES, QUERY_NAMES, Encoded, TextOrWords, _model_inputs, encode, this_thread_only

Mode = Literal["exact", "estimate"]
MODES: tuple[str, ...] = ("exact", "estimate")
DEFAULT_PROBES = 12  # benchmarks/bench_hta.py: Pearson >= 0.99 with exact mode at about 30x its speed
DEFAULT_SEED = 0
VALUE_NAMES = ("value", "v_lin", "v_proj", "value_proj")
OUT_PROJECTION_NAMES = ("out_lin", "o_proj", "out_proj")
CHUNK_BUDGET = 4_000_000  # floats in the widest activation of one chunk of directions (about 16 MB)


@dataclass
class Attribution:
    """Per-head contributions, each row normalised to sum 1 over the input tokens."""

    tokens: list[str]
    input: np.ndarray  # [layers, heads, query j, input token i]: C(e0_i, o(l,h)_j)
    previous: np.ndarray  # [layers, heads, query j, input token i]: C(e(l-1)_i, o(l,h)_j)
    mode: str
    probes: int | None  # k in estimate mode, None in exact mode


@dataclass
class AttentionSite:
    """Where one layer computes its heads: the layer, its self-attention module, and that module's output projection."""

    layer: torch.nn.Module
    attention: torch.nn.Module  # owns the query projection; its hidden-state input is the layer's input
    projection: torch.nn.Module | None  # output projection inside `attention` (DistilBERT); None when outside (BERT)


@dataclass
class _Call:
    """The arguments of one module call captured in a plain forward pass, and its hidden-state input."""

    args: tuple
    kwargs: dict
    hidden: torch.Tensor

    def with_hidden(self, x: torch.Tensor) -> tuple[tuple, dict]:
        """The same arguments with the hidden-state input (wherever it was passed) replaced by x."""
        args = tuple(x if a is self.hidden else a for a in self.args)
        kwargs = {k: x if v is self.hidden else v for k, v in self.kwargs.items()}
        return args, kwargs


def attention_sites(encoder: torch.nn.Module) -> list[AttentionSite]:
    """Each layer's self-attention module (the one owning the query projection), in layer order."""
    attentions = [
        m for m in encoder.modules()
        if any(isinstance(getattr(m, name, None), torch.nn.Linear) for name in QUERY_NAMES)
    ]
    layer_list = next(
        (m for m in encoder.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == len(attentions)
         and all(any(a is s for s in layer.modules()) for layer, a in zip(m, attentions))),
        None,
    )
    if not attentions or layer_list is None:
        raise ValueError("Cannot find one self-attention module per layer in this encoder.")
    sites = []
    for layer, attention in zip(layer_list, attentions):
        projection = next((getattr(attention, name) for name in OUT_PROJECTION_NAMES
                           if isinstance(getattr(attention, name, None), torch.nn.Linear)), None)
        sites.append(AttentionSite(layer, attention, projection))
    return sites


class _HeadTap:
    """Collects o(l,h) for all heads of the given sites, [batch, n, heads * head_dim], in call order."""

    def __init__(self, sites: Sequence[AttentionSite]):
        self.sites = sites
        self.outputs: list[torch.Tensor] = []
        self._hooks: list = []

    def __enter__(self) -> "_HeadTap":
        for site in self.sites:
            if site.projection is not None:
                self._hooks.append(site.projection.register_forward_pre_hook(this_thread_only(
                    lambda _m, args: self.outputs.append(args[0]))))
            else:
                self._hooks.append(site.attention.register_forward_hook(this_thread_only(
                    lambda _m, _args, out: self.outputs.append(out[0] if isinstance(out, tuple) else out))))
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()


def _capture_calls(lm: LoadedModel, sites: Sequence[AttentionSite], batch: dict) -> tuple[list[_Call], list[_Call]]:
    """Run the encoder once and record how every layer and every self-attention module is called."""
    layer_calls: list[_Call] = []
    attention_calls: list[_Call] = []

    def recorder(calls: list[_Call]):
        def hook(_module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            calls.append(_Call(args, dict(kwargs), hidden))
        return hook

    hooks = [s.layer.register_forward_pre_hook(this_thread_only(recorder(layer_calls)), with_kwargs=True) for s in sites]
    hooks += [s.attention.register_forward_pre_hook(this_thread_only(recorder(attention_calls)), with_kwargs=True)
              for s in sites]
    try:
        with torch.no_grad():
            lm.encoder(**batch)
    finally:
        for hook in hooks:
            hook.remove()
    for layer_call, attention_call in zip(layer_calls, attention_calls):
        if not torch.equal(layer_call.hidden, attention_call.hidden):
            raise ValueError("This encoder transforms a layer's input before self-attention (pre-LayerNorm?); "
                             "only BERT-style post-LayerNorm encoders are supported.")
    return layer_calls, attention_calls


def _all_heads_function(sites: Sequence[AttentionSite], layer_calls: Sequence[_Call], last_attention: _Call) -> Callable:
    """e0 -> o(l) of every layer [layers, 1, n, hidden], running the layers themselves (the last one only up to o)."""

    def heads_of_every_layer(e0: torch.Tensor) -> torch.Tensor:
        h = e0
        with _HeadTap(sites) as tap:
            for site, call in zip(sites[:-1], layer_calls[:-1]):
                args, kwargs = call.with_hidden(h)
                out = site.layer(*args, **kwargs)
                h = out[0] if isinstance(out, tuple) else out
            last = sites[-1]
            args, kwargs = last_attention.with_hidden(h)
            last.attention(*args, **kwargs)
        return torch.stack(tap.outputs)

    return heads_of_every_layer


def _linear(module: torch.nn.Module, names: Sequence[str]) -> torch.nn.Linear:
    """The module's projection with one of these names."""
    for name in names:
        if isinstance(getattr(module, name, None), torch.nn.Linear):
            return getattr(module, name)
    raise ValueError(f"{type(module).__name__} has no projection named one of {names}.")


def _check_no_mask(call: _Call) -> None:
    """A single input runs unpadded, so its attention mask must change nothing."""
    mask = call.kwargs.get("attention_mask", call.args[1] if len(call.args) > 1 else None)
    if mask is None:
        return
    if (mask.dtype == torch.bool and not bool(mask.all())) or (mask.dtype != torch.bool and bool(mask.any())):
        raise ValueError("Hidden Token Attribution runs one unpadded input at a time; got a masking attention mask.")


def _row_replaced_heads(site: AttentionSite, call: _Call, n_heads: int, expected: torch.Tensor) -> Callable:
    """(u, sel) -> o(l) [n, hidden] of this layer when the input row picked by the one-hot `sel` is replaced by u.

    The layer's own projections and scaled-dot-product attention; other rows' projections are computed once,
    so a derivative with respect to one token costs one row of projections, not n. Checked against the module.
    """
    _check_no_mask(call)
    attention = site.attention
    projections = [_linear(attention, names) for names in (QUERY_NAMES, KEY_NAMES, VALUE_NAMES)]
    x = call.hidden[0]
    n, hidden = x.shape
    d = hidden // n_heads
    scale = getattr(attention, "scaling", d ** -0.5)
    base = [p(x) for p in projections]  # q, k, v of every row [n, hidden]

    def heads(u: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
        q, k, v = (m + sel[:, None] * (p(u) - sel @ m)[None, :] for m, p in zip(base, projections))
        q, k, v = (t.reshape(n, n_heads, d).transpose(0, 1) for t in (q, k, v))
        weights = torch.softmax(q @ k.transpose(1, 2) * scale, dim=-1)
        return (weights @ v).transpose(0, 1).reshape(n, hidden)

    if not torch.allclose(heads(x[0], torch.eye(n, dtype=x.dtype, device=x.device)[0]), expected, atol=1e-4, rtol=1e-4):
        raise ValueError(f"{type(attention).__name__} is not plain scaled-dot-product attention; "
                         "its previous-layer contribution cannot be computed here.")
    return heads


def _direction_chunks(n: int, hidden: int, mode: str, probes: int, seed: int, chunk: int,
                      device) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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


def _input_contribution_norms(fn: Callable, e0: torch.Tensor, n_heads: int, mode: str, probes: int, seed: int,
                              chunk: int) -> torch.Tensor:
    """Sum over token i's directions v of ||d o(l,h)_j / d e0_i . v||^2, as [i, layers, j, heads]."""
    _, n, hidden = e0.shape

    def squared_head_norms(tangent: torch.Tensor) -> torch.Tensor:
        out = jvp(fn, (e0,), (tangent,))[1]  # [layers, 1, n, hidden]
        return out.reshape(out.shape[0], n, n_heads, -1).square().sum(-1)

    batched = vmap(squared_head_norms)
    total = None
    for tokens, vectors in _direction_chunks(n, hidden, mode, probes, seed, chunk, e0.device):
        tangents = torch.zeros(len(tokens), 1, n, hidden, device=e0.device)
        tangents[torch.arange(len(tokens)), 0, tokens] = vectors
        sq = batched(tangents)
        total = torch.zeros((n, *sq.shape[1:]), device=e0.device) if total is None else total
        total.index_add_(0, tokens, sq)
    return total / probes if mode == "estimate" else total


def _previous_contribution_norms(heads: Callable, x: torch.Tensor, n_heads: int, mode: str, probes: int,
                                 seed: int, chunk: int) -> torch.Tensor:
    """Sum over token i's directions v of ||d o(l,h)_j / d e(l-1)_i . v||^2 for one layer, as [i, j, heads]."""
    n, hidden = x.shape
    eye = torch.eye(n, dtype=x.dtype, device=x.device)

    def squared_head_norms(row: torch.Tensor, tangent: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
        out = jvp(lambda u: heads(u, sel), (row,), (tangent,))[1]  # [n, hidden]
        return out.reshape(n, n_heads, -1).square().sum(-1)

    batched = vmap(squared_head_norms)
    total = torch.zeros(n, n, n_heads, device=x.device)
    for tokens, vectors in _direction_chunks(n, hidden, mode, probes, seed, chunk, x.device):
        total.index_add_(0, tokens, batched(x[tokens], vectors, eye[tokens]))
    return total / probes if mode == "estimate" else total


def _normalise(squared: torch.Tensor) -> np.ndarray:
    """[i, layers, j, heads] squared norms -> [layers, heads, j, i] Frobenius norms divided by their sum over i."""
    norms = squared.clamp_min(0).sqrt().permute(1, 3, 2, 0)
    sums = norms.sum(-1, keepdim=True)
    return (norms / torch.where(sums > 0, sums, torch.ones_like(sums))).cpu().numpy().astype(np.float32)


def default_chunk(n: int, hidden: int, widest: int, n_heads: int) -> int:
    """Directions per vmap chunk so that the widest activation of a chunk stays near CHUNK_BUDGET floats."""
    per_direction = n * max(widest, n_heads * n, hidden)
    return int(max(8, min(1024, CHUNK_BUDGET // per_direction)))


def _widest_activation(encoder: torch.nn.Module, hidden: int) -> int:
    """The widest Linear output in the encoder (the feed-forward size)."""
    return max([m.out_features for m in encoder.modules() if isinstance(m, torch.nn.Linear)] + [hidden])


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
) -> Attribution:
    """Input and previous-layer contribution of every token to every head's output at every position (METHODS §9)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "estimate" and probes < 1:
        raise ValueError("probes must be at least 1")
    encoder = lm.encoder
    if any(p.dtype != torch.float32 for p in encoder.parameters()):
        raise ValueError("Hidden Token Attribution runs in float32; load the model in float32.")
    f = lm.facts
    sites = attention_sites(encoder)
    batch = _model_inputs(lm, [encoded])
    chunk = chunk_size or default_chunk(encoded.n, f.hidden_size, _widest_activation(encoder, f.hidden_size), f.n_heads)
    with _eval_mode(encoder), torch.no_grad():
        layer_calls, attention_calls = _capture_calls(lm, sites, batch)
        everything = _all_heads_function(sites, layer_calls, attention_calls[-1])
        e0 = layer_calls[0].hidden
        head_outputs = everything(e0)  # [layers, 1, n, hidden], also checks the layer loop runs
        input_sq = _input_contribution_norms(everything, e0, f.n_heads, mode, probes, seed, chunk)
        previous_sq = torch.stack([
            _previous_contribution_norms(_row_replaced_heads(site, call, f.n_heads, head_outputs[l, 0]),
                                         call.hidden[0], f.n_heads, mode, probes, seed, 4 * chunk)
            for l, (site, call) in enumerate(zip(sites, attention_calls))
        ], dim=1)  # [i, layers, j, heads]
    return Attribution(
        tokens=list(encoded.tokens),
        input=_normalise(input_sq),
        previous=_normalise(previous_sq),
        mode=mode,
        probes=probes if mode == "estimate" else None,
    )


def attribute(
    lm: LoadedModel,
    text_a: TextOrWords,
    text_b: TextOrWords | None = None,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
) -> Attribution:
    """Tokenize a sentence or pair and attribute it (see hidden_token_attribution)."""
    return hidden_token_attribution(lm, encode(lm, text_a, text_b), mode=mode, probes=probes, seed=seed)
