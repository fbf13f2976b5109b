"""Layouts found in a model, then checked: for a model whose `model_type` is not in the family list
(attnlib.core.families.FAMILIES), the known families' shapes (the paths each names for the layers, the attention
block, the heads, the projections, the output projection and the norms; and a few more shapes, FOUND_SHAPES) are tried
on its module tree, and the first that binds is checked once, against the model's own forward pass on a short input
(float32, 1e-5 of the largest value compared):

- values: the per-head values (the projections split into heads as the family splits them, or as fused projections
  are split elsewhere: q|k|v blocks, per-head, or multi/grouped-query by width), weighted by the model's own attention,
  must be the input of the output projection; through the output projection's weight and bias, its output;
- norm: pre-LN, the norm reads the layer's input and gives what the heads read; post-LN, it reads the layer's input
  plus the attention output; a shape with none before attention (OLMo 2's), the heads read the layer's input;
- queries and keys: softmax(scale q.k + bias), with the mask of the model's kind (causal, sliding windows), must be the
  model's own attention (rotary from the call, full or partial, or every two dimensions; ALiBi; the family's bias;
  query and key norms, where the heads hold q_norm and k_norm, per head or over the whole projection);
- final norm: the stack's output is the last layer's output through it (or itself);
- replay: the first layer, called again on two variants of its input in one batch (as attnlib.core.replay calls it),
  gives its own output twice, and differentiates in forward mode (torch.func.jvp, as attribution does).

An encoder-decoder's decoder stack gets the shape's decoder and cross attentions, each checked as above against the
decoder stack's own pass on the encoder's output. What was found is said in words (Found.parts: projections, heads,
position scheme, norm, residual form read off the pass, a mixture of experts) for ModelFacts.layout_found.

The statistics that read a part that differs are refused in words naming it (the found family's `exact`); the others
run. `find_layout(stack, ...)` registers the result for the model's configs (attnlib.core.families.register_found),
which `family_for` and `unsupported_reason` then read."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from attnlib.core.families import (
    FAMILIES,
    QKV,
    Family,
    Found,
    HeadsCall,
    Layout,
    QKNormOver,
    Statistic,
    UnsupportedModelError,
    _alibi_bias,
    _at,
    _bind,
    _fused_blocks,
    _fused_interleaved,
    _grouped,
    _rotary_every_two,
    _rotary_from_call,
    _scaling,
    bound_arguments,
    linear_weight,
    register_found,
    sliding_window,
    split_normed,
)
from attnlib.core.hooks import attentions_returned, hooked
from attnlib.core.replay import Call, first_output

TOLERANCE = 1e-5  # of the largest magnitude compared, in float32
SHORT_INPUT = 7  # tokens of the check's input
FINAL_NORMS = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "layer_norm", "final_norm")
NORM_STATISTICS: tuple[Statistic, ...] = ("norms", "residual_ln", "hta")
VALUE_STATISTICS: tuple[Statistic, ...] = ("norms", "residual_ln", "hta", "ablation")
QK_STATISTICS: tuple[Statistic, ...] = ("queries_keys", "hta")


def _decoder_shape(name: str, layers: str, attention: str, projections, output: str, norm: str, final: str) -> Family:
    """A pre-norm decoder shape named by its paths (rotary, ALiBi and splits are found by the check)."""
    return Family(
        name,
        (),
        _at(layers),
        block=attention,
        heads=attention,
        projections=projections,
        output=f"{attention}.{output}",
        norm=norm,
        post_layer_norm=False,
        scale=_scaling,
        window=sliding_window,
        final_norm=final,
    )


# shapes beside the listed families': Phi's (its output projection named dense), GPT-J's, CodeGen's (GPT-J's paths, one
# fused projection), Falcon's and Bloom's
FOUND_SHAPES: tuple[Family, ...] = (
    _decoder_shape("Phi", "layers", "self_attn", ("q_proj", "k_proj", "v_proj"), "dense", "input_layernorm",
                   "final_layernorm"),
    _decoder_shape("GPT-J", "h", "attn", ("q_proj", "k_proj", "v_proj"), "out_proj", "ln_1", "ln_f"),
    _decoder_shape("CodeGen", "h", "attn", ("qkv_proj",), "out_proj", "ln_1", "ln_f"),
    replace(_decoder_shape("Falcon and Bloom", "h", "self_attention", ("query_key_value",), "dense", "input_layernorm",
                           "ln_f"), batch_heads=("alibi",)),
)  # fmt: skip


@dataclass
class _Pass:
    """What one forward pass of the stack recorded at one candidate layout's modules, per layer application."""

    layer_calls: list[Call] = field(default_factory=list)
    layer_inputs: list[torch.Tensor] = field(default_factory=list)
    calls: list[HeadsCall] = field(default_factory=list)
    projections: list[list[torch.Tensor]] = field(default_factory=list)
    contexts: list[torch.Tensor] = field(default_factory=list)  # the output projection's input
    outputs: list[torch.Tensor] = field(default_factory=list)  # its output
    norm_io: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    attention_norm_io: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    layer_outputs: list[torch.Tensor] = field(default_factory=list)
    layer_reads: list[torch.Tensor] = field(default_factory=list)  # layer 0's other modules' first inputs
    attentions: tuple[torch.Tensor, ...] = ()
    last_hidden: torch.Tensor | None = None


def _record(stack: torch.nn.Module, lay: Layout, ids: torch.Tensor, extra: dict, maps: str) -> _Pass:
    """One forward pass of the stack on ids with hooks at the layout's modules (the first call of each per layer
    application: projections only within their heads call)."""
    rec = _Pass()
    within: list[int] = []
    hooks: list[tuple[torch.nn.Module, Callable, bool, bool]] = []  # module, hook, after, with_kwargs
    first = lay.sites[0]
    inside = {id(m) for m in (*first.block.modules(), *first.norm.modules())}
    for module in first.layer.modules():
        if module is not first.layer and id(module) not in inside:
            hooks.append((module, lambda _m, a, k: rec.layer_reads.append(a[0] if a else next(iter(k.values()), None)),
                          False, True))  # fmt: skip

    def layer_pre(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        rec.layer_inputs.append(hidden)
        rec.layer_calls.append(Call(module, args, dict(kwargs), hidden))

    def heads_pre(module, args, kwargs):
        rec.calls.append(HeadsCall(module, bound_arguments(module, args, kwargs)))
        rec.projections.append([])
        within.append(1)

    def output_post(_module, args, out):
        rec.contexts.append(args[0])
        rec.outputs.append(out)

    for site in lay.sites:
        hooks += [
            (site.layer, layer_pre, False, True),
            (site.layer, lambda _m, _a, out: rec.layer_outputs.append(first_output(out)), True, False),
            (site.heads, heads_pre, False, True),
            (site.heads, lambda *_: within.clear(), True, False),
            *((p, lambda _m, _a, out: rec.projections[-1].append(out) if within else None, True, False)
              for p in site.projections),
            (site.output, output_post, True, False),
        ]  # fmt: skip
        if lay.family.norm is not None:
            hooks.append((site.norm, lambda _m, a, out: rec.norm_io.append((a[0], first_output(out))), True, False))
        if site.attention_norm is not None:
            hooks.append((site.attention_norm, lambda _m, a, o: rec.attention_norm_io.append((a[0], o)), True, False))
    no_cache = {"use_cache": False} if "use_cache" in inspect.signature(stack.forward).parameters else {}
    with contextlib.ExitStack() as entered, torch.no_grad():
        for module, hook, after, with_kwargs in hooks:
            entered.enter_context(hooked([module], hook, after=after, with_kwargs=with_kwargs))
        entered.enter_context(attentions_returned([stack]))
        out = stack(input_ids=ids, **no_cache, **extra)
    rec.attentions = tuple(getattr(out, maps) or ())
    rec.last_hidden = out.last_hidden_state
    return rec


def _differs(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the larger of 1 and max |b|: 0 where equal; above TOLERANCE where the rebuilt part differs."""
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max() / max(1.0, float(b.double().abs().max())))


def _fused_by_width(n_heads: int) -> Callable[[torch.nn.Module, list[torch.Tensor], int], QKV]:
    """A fused projection [q | k | v] with n_heads query heads and fewer key/value heads (Falcon's and GPT-BigCode's
    multi-query attention), the key/value heads read from the width."""

    def split(heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
        (qkv,) = outputs
        kv = (qkv.shape[-1] - n_heads * d) // 2
        q, k, v = qkv.split([n_heads * d, kv, kv], dim=-1)
        return _grouped(heads_module, [q, k, v], d)

    split.by_width = True  # type: ignore[attr-defined]
    return split


MODEL_PARALLEL_BLOCKS = 4  # CodeGen's fused projection: the model-parallel shards it was trained with


def _fused_model_parallel(_heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """CodeGen's qkv_proj: 4 model-parallel blocks along the output, each [q | v | k] of a quarter of the heads."""
    (qkv,) = outputs
    b, n, _ = qkv.shape
    q, v, k = qkv.reshape(b, n, MODEL_PARALLEL_BLOCKS, -1).chunk(3, dim=-1)
    return tuple(x.reshape(b, n, -1, d).transpose(1, 2) for x in (q, k, v))


def _splits(shape: Family, lay: Layout) -> list:
    """The shape's own split of the projections into heads, then the others of their number."""
    fused = len(shape.projections) == 1
    others = [_fused_blocks, _fused_interleaved, _fused_by_width(lay.n_heads), _fused_model_parallel] if fused else [
        _grouped]  # fmt: skip
    return list(dict.fromkeys([shape.split, *others]))


def _positions(shape: Family, call: HeadsCall) -> list:
    """The shape's own position term, then those the call's arguments suggest (rotary tables; none)."""
    found = [shape.positions]
    if "position_embeddings" in call.arguments:
        found += [_rotary_from_call, _rotary_every_two]
    return list(dict.fromkeys([*found, None]))


def _biases(shape: Family, call: HeadsCall) -> list:
    """The shape's own bias of the logits, ALiBi where the call has one, or none."""
    return list(dict.fromkeys([shape.bias, _alibi_bias if "alibi" in call.arguments else None, None]))


def _mask(n: int, causal: bool, window: int | None) -> torch.Tensor:
    """[n, n] True where query i may attend to key j (causal: j <= i; a window: |i - j| <= w)."""
    offset = torch.arange(n)[:, None] - torch.arange(n)[None]
    allowed = torch.ones(n, n, dtype=torch.bool)
    if causal:
        allowed &= offset >= 0
    if window is not None:
        allowed &= offset.abs() <= window
    return allowed


@dataclass
class _Checked:
    """A candidate's result: the family as found, and what differs (statistic -> reason)."""

    family: Family
    reasons: dict[Statistic, str]
    found: dict[str, str]
    shape: Family


def _check(
    stack: torch.nn.Module, shape: Family, causal: bool, ids: torch.Tensor, extra: dict | None = None, part: str = ""
) -> _Checked | None:
    """Bind the shape to the stack and check its parts against the model's own pass; None where it does not bind.
    `part`: an encoder-decoder's "decoder" or "cross" attention in its decoder stack (`extra`: the encoder's output),
    whose sublayer's input is not the layer's, and whose attribution and ablation are the encoder's."""
    try:
        lay = _bind(stack, shape)
    except UnsupportedModelError:
        return None
    if not lay.sites or not all(isinstance(s.output, torch.nn.Module) for s in lay.sites):
        return None
    try:
        rec = _record(stack, lay, ids, extra or {}, "cross_attentions" if part == "cross" else "attentions")
    except Exception:  # a shape whose modules are called otherwise than it names them
        return None
    n_layers = len(lay.sites)
    if len(rec.attentions) != n_layers or len(rec.calls) != n_layers or len(rec.contexts) != n_layers:
        return None
    reasons: dict[Statistic, str] = {}
    d = lay.head_dim

    def first_passing(candidates, differs) -> tuple[Any, float]:
        worst = float("inf")
        for candidate in candidates:
            try:
                gap = max(differs(candidate, l) for l in range(n_layers))
            except Exception:  # a candidate of the wrong shape for this model
                continue
            if gap <= TOLERANCE:
                return candidate, gap
            worst = min(worst, gap)
        return None, worst

    def values_gap(split, l: int) -> float:
        v = split(lay.sites[l].heads, rec.projections[l], d)[2]
        c = torch.einsum("bhij,bhjd->bihd", rec.attentions[l].double(), v.double()).flatten(2)
        return _differs(c, rec.contexts[l])

    split, gap = first_passing(_splits(shape, lay), values_gap)
    paths = f"{', '.join(shape.projections)} -> {shape.output}"
    if split is None:
        why = (f"the heads' values ({paths}), weighted by the model's own attention, differ from the input of the "
               f"output projection by {gap:.2g} (relative; more than {TOLERANCE:g})")  # fmt: skip
        reasons |= dict.fromkeys(VALUE_STATISTICS, why)
        split = shape.split
    out_gap = max(
        _differs(rec.contexts[l] @ linear_weight(s.output).T + _bias_of(s.output), rec.outputs[l])
        for l, s in enumerate(lay.sites)
    )
    if out_gap > TOLERANCE:
        why = f"the output projection {shape.output} is not affine in its input as its weight says ({out_gap:.2g})"
        reasons |= dict.fromkeys(VALUE_STATISTICS, why)

    def norm_gap(post: bool, l: int) -> float:
        if shape.norm is None:  # no norm before attention: the heads read the layer's input
            return 0.0 if part else _differs(rec.calls[l].hidden, rec.layer_inputs[l])
        norm_in, norm_out = rec.norm_io[l]
        if post:
            return _differs(norm_in, rec.calls[l].hidden + rec.outputs[l])
        read = 0.0 if part else _differs(norm_in, rec.layer_inputs[l])  # a part's sublayer reads no layer input
        return max(read, _differs(norm_out, rec.calls[l].hidden))

    post, gap = first_passing([shape.post_layer_norm, not shape.post_layer_norm], norm_gap)
    if post is None:
        why = (f"the norm {shape.norm} reads neither the layer's input (pre-LN) nor the layer's input plus the attention "
               f"output (post-LN) ({gap:.2g})")  # fmt: skip
        reasons |= {s: why for s in NORM_STATISTICS if s not in reasons}
        post = shape.post_layer_norm
    if shape.attention_norm is not None:
        gap = max(_differs(rec.attention_norm_io[l][0], rec.outputs[l]) for l in range(n_layers))
        if gap > TOLERANCE:
            return None  # the shape's norm of the attention output is not one in this model: another shape fits better

    def logits_gap(terms, l: int) -> float:
        positions, bias, over = terms
        call, site = rec.calls[l], lay.sites[l]
        q, k, _ = split_normed(shape, site.heads, rec.projections[l], d, split, over)
        if positions is not None:
            q, k, _ = positions(call, (q, k, k))
        scale = shape.scale(site.heads, d)
        logits = scale * q.double() @ k.double().transpose(-1, -2)
        extra = None if bias is None else bias(call, (q, k, k), scale)
        if extra is not None:
            logits = logits + extra.double()
        cap = shape.score_cap(site.heads)
        if cap:
            logits = cap * torch.tanh(logits / cap)
        n = logits.shape[-1]
        window = shape.window(stack.config, l) if causal else None
        logits = logits.masked_fill(~_mask(n, causal, window), float("-inf"))
        return _differs(logits.softmax(-1), rec.attentions[l])

    overs: list[QKNormOver] = [shape.qk_norm_over, "projection" if shape.qk_norm_over == "head" else "head"]
    if shape.qk_norms(lay.sites[0].heads) is None:
        overs = overs[:1]
    first_call = rec.calls[0]
    terms = [(p, b, o) for p in _positions(shape, first_call) for b in _biases(shape, first_call) for o in overs]
    chosen, gap = first_passing(terms, logits_gap)
    positions, bias, over = chosen if chosen is not None else (shape.positions, shape.bias, shape.qk_norm_over)
    if chosen is None:
        normed = ", their norms per head and over the whole projection" if len(overs) > 1 else ""
        why = (
            f"softmax(scale q.k) of the queries and keys found ({', '.join(shape.projections)}, with the position "
            f"terms tried: rotary, partial rotary, ALiBi, none{normed}) differs from the model's attention by {gap:.2g}"
        )
        reasons |= {s: why for s in QK_STATISTICS if s not in reasons}

    def final_gap(final: str | None, _l: int) -> float:
        last = rec.layer_outputs[-1]
        module = None if final is None else getattr(stack, final, None)
        if final is not None and module is None:
            raise AttributeError(final)
        assert rec.last_hidden is not None
        return _differs(last if module is None else module(last), rec.last_hidden)

    finals = list(dict.fromkeys([shape.final_norm, *FINAL_NORMS, None]))
    final, gap = first_passing(finals, final_gap)
    if final is None and gap > TOLERANCE:
        why = f"the stack's output is not its last layer's output through a final norm ({gap:.2g})"
        reasons |= {s: why for s in ("hta", "ablation") if s not in reasons}
    if not part:  # a part's attribution and ablation are its encoder's (METHODS §18)
        replayed, differentiated = _replay_reasons(rec, shape.unbatched, shape.batch_heads)
        if replayed is not None:
            reasons |= {s: replayed for s in ("hta", "ablation") if s not in reasons}
        if differentiated is not None:
            reasons.setdefault("hta", differentiated)
    reasons = {s: f"checked against the model's own forward pass, {why}" for s, why in reasons.items()}
    own = shape.exact
    family = replace(
        shape,
        name=f"{shape.name}-shaped",
        model_types=(stack.config.model_type,),
        split=split,
        positions=positions,
        bias=bias,
        qk_norm_over=over,
        post_layer_norm=post,
        final_norm=final,
        scores="rotary" if positions is not None else "relative_bias" if bias is not None else "absolute",
        exact=lambda config: {**own(config), **reasons},
        decoder=None,
        cross=None,
    )
    kv_heads = _key_value_heads(rec.projections[0], lay, getattr(split, "by_width", False))
    parts = _parts_found(family, lay, kv_heads, _rotary_width(rec.calls[0], positions))
    if family.qk_norms(lay.sites[0].heads) is not None:
        parts["query/key norms"] = (
            "over the whole query and key projections, before the split into heads"
            if over == "projection"
            else "over each head's query and key"
        )
    if not post:
        parts["residual"] = _residual_form(rec)
    experts = _experts(lay.sites[0].layer, stack.config)
    if experts:
        parts["feed-forward"] = experts
    return _Checked(family, reasons, parts, shape)


def _residual_form(rec: _Pass) -> str:
    """Sequential when a module of the first layer reads x + the attention output (through its norm where the layer
    normalises it before the residual); else attention and feed-forward in parallel (both read the layer's input)."""
    added = rec.attention_norm_io[0][1] if rec.attention_norm_io else rec.outputs[0]
    after = rec.layer_inputs[0] + added
    reads = [t for t in rec.layer_reads if isinstance(t, torch.Tensor) and t.shape == after.shape]
    if any(_differs(t, after) <= TOLERANCE for t in reads):
        return "sequential (the feed-forward reads x + the attention output)"
    return "parallel (attention and feed-forward read the same input, x + both is the layer's output)"


def _experts(layer: torch.nn.Module, config) -> str | None:
    """'a mixture of N experts, routed by the model's own router' where the layer holds one; None otherwise."""
    if not any("expert" in type(m).__name__.lower() or "moe" in type(m).__name__.lower() for m in layer.modules()):
        return None
    n = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
    return (
        f"a mixture of {n or 'several'} experts, each token routed by the model's own router (run as the model runs it)"
    )


def _replay_reasons(rec: _Pass, unbatched: Sequence[str], batch_heads: Sequence[str]) -> tuple[str | None, str | None]:
    """Why the first layer cannot be replayed as attribution and ablation replay it (attnlib.core.replay: two variants
    of the recorded input in one batch, each giving the layer's own output), and why it cannot be differentiated in
    forward mode as attribution differentiates it, in words; None for each that it can."""
    call, recorded = rec.layer_calls[0], rec.layer_outputs[0]

    def layer(x: torch.Tensor) -> torch.Tensor:
        args, kwargs = call.with_hidden(x, unbatched, batch_heads)
        return first_output(call.module(*args, **kwargs))

    replayed = differentiated = None
    try:
        twice = layer(torch.cat([call.hidden, call.hidden]))
        gap = max(_differs(half, recorded) for half in twice.chunk(2))
        if gap > TOLERANCE:
            replayed = f"its first layer, replayed on two variants of its input in one batch, differs by {gap:.2g}"
    except Exception as exc:
        replayed = f"its first layer, replayed on two variants of its input in one batch, fails ({_first_line(exc)})"
    try:
        torch.func.jvp(layer, (call.hidden,), (torch.ones_like(call.hidden),))
    except Exception as exc:
        differentiated = (
            f"its layers cannot be differentiated in forward mode, which attribution needs ({_first_line(exc)})"
        )
    return replayed, differentiated


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0][:160] if text else "") or type(exc).__name__


def _bias_of(module: torch.nn.Module) -> torch.Tensor | float:
    bias = getattr(module, "bias", None)
    return 0.0 if bias is None else bias


def _rotary_width(call: HeadsCall, positions) -> int | None:
    """How many of each head's dimensions the rotary turns (its tables' width), or None without rotary."""
    if positions is None or "position_embeddings" not in call.arguments:
        return None
    width = call.arguments["position_embeddings"][0].shape[-1]
    return 2 * width if positions is _rotary_every_two else width


def _key_value_heads(outputs: list[torch.Tensor], lay: Layout, by_width: bool) -> int:
    """The key/value heads that the projections' outputs hold (fewer than the query heads: multi- or grouped-query)."""
    if len(outputs) == 3:
        return outputs[1].shape[-1] // lay.head_dim
    if by_width:
        return (outputs[0].shape[-1] - lay.n_heads * lay.head_dim) // (2 * lay.head_dim)
    return lay.n_heads


def _parts_found(family: Family, lay: Layout, kv_heads: int, rotary: int | None) -> dict[str, str]:
    """What the check found, in words: projections, heads, positions, norm."""
    fused = len(family.projections) == 1
    turned = f"all {rotary}" if rotary == lay.head_dim else f"partial: {rotary} of {lay.head_dim}"
    if family.positions is _rotary_from_call:
        positions = f"rotary ({turned} dimensions of each head)"
    elif family.positions is _rotary_every_two:
        positions = f"rotary on pairs of neighbouring dimensions, as GPT-J ({turned} dimensions of each head)"
    elif family.bias is _alibi_bias:
        positions = "ALiBi (a per-head linear bias of the distance)"
    elif family.bias is not None:
        positions = "a relative position bias"
    else:
        positions = "none inside attention (added to the embeddings)"
    kind = "multi-query" if kv_heads == 1 else "grouped-query" if kv_heads < lay.n_heads else "one key/value head each"
    return {
        "shape": family.name,
        "projections": ("fused: " if fused else "separate: ") + ", ".join(family.projections),
        "heads": f"{lay.n_heads} query heads of {lay.head_dim}, {kv_heads} key/value ({kind})",
        "positions": positions,
        "norm": "none before attention (the heads read the layer's input)"
        if family.norm is None
        else f"{family.norm} ({'post' if family.post_layer_norm else 'pre'}-norm)",
    }


def find_layout(
    stack: torch.nn.Module,
    causal: bool,
    configs: Sequence[object] = (),
    decoder_stack: torch.nn.Module | None = None,
) -> Found:
    """Try every known shape on the stack (a base model, or an encoder-decoder's encoder), check the first that binds
    against the model's own pass (the one that differs least where several bind), and register the result for the
    stack's config and `configs` (the model's others); an encoder-decoder's `decoder_stack` gets the shape's decoder
    and cross attentions, each checked against the decoder stack's own pass on the encoder's output."""
    vocab = int(getattr(stack.config, "vocab_size", 0) or 0)
    ids = (torch.arange(SHORT_INPUT) % max(vocab - 3, 1) + min(3, max(vocab - 1, 0)))[None].to(_device(stack))
    best: _Checked | None = None
    for shape in (*FAMILIES, *FOUND_SHAPES):
        with torch.no_grad():
            checked = _check(stack, shape, causal, ids)
        if checked is not None and (best is None or len(checked.reasons) < len(best.reasons)):
            best = checked
        if best is not None and not best.reasons:
            break
    if best is not None and decoder_stack is not None:
        best.family = replace(best.family, **_parts_of(best.shape, stack, decoder_stack, ids))
    found = Found(None, {}) if best is None else Found(best.family, best.found)
    for config in {id(c): c for c in (stack.config, *configs)}.values():
        register_found(config, found)
    return found


def _parts_of(shape: Family, encoder: torch.nn.Module, decoder: torch.nn.Module, ids: torch.Tensor) -> dict:
    """The shape's decoder and cross attentions as found in the decoder stack ({"decoder": family, "cross": ...};
    None for a part it has none of, or whose modules are not where the shape keeps them)."""
    with torch.no_grad():
        source = encoder(input_ids=ids).last_hidden_state
    parts = {}
    for part in ("decoder", "cross"):
        laid_out = shape.part(part)
        with torch.no_grad():
            checked = None if laid_out is None else _check(
                decoder, laid_out, part == "decoder", ids, {"encoder_hidden_states": source}, part
            )  # fmt: skip
        parts[part] = None if checked is None else checked.family
    return parts


def _device(module: torch.nn.Module) -> torch.device:
    return next(module.parameters()).device
