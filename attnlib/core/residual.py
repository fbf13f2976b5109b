"""The residual stream of one input as sums (METHODS §21), read off ONE forward pass of the model's own modules.

Per layer application l (`LayerParts`, float32 torch tensors of one input, batch dimension dropped):

- `x` [n, d]: the layer's input x^l (hidden_states[l]; x^0 the embeddings, position embeddings included);
- `weights` [H, n, n]: the model's own attention weights A (eager; grouped-query: the query heads);
- `values` [H, n, d]: f_h(N1(x^l_j)), head h's value vector of key j (value bias included) through head h's rows of the
  output projection, so that the head output is `o[h, i] = sum_j A[h, i, j] values[h, j]` (`head_outputs()`);
- `out_bias` [d] or None: b_O;
- `mid` [n, d]: the attention node's whole: m^l = x^l + what the attention block adds (pre-norm and parallel blocks;
  parallel blocks' m^l is not a hidden state of the model); post-norm (BERT family): u, the input of the norm after
  attention;
- `carried` [n, d]: the state the feed-forward block adds to, the feed-forward node's residual part: m^l (pre-norm,
  parallel), N1(u) (post-norm: the normed state);
- `ffn` [n, d]: F, what the feed-forward block adds (post-norm: before the second norm), so `carried + ffn` is the
  feed-forward node's whole (`ffn_whole`): x^(l+1) except in post-norm families, where x^(l+1) = N2(carried + ffn);
- `out` [n, d]: x^(l+1);
- `query_scale` [n] and `gain` [d] (Gemma 2 and 3, whose RMSNorm of the attention output belongs to the sublayer,
  METHODS §12, §21): that norm is linear once its divisor r_i is fixed, so the part that head h's key j adds to the
  residual at query i is `A[h, i, j] / r_i * gain * values[h, j]`; `query_scale` = 1 / r_i (from the norm's own input in
  the run), `gain` = its gamma. None elsewhere. `attention_parts()` folds them in: with its (weights, values) every
  family's `mid[i] = x[i] + sum_{h, j} weights[h, i, j] values[h, j] + added_bias()`.

`walk(lm, batch, visit)` calls `visit(parts)` as each layer finishes (only that layer's tensors held: long inputs stay
within memory; inputs longer than BLOCKWISE_FROM tokens run block-wise (METHODS §19, attnlib.core.blockwise) where the
family can, so the model's pass never holds its eager n x n scores beside the layer's weights); `decompose(lm, batch)`
keeps them all (`Residual`) with the embeddings and the final norm the lens reads. `batch` is one unpadded input
(runner.model_inputs of one Encoded). Hooks go through attnlib.core.hooks and are removed in `finally`. The encoder
stack of an encoder-decoder is decomposed as an encoder; `decoder_parts` decomposes its decoder stack for a source and a
target in the whole model's own pass: each layer's `x`, `weights`, `values`, `out_bias` and `mid` are its
self-attention's (mid: the state after it, node S), `cross` its cross-attention's (`CrossParts`: the source's values,
the state after it, node A), `carried`, `ffn` and `out` its feed-forward block's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlib.core.blockwise import BLOCKWISE_FROM, Block, blockwise_attention, default_block_rows, supports_blockwise
from attnlib.core.families import Layout, UnsupportedModelError, layout
from attnlib.core.hooks import NORMS, attentions_returned, hooked, hooks, site_modules
from attnlib.core.memory import MemoryLimitError, bytes_text, estimate_peak_bytes, memory_limit, run_size
from attnlib.core.model import LoadedModel
from attnlib.core.runner import NoAttentionWeightsError, NormWeights, norm_weights


@dataclass
class CrossParts:
    """One decoder layer's cross-attention as sums (METHODS §21): its node's parts are `weights[h, i, j] values[h, j]`
    over the source's positions j and the state `before` it; `whole` is before + what it adds."""

    weights: torch.Tensor  # [H, n, m]: the model's own cross-attention weights
    values: torch.Tensor  # [H, m, d]: the source's value vectors (from the encoder's output) through W_O^h
    out_bias: torch.Tensor | None  # [d]: b_O, in the whole and in no part
    before: torch.Tensor  # [n, d]: the state it adds to (pre-norm: x + a_self; post-norm: N1(u1))
    whole: torch.Tensor  # [n, d]: before + what it adds (post-norm: the input u2 of the norm after it)


@dataclass
class LayerParts:
    """One layer application's residual stream as sums (module docstring)."""

    layer: int
    x: torch.Tensor
    weights: torch.Tensor
    values: torch.Tensor
    out_bias: torch.Tensor | None
    mid: torch.Tensor
    carried: torch.Tensor
    ffn: torch.Tensor
    out: torch.Tensor
    query_scale: torch.Tensor | None = None
    gain: torch.Tensor | None = None
    cross: CrossParts | None = None  # an encoder-decoder's decoder layer: its cross-attention

    @property
    def ffn_whole(self) -> torch.Tensor:
        """The feed-forward node's whole: carried + F (x^(l+1), or the second norm's input in post-norm families)."""
        return self.carried + self.ffn

    def head_outputs(self) -> torch.Tensor:
        """o [H, n, d]: each head's output at each query, sum_j A[h, i, j] values[h, j] (before any output norm)."""
        return torch.bmm(self.weights, self.values)

    def attention_parts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [H, n, n], values [H, n, d]) whose products are the parts that heads add to the residual."""
        weights, values = self.weights, self.values
        if self.query_scale is not None:
            weights = weights * self.query_scale[None, :, None]
        if self.gain is not None:
            values = values * self.gain
        return weights, values

    def added_bias(self) -> torch.Tensor:
        """[n, d]: what the attention block adds beyond the heads' parts (b_O, through Gemma's norm where it has one)."""
        n, d = self.x.shape
        if self.out_bias is None:
            return torch.zeros(n, d, device=self.x.device)
        bias = self.out_bias.expand(n, d)
        if self.query_scale is not None:
            bias = bias * self.query_scale[:, None] * (1.0 if self.gain is None else self.gain)
        return bias


@dataclass
class Residual:
    """Every layer's LayerParts of one input, its embeddings x^0 and the stack's final norm (None: the model has none)."""

    layers: list[LayerParts]
    embeddings: torch.Tensor  # [n, d]: x^0
    final_norm: torch.nn.Module | None
    layout: Layout = field(repr=False)


def _first(output) -> torch.Tensor:
    """A module's main output: the tensor itself, or the first element of the tuple it returns."""
    return output if isinstance(output, torch.Tensor) else output[0]


def _module_weights(output) -> torch.Tensor:
    """The attention weights [batch, H, n, m] an attention module returned; NoAttentionWeightsError without them."""
    maps = [t for t in output[1:] if isinstance(t, torch.Tensor) and t.dim() == 4] if isinstance(output, tuple) else []
    if not maps:
        raise NoAttentionWeightsError(
            "The model's attention returned no weights, although it runs with eager attention; attnlib cannot split "
            "its residual stream into heads' parts."
        )
    return maps[-1].detach()  # the weights come last (T5 returns its position bias before them)


def _norm_modules(layer: torch.nn.Module, skip: torch.nn.Module) -> list[torch.nn.Module]:
    """The layer's norm modules (by class name) other than `skip`: where a post-norm layer's second norm is."""
    return [m for m in layer.modules() if "norm" in type(m).__name__.lower() and m is not skip]


def check_walk_memory(lm: LoadedModel, n: int, blockwise: bool) -> None:
    """MemoryLimitError when one layer's parts of an n-token input (its weights [H, n, n] and values [H, n, d], float32)
    beside the model's pass would exceed what this server allows per run."""
    facts = lm.facts
    rows = default_block_rows(n, facts.n_heads) if blockwise else n  # eager: one layer's scores, in one block
    need = 4 * facts.n_heads * n * (n + facts.hidden_size) + estimate_peak_bytes(run_size(lm, n), rows)
    limit = memory_limit(device=lm.device)
    if limit is not None and need > limit:
        raise MemoryLimitError(
            f"Splitting the residual stream of an input of {n:,} tokens holds one layer's {facts.n_heads} heads x "
            f"{n:,}^2 attention weights and their values beside the model's pass: about {bytes_text(need)}; this "
            f"server allows {bytes_text(limit)} per run. Use a shorter text."
        )


def walk(
    lm: LoadedModel, batch: dict, visit: Callable[[LayerParts], None], blockwise: bool | None = None
) -> tuple[torch.Tensor, Layout]:
    """Run one input (batch of 1, no padding) through lm.encoder (an encoder-decoder's encoder) and call visit with each
    layer's LayerParts as that layer finishes; (x^0 [n, d], the layout). blockwise: the attention weights from the
    block-wise run (True), from eager attention (False), or block-wise above BLOCKWISE_FROM tokens where the family can
    (None). UnsupportedModelError for a family whose layout attnlib does not know or cannot check (the norms' reason),
    NoAttentionWeightsError without weights."""
    stack = lm.encoder
    ids = batch.get("input_ids")
    if ids is not None and ids.shape[0] != 1:
        raise ValueError("the residual decomposition reads one input at a time")
    n = next(iter(v for v in batch.values() if isinstance(v, torch.Tensor))).shape[1]
    if blockwise is None:
        blockwise = n > BLOCKWISE_FROM and supports_blockwise(stack)
    check_walk_memory(lm, n, blockwise)
    lay = layout(stack, "norms")
    weights_np: NormWeights = norm_weights(stack)
    device = next(stack.parameters()).device
    out_weight = torch.from_numpy(weights_np.out_weight).to(device)  # [layers, H, head_dim, d]
    out_bias = [s.output.bias for s in lay.sites]
    post = lay.family.post_layer_norm
    gamma = torch.from_numpy(weights_np.gamma).to(device)
    eps = torch.from_numpy(weights_np.eps)
    seen: dict[str, torch.Tensor] = {}
    embeddings: list[torch.Tensor] = []
    normed: list[tuple[torch.Tensor, torch.Tensor]] = []  # post-norm: (input, output) of the layer's other norms

    layer_weights: list[torch.Tensor] = []  # block-wise: the layer application's weights [H, n, n], made block by block

    def on_block(block: Block) -> None:
        if block.first_row == 0:  # a new layer application: a new tensor (the visitor may keep the last one)
            layer_weights[:] = [torch.zeros(block.probs.shape[1], block.n, block.n, device=block.probs.device)]
        rows = slice(block.first_row, block.first_row + block.rows)
        layer_weights[0][:, rows, block.first_key : block.first_key + block.probs.shape[3]] = block.probs[0]

    def on_heads(_module, _args, output):
        if blockwise:
            seen["weights"] = layer_weights.pop()[None]
            return
        seen["weights"] = _module_weights(output)

    def on_output(_module, _args, output):
        seen["added"] = _first(output).detach()

    def on_norm(_module, args, output):
        seen["norm_out"] = _first(output).detach()

    def on_attention_norm(_module, args, output):
        seen["attention_norm_out"] = _first(output).detach()

    def on_other_norm(_module, args, output):
        normed.append((args[0].detach(), _first(output).detach()))

    def on_layer(cache):
        def finish(module, _args, output):
            k = len(done)
            site = lay.sites[k]
            x = cache.layer_inputs.pop()[0].float()
            if k == 0:
                embeddings.append(x)
            outputs = [p.pop() if p else None for p in cache.projections]
            call = cache.heads_calls.pop()
            if outputs[0] is None:
                outputs = [outputs[2]] * 3
            v = lay.qkv(site, outputs, call)[2][0].float()  # [H, n, head_dim]
            values = torch.einsum("hnk,hkd->hnd", v, out_weight[k])
            out = _first(output)[0].float()
            weights = seen.pop("weights")[0].float()
            query_scale = gain = None
            if post:
                u = cache.norm_inputs.pop()[0].float()
                mid, carried = u, seen.pop("norm_out")[0].float()
                second = [i for i, o in normed if torch.equal(o[0].float(), out)]
                normed.clear()
                if not second:
                    raise UnsupportedModelError(
                        f"attnlib cannot find the norm after the feed-forward block of this '{lm.encoder.config.model_type}' "
                        "model's layers, so its residual stream cannot be split into parts."
                    )
                ffn = second[-1][0].float() - carried
            else:
                added = seen.pop("added")[0].float()  # the output projection's (Bloom's block adds x itself)
                if weights_np.attention_norm:
                    o = cache.norm_inputs.pop()[0].float()
                    query_scale = 1.0 / o.square().mean(-1).add(float(eps[k])).sqrt()
                    gain = gamma[k]
                    added = seen.pop("attention_norm_out")[0].float()
                mid = x + added
                carried, ffn = mid, out - mid
            bias = out_bias[k]
            visit(
                LayerParts(
                    layer=k,
                    x=x,
                    weights=weights,
                    values=values,
                    out_bias=None if bias is None else bias.detach().float(),
                    mid=mid,
                    carried=carried,
                    ffn=ffn,
                    out=out,
                    query_scale=query_scale,
                    gain=gain,
                )
            )
            done.append(k)
            seen.clear()

        return finish

    done: list[int] = []
    with contextlib.ExitStack() as context, torch.inference_mode():
        cache = context.enter_context(hooks(lm, NORMS))
        if blockwise:
            rows = default_block_rows(n, lm.facts.n_heads)
            context.enter_context(blockwise_attention(stack, on_block, rows, n > BLOCKWISE_FROM))
        else:
            context.enter_context(attentions_returned(site_modules(lay, "heads")))
        context.enter_context(hooked(site_modules(lay, "heads"), on_heads, after=True))
        if post:
            context.enter_context(hooked(site_modules(lay, "norm"), on_norm, after=True))
            others = [m for s in lay.sites for m in _norm_modules(s.layer, s.norm)]
            context.enter_context(hooked(others, on_other_norm, after=True))
        else:
            context.enter_context(hooked(site_modules(lay, "output"), on_output, after=True))
            if weights_np.attention_norm:
                context.enter_context(hooked(site_modules(lay, "attention_norm"), on_attention_norm, after=True))
        context.enter_context(hooked(site_modules(lay, "layer"), on_layer(cache), after=True))
        stack(**batch)
    if len(done) != len(lay.sites):
        raise UnsupportedModelError("The model's layers did not all run in its forward pass; attnlib cannot split it.")
    return embeddings[0], lay


def decompose(lm: LoadedModel, batch: dict, blockwise: bool | None = None) -> Residual:
    """Every layer's LayerParts of one input (walk), kept, with x^0 and the final norm."""
    layers: list[LayerParts] = []
    embeddings, lay = walk(lm, batch, layers.append, blockwise)
    return Residual(layers, embeddings, lay.final_norm, lay)


def _values_through_output(values: torch.Tensor, out_weight: torch.Tensor) -> torch.Tensor:
    """[H, n, d]: a layer's value vectors [1, H, n, head_dim] through each head's rows of the output projection."""
    return torch.einsum("hnk,hkd->hnd", values[0].float(), out_weight)


def decoder_parts(
    lm: LoadedModel, source_batch: dict, target_ids: list[int]
) -> tuple[list[LayerParts], torch.Tensor, torch.Tensor]:
    """An encoder-decoder's decoder stack as sums for one source and target (decoder input ids), from the whole model's
    own pass: (each layer's LayerParts with its CrossParts, the decoder's x^0 [n, d], the model's logits [n, V])."""
    model = lm.seq2seq
    if model is None:
        raise ValueError(f"'{lm.facts.name}' is not an encoder-decoder")
    stack = model.get_decoder()
    own, cross = layout(stack, "norms", "decoder"), layout(stack, "norms", "cross")
    device = next(stack.parameters()).device
    own_out = torch.from_numpy(norm_weights(stack, "decoder").out_weight).to(device)
    cross_out = torch.from_numpy(norm_weights(stack, "cross").out_weight).to(device)
    post = own.family.post_layer_norm
    seen: dict[str, list] = {k: [] for k in ("x", "out", "own", "cross", "others", "own_weights", "cross_weights")}

    def keep(name: str, after: bool = False, both: bool = False):
        """A hook keeping a module's input (a layer's, by position or keyword), or its output, or both."""

        def hook(_module, args, *rest):
            value = _first(rest[-1]) if after else (args[0] if args else rest[0]["hidden_states"])
            value = value[0].detach().float()
            seen[name].append((_first(args[0])[0].detach().float(), value) if both else value)

        return hook

    def weights_of(name: str):
        return lambda _module, _args, output: seen[name].append(_module_weights(output)[0].float())

    layers = [site.layer for site in own.sites]
    with contextlib.ExitStack() as context, torch.inference_mode():
        own_cache = context.enter_context(hooks(lm, {"values"}, "decoder"))
        cross_cache = context.enter_context(hooks(lm, {"values"}, "cross"))
        for lay, name in ((own, "own_weights"), (cross, "cross_weights")):  # each attention module's own weights
            context.enter_context(attentions_returned(site_modules(lay, "heads")))
            context.enter_context(hooked(site_modules(lay, "heads"), weights_of(name), after=True))
        context.enter_context(hooked(layers, keep("x"), with_kwargs=True))
        context.enter_context(hooked(layers, keep("out", after=True), after=True))
        if post:  # each norm's (input, output): after self-attention, after cross-attention, after the feed-forward
            context.enter_context(hooked(site_modules(own, "norm"), keep("own", True, True), after=True))
            context.enter_context(hooked(site_modules(cross, "norm"), keep("cross", True, True), after=True))
            others = [
                m for o, c in zip(own.sites, cross.sites) for m in _norm_modules(o.layer, o.norm) if m is not c.norm
            ]
            context.enter_context(hooked(others, keep("others", True, True), after=True))
        else:  # what each attention's output projection adds
            context.enter_context(hooked(site_modules(own, "output"), keep("own", True), after=True))
            context.enter_context(hooked(site_modules(cross, "output"), keep("cross", True), after=True))
        result = model(**source_batch, decoder_input_ids=torch.tensor([target_ids], device=device), use_cache=False)
    own_weights, cross_weights = seen["own_weights"], seen["cross_weights"]
    own_values, cross_values = own_cache.heads().values, cross_cache.heads().values
    parts = []
    for l, (own_site, cross_site) in enumerate(zip(own.sites, cross.sites)):
        x, out = seen["x"][l], seen["out"][l]
        if post:
            (mid, before), (whole, carried) = seen["own"][l], seen["cross"][l]
            second = [i for i, o in seen["others"] if torch.equal(o, out)]
            if not second:
                raise UnsupportedModelError(
                    f"attnlib cannot find the norm after the feed-forward block of this '{model.config.model_type}' "
                    "model's decoder layers, so its residual stream cannot be split into parts."
                )
            ffn = second[-1] - carried
        else:
            mid = before = x + seen["own"][l]
            whole = carried = mid + seen["cross"][l]
            ffn = out - carried
        bias, cross_bias = own_site.output.bias, cross_site.output.bias
        parts.append(
            LayerParts(
                layer=l,
                x=x,
                weights=own_weights[l],
                values=_values_through_output(own_values[l], own_out[l]),
                out_bias=None if bias is None else bias.detach().float(),
                mid=mid,
                carried=carried,
                ffn=ffn,
                out=out,
                cross=CrossParts(
                    weights=cross_weights[l],
                    values=_values_through_output(cross_values[l], cross_out[l]),
                    out_bias=None if cross_bias is None else cross_bias.detach().float(),
                    before=before,
                    whole=whole,
                ),
            )
        )
    return parts, seen["x"][0], result.logits[0].float()
