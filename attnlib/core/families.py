"""Where each encoder family keeps its attention, and how its attention scores are built: the one description that
the runner, the norms, attribution, replay and the pages read.

A `Family` names, per `model_type`, the modules of one layer (paths from the layer): the attention block (its first
input is what the heads read; it holds the output projection), the module that computes the heads (its call carries the
position inputs), the query/key/value projections (or one fused projection and how to split it), the attention output
projection and the LayerNorm that belongs to attention (after the residual in post-LN families, before attention in
pre-LN ones, decoders included; none where the heads read the layer input itself, as OLMo 2's; Gemma 2 and 3 and OLMo 2
also normalise the attention and feed-forward outputs before the residual; Qwen3 and Gemma 3 normalise each head's q and
k, OLMo 2 the whole query and key projections before they are split into heads). It also says how the scores are built, so that the queries and keys shown
are the ones the dot product sees, and which statistics are exact for the family (`unsupported_reason`).
`layout(encoder)` binds a family to one model's modules, one `LayerSite` per layer application (ALBERT applies one
shared layer L times). An encoder-decoder's entry (T5, BART, Marian) describes its encoder stack, which its statistics
read (METHODS §18), and holds the layouts of its decoder stack's two attentions (`decoder`, `cross`: a Family each,
bound by `layout(decoder_stack, part=...)`), whose queries and keys the neuron view reads and whose norms `norms --part`
reads (cross-attention's §11 alone: `residual_ln`, §12-13, has no meaning for it). Adding a family is one entry in
FAMILIES and its tiny model in tests/support/models.py; a model whose type is not listed gets the layout found in it
and checked against its own forward pass (attnlib.core.found, registered per model: `family_for(config)`).
"""

from __future__ import annotations

import inspect
import math
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

ScoreKind = Literal["absolute", "rotary", "relative_bias", "disentangled"]
Part = Literal["encoder", "decoder", "cross"]  # an encoder-decoder's attentions; any other model's is its "encoder"
Statistic = Literal["queries_keys", "norms", "residual_ln", "hta", "ablation"]
STATISTICS: dict[Statistic, str] = {
    "queries_keys": "The query and key vectors of the neuron view",
    "norms": "Value-weighted norms, the residual and LayerNorm decomposition and the rollouts (METHODS §11-13)",
    "residual_ln": "The residual and LayerNorm decomposition and the rollouts (METHODS §12-13)",
    "hta": "Hidden Token Attribution (METHODS §9, §13)",
    "ablation": "Head ablation and the knockouts (METHODS §15)",
}
QKNormOver = Literal["head", "projection"]  # a norm of each head's q and k, or of the whole projection before the split
QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # queries, keys, values, each [batch, heads, n, head_dim]


FULL_PRECISION = ("float32", "float64")


def dtype_name(dtype) -> str:
    """'float16' for torch.float16 or 'float16'; float32 when a config names none."""
    return "float32" if dtype is None else str(dtype).removeprefix("torch.")


class UnsupportedModelError(ValueError):
    """A statistic that this model's family does not support; the message says which, for what model, and why."""


@dataclass(frozen=True)
class HeadsCall:
    """One call of the module that computes the heads: its module and its arguments by parameter name."""

    module: torch.nn.Module
    arguments: dict  # parameter name -> value, as the call bound them (hidden_states, attention_mask, positions...)

    @property
    def hidden(self) -> torch.Tensor:
        """The heads' input [batch, n, hidden] (the call's first argument)."""
        return self.arguments.get("hidden_states", next(iter(self.arguments.values())))


@dataclass(frozen=True)
class Family:
    """How one encoder family lays out a layer and builds its attention scores (paths are relative to a layer)."""

    name: str
    model_types: tuple[str, ...]
    layers: Callable[[torch.nn.Module], list[torch.nn.Module]]  # base model -> its layer applications, in order
    block: str  # attention block: first input = what the heads read (x, or LN(x) pre-LN); holds `output`
    heads: str  # the module computing q, k, v and the weights; its call carries position inputs
    projections: tuple[str, ...]  # from `heads`: query, key, value; or one fused projection
    output: str  # attention output projection; its input is c [batch, n, heads * head_dim], head h in h*d:(h+1)*d
    norm: str | None  # post-LN: the LayerNorm after attention + residual; pre-LN: the one before attention (None: none)
    post_layer_norm: bool = True
    scores: ScoreKind = "absolute"
    split: Callable[[torch.nn.Module, list[torch.Tensor], int], QKV] = field(default=None)  # type: ignore[assignment]
    positions: Callable[[HeadsCall, QKV], QKV] | None = None  # rotary: q, k (and v) as the dot product sees them
    bias: Callable[[HeadsCall, QKV, float], torch.Tensor | None] | None = None  # logits - scale q.k, [b, h, n, n]
    scale: Callable[[torch.nn.Module, int], float] = lambda _heads, d: d**-0.5
    window: Callable[[object, int], int | None] = lambda _config, _layer: None  # half-width w: |i - j| <= w
    final_norm: str | None = None  # from the base model: applied to the last layer's output
    after_first_layer: str | None = None  # from the base model: f(layer 0 input, its output, 2-D mask) after layer 0
    unbatched: tuple[str, ...] = ()  # layer-call arguments the whole batch shares (replay does not repeat them)
    batch_heads: tuple[str, ...] = ()  # layer-call arguments shaped [batch * heads, ...] (Bloom's ALiBi): repeated
    exact: Callable[[object], dict[Statistic, str]] = lambda _config: {}  # config -> statistics not exact, and why
    attention_norm: str | None = None  # an RMSNorm of the attention output before the residual (Gemma 2 and 3)
    feed_forward_norm: str | None = None  # an RMSNorm of the feed-forward output before the residual (Gemma 2 and 3)
    qk_norms: Callable[[torch.nn.Module], tuple[torch.nn.Module, torch.nn.Module] | None] = lambda _heads: None
    qk_norm_over: QKNormOver = "head"  # "projection": qk_norms read the whole q and k projections (OLMo 2)
    score_cap: Callable[[torch.nn.Module], float | None] = lambda _heads: None  # c of c tanh(logits / c) (Gemma 2)
    keys_from: str | None = None  # cross-attention: the heads call's argument whose projections are the keys and values
    n_heads: Callable[[object], int] | None = None  # config -> this stack's heads (default: the config's count)
    decoder: Family | None = None  # an encoder-decoder's decoder self-attention, laid out in its decoder stack
    cross: Family | None = None  # an encoder-decoder's cross-attention, laid out in its decoder stack

    def part(self, part: Part) -> Family | None:
        """The layout of one attention of an encoder-decoder (this one for "encoder"); None where it has none."""
        return {"encoder": self, "decoder": self.decoder, "cross": self.cross}[part]

    def __post_init__(self) -> None:
        if self.split is None:
            object.__setattr__(self, "split", _separate)


# ------------------------------------------------------------------------------------ splitting projections


def _heads(x: torch.Tensor, d: int) -> torch.Tensor:
    """[batch, n, heads * d] -> [batch, heads, n, d]."""
    b, n, _ = x.shape
    return x.reshape(b, n, -1, d).transpose(1, 2)


def _separate(_heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """Three projections' outputs, heads side by side in each."""
    q, k, v = outputs
    return _heads(q, d), _heads(k, d), _heads(v, d)


def _fused_blocks(_heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """ModernBERT's Wqkv: [q | k | v] along the output, each heads side by side (view(..., 3, heads, d))."""
    (qkv,) = outputs
    b, n, _ = qkv.shape
    q, k, v = qkv.reshape(b, n, 3, -1, d).unbind(2)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def _fused_per_head(heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """DeBERTa's in_proj: per head [q_h | k_h | v_h] (transpose_for_scores then chunk(3)), plus q_bias and v_bias."""
    (qkv,) = outputs
    q, k, v = _heads(qkv, 3 * d).chunk(3, dim=-1)
    return q + _heads(heads_module.q_bias[None, None], d), k, v + _heads(heads_module.v_bias[None, None], d)


def _grouped(_heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """Three projections with grouped-query heads (METHODS §18): query head h reads key and value head h // (H / H_kv)."""
    q, k, v = (_heads(x, d) for x in outputs)
    group = q.shape[1] // k.shape[1]
    return q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def _fused_grouped(heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """Phi-3's qkv_proj: [q | k | v] along the output, H query heads then H_kv key and H_kv value heads."""
    (qkv,) = outputs
    kv_width = heads_module.num_key_value_heads * d
    q, k, v = qkv.split([qkv.shape[-1] - 2 * kv_width, kv_width, kv_width], dim=-1)
    return _grouped(heads_module, [q, k, v], d)


def _fused_interleaved(_heads_module: torch.nn.Module, outputs: list[torch.Tensor], d: int) -> QKV:
    """GPT-NeoX's query_key_value: per head [q_h | k_h | v_h] (view(..., heads, 3 d) then chunk(3))."""
    (qkv,) = outputs
    q, k, v = _heads(qkv, 3 * d).chunk(3, dim=-1)
    return q, k, v


# ------------------------------------------------------------------------------------ position terms


def _model_module(module: torch.nn.Module):
    """The Python module of transformers that defines this layer (its own helper functions are used as they are)."""
    return sys.modules[type(module).__module__]


def _qk_norms(heads: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """The RMSNorm of q and of k (q_norm, k_norm), applied before rotary: per head (Qwen3, Gemma 3), or over the whole
    projection (OLMo 2); None without."""
    q_norm, k_norm = getattr(heads, "q_norm", None), getattr(heads, "k_norm", None)
    return None if q_norm is None or k_norm is None else (q_norm, k_norm)


def split_normed(
    family: Family,
    heads: torch.nn.Module,
    outputs: list[torch.Tensor],
    d: int,
    split=None,
    over: QKNormOver | None = None,
) -> QKV:
    """The projections' outputs split into heads (by `split`, else the family's), q and k through the family's norms:
    over the whole query and key projections before the split (OLMo 2), or over each head after it (Qwen3, Gemma 3);
    `over` in place of the family's own (the found check tries both)."""
    norms, over = family.qk_norms(heads), over or family.qk_norm_over
    if norms is not None and over == "projection":
        outputs = [norms[0](outputs[0]), norms[1](outputs[1]), *outputs[2:]]
    q, k, v = (split or family.split)(heads, outputs, d)
    if norms is not None and over == "head":
        q, k = norms[0](q), norms[1](k)
    return q, k, v


def _attention_softcap(heads: torch.nn.Module) -> float | None:
    """Gemma 2's soft-capping of the logits, c tanh(logits / c) before the mask, where its config sets c."""
    return getattr(heads, "attn_logit_softcapping", None) or None


def _rotary_from_call(call: HeadsCall, qkv: QKV) -> QKV:
    """ModernBERT, Llama and its layout: q and k rotated by the model's apply_rotary_pos_emb with the call's (cos, sin);
    a partial rotary (GPT-NeoX, Phi, StableLM: tables narrower than a head) rotates each head's first dimensions."""
    q, k, v = qkv
    cos, sin = call.arguments["position_embeddings"]
    r = cos.shape[-1]
    rotated = _model_module(call.module).apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin, unsqueeze_dim=1)
    return torch.cat([rotated[0], q[..., r:]], -1), torch.cat([rotated[1], k[..., r:]], -1), v


def _rotary_every_two(call: HeadsCall, qkv: QKV) -> QKV:
    """GPT-J's rotary: the call's (sin, cos) rotate pairs of neighbouring dimensions (rotate_every_two) of each head's
    first dimensions, by the model's own apply_rotary_pos_emb ([batch, n, heads, d] layout)."""
    q, k, v = qkv
    sin, cos = call.arguments["position_embeddings"]
    r, apply = 2 * sin.shape[-1], _model_module(call.module).apply_rotary_pos_emb

    def rotate(x: torch.Tensor) -> torch.Tensor:
        turned = apply(x[..., :r].transpose(1, 2), sin, cos).transpose(1, 2)
        return torch.cat([turned, x[..., r:]], -1)

    return rotate(q), rotate(k), v


def _alibi_bias(call: HeadsCall, qkv: QKV, _scale: float) -> torch.Tensor | None:
    """ALiBi (Bloom, Falcon): the call's per-head linear bias of the key position, [batch * heads, 1, n] -> [b, h, n, n]."""
    alibi = call.arguments.get("alibi")
    if alibi is None:
        return None
    q, k, _ = qkv
    b, h, n, _d = q.shape
    return alibi.reshape(b, h, -1, k.shape[2]).expand(b, h, n, k.shape[2])


def _rotary_roformer(call: HeadsCall, qkv: QKV) -> QKV:
    """RoFormer: q and k (and v when rotary_value) rotated by the model's own apply_rotary_position_embeddings."""
    q, k, v = qkv
    sinusoidal = call.arguments.get("sinusoidal_pos")
    if sinusoidal is None:
        return qkv
    rotate = type(call.module).apply_rotary_position_embeddings
    if call.module.rotary_value:
        return rotate(sinusoidal, q, k, v)
    q, k = rotate(sinusoidal, q, k)
    return q, k, v


def _mpnet_bias(call: HeadsCall, _qkv: QKV, _scale: float) -> torch.Tensor | None:
    """MPNet: the relative position bias the encoder computes once and passes to every layer, [b, h, n, n]."""
    return call.arguments.get("position_bias")


def _t5_bias(call: HeadsCall, qkv: QKV, _scale: float) -> torch.Tensor | None:
    """T5: the relative position bias that the first layer's relative_attention_bias computes (by the module's own
    compute_bias, as its call does when given none) and the stack passes on to every later layer, [b, h, n, n]."""
    q, k, _ = qkv
    bias = call.arguments.get("position_bias")
    if bias is None and call.module.has_relative_attention_bias:
        bias = call.module.compute_bias(q.shape[2], k.shape[2], device=q.device)
    return None if bias is None else bias.expand(q.shape[0], -1, -1, -1)


def _deberta_scale_factor(module: torch.nn.Module) -> int:
    """1 + the number of relative terms (c2p, p2c): the scores are divided by sqrt(d * this)."""
    return 1 + sum(kind in module.pos_att_type for kind in ("c2p", "p2c"))


def _deberta_scale(module: torch.nn.Module, d: int) -> float:
    return 1.0 / math.sqrt(d * _deberta_scale_factor(module))


def _deberta_bias(call: HeadsCall, qkv: QKV, scale: float) -> torch.Tensor | None:
    """DeBERTa v1: c2p + p2c from the module's own disentangled_att_bias (its query pre-divided by the scale)."""
    module, args = call.module, call.arguments
    relative_pos, rel_embeddings = args.get("relative_pos"), args.get("rel_embeddings")
    if not module.relative_attention or relative_pos is None or rel_embeddings is None:
        return None
    q, k, _ = qkv
    factor = _deberta_scale_factor(module)
    return module.disentangled_att_bias(q * scale, k, relative_pos, module.pos_dropout(rel_embeddings), factor)


def _deberta_v2_bias(call: HeadsCall, qkv: QKV, _scale: float) -> torch.Tensor | None:
    """DeBERTa v2/v3: c2p + p2c from the module's own disentangled_attention_bias ([b * h, n, d] layout)."""
    module, args = call.module, call.arguments
    if not module.relative_attention:
        return None
    q, k, _ = qkv
    b, h, n, d = q.shape
    bias = module.disentangled_attention_bias(
        q.reshape(b * h, n, d),
        k.reshape(b * h, n, d),
        args.get("relative_pos"),
        module.pos_dropout(args["rel_embeddings"]),
        _deberta_scale_factor(module),
    )
    return bias.reshape(b, h, n, n)


def _deberta_exact(config) -> dict[Statistic, str]:
    """DeBERTa v1 with talking heads mixes the heads' scores; the neuron view cannot show that as q.k."""
    if getattr(config, "talking_head", False):
        return {"queries_keys": "this DeBERTa mixes the heads' scores (talking heads), which q.k does not show"}
    return {}


# ------------------------------------------------------------------------------------ layer lists


def _at(path: str) -> Callable[[torch.nn.Module], list[torch.nn.Module]]:
    """The layers of the ModuleList at this path of the base model."""
    return lambda encoder: list(encoder.get_submodule(path))


def _albert_layers(encoder: torch.nn.Module) -> list[torch.nn.Module]:
    """ALBERT applies its layer groups num_hidden_layers times (one shared layer in every released checkpoint)."""
    config, groups = encoder.config, encoder.encoder.albert_layer_groups
    per_group = config.num_hidden_layers / config.num_hidden_groups
    return [layer for i in range(config.num_hidden_layers) for layer in groups[int(i / per_group)].albert_layers]


def _modernbert_window(config, layer: int) -> int | None:
    """Local layers attend to keys with |i - j| <= local_attention // 2 (transformers' sliding-window mask)."""
    return config.sliding_window if config.layer_types[layer] == "sliding_attention" else None


def _bert_layout(name: str, model_types: tuple[str, ...], projections=("query", "key", "value"), **rest) -> Family:
    """A family laid out as BERT: encoder.layer[l].attention.{self, output.dense, output.LayerNorm}."""
    return Family(
        name,
        model_types,
        _at("encoder.layer"),
        block="attention",
        heads="attention.self",
        projections=projections,
        output="attention.output.dense",
        norm="attention.output.LayerNorm",
        **rest,
    )


def sliding_window(config, layer: int) -> int | None:
    """A decoder's sliding window as a half-width w (keys with i - j <= w), read from its config: transformers keeps
    keys j > i - sliding_window, so w = sliding_window - 1; per layer where the config lists `layer_types`."""
    size = getattr(config, "sliding_window", None)
    if not size or not getattr(config, "use_sliding_window", True):
        return None
    types = getattr(config, "layer_types", None)
    if types is not None and (layer >= len(types) or types[layer] != "sliding_attention"):
        return None
    return int(size) - 1


def _decoder_exact(_config) -> dict[Statistic, str]:
    """Decoders: the neuron view's queries and keys are exact (under Gemma 2's soft-capping too: they are the model's
    own, and q.k is the score before capping, score_cap_text). Norms (METHODS §12, pre-norm decoders) read the model's
    own weights and values; attribution and ablation replay the model's own layers with their recorded calls (causal
    and sliding masks, rotary tables, soft-capping included)."""
    return {}


def score_cap_text(cap: float | None) -> str | None:
    """A sentence on soft-capped scores (Gemma 2: logits c tanh(s / c)), for the pages that show q and k; None
    without a cap."""
    if not cap:
        return None
    return (
        f"This model soft-caps its attention scores: the softmax reads {cap:g}·tanh(s / {cap:g}), where s (scale × q·k) "
        "is the score before capping. The queries and keys are the model's own; capping keeps each query's order of "
        "keys, so its top key is the one with the largest q·k."
    )


def _opt_exact(config) -> dict[Statistic, str]:
    """OPT-350m puts its LayerNorm after attention and the residual: the pre-norm decomposition and replay of the
    attention block alone do not describe it."""
    reasons: dict[Statistic, str] = {}
    if not getattr(config, "do_layer_norm_before", True):
        why = "this OPT applies its LayerNorm after attention (do_layer_norm_before false), not written here"
        reasons |= {"norms": why, "hta": why}
    return reasons


def _scaling(heads: torch.nn.Module, d: int) -> float:
    """The attention module's own factor of q.k (Gemma 2 and 3: query_pre_attn_scalar^-1/2), else 1/sqrt(d)."""
    return float(getattr(heads, "scaling", d**-0.5))


def _llama_layout(
    name: str, model_types: tuple[str, ...], projections=("q_proj", "k_proj", "v_proj"), **rest
) -> Family:
    """A decoder laid out as Llama: layers[l].{input_layernorm, self_attn.{q,k,v,o}_proj}, pre-norm, rotary from the
    call's position embeddings, grouped-query heads, a sliding window where the config names one."""
    return Family(
        name,
        model_types,
        _at("layers"),
        block="self_attn",
        heads="self_attn",
        projections=projections,
        output="self_attn.o_proj",
        norm=rest.pop("norm", "input_layernorm"),
        post_layer_norm=False,
        scores="rotary",
        split=rest.pop("split", _grouped),
        positions=_rotary_from_call,
        scale=_scaling,
        window=sliding_window,
        final_norm="norm",
        exact=_decoder_exact,
        qk_norms=_qk_norms,
        **rest,
    )


def _bart_attention(name: str, model_types: tuple[str, ...], attention: str, **rest) -> Family:
    """One attention of a stack laid out as BART's: layers[l].{attention.{q,k,v,out}_proj, attention_layer_norm},
    post-LN like BERT (positions added to the embeddings, nothing inside attention), scaled by d^-1/2."""
    return Family(
        name,
        model_types,
        _at("layers"),
        block=attention,
        heads=attention,
        projections=("q_proj", "k_proj", "v_proj"),
        output=f"{attention}.out_proj",
        norm=f"{attention}_layer_norm",
        scale=_scaling,
        **rest,
    )


def _decoder_part_exact(_config) -> dict[Statistic, str]:
    """An encoder-decoder's decoder self-attention: its queries and keys (the neuron view) and its norms (METHODS §11-13,
    §18) are exact; attribution and ablation read the encoder stack."""
    why = "they are computed for the encoder stack of an encoder-decoder (METHODS §18), not its decoder's attentions"
    return {"hta": why, "ablation": why}


CROSS_RESIDUAL = (
    "the residual that cross-attention adds is the target token's own hidden state, none of the source tokens its map "
    "attends to, and the map (target tokens x source tokens) is not square, so nothing splits over its keys or rolls "
    "out through layers; its value-weighted norms (METHODS §11) are exact (METHODS §18)"
)


def _cross_part_exact(config) -> dict[Statistic, str]:
    """An encoder-decoder's cross-attention: queries and keys, and the value-weighted norms of §11 (values from the
    encoder's output); §12-13 have no meaning for it."""
    return _decoder_part_exact(config) | {"residual_ln": CROSS_RESIDUAL}


def _bart_layout(name: str, model_types: tuple[str, ...]) -> Family:
    """An encoder-decoder laid out as BART: its encoder's self_attn; its decoder's self_attn (causal) and encoder_attn
    (queries from the decoder, keys and values from the encoder's output), with the decoder's own head count."""
    heads = lambda config: int(config.decoder_attention_heads)  # noqa: E731
    return _bart_attention(
        name,
        model_types,
        "self_attn",
        decoder=_bart_attention(f"{name} decoder", model_types, "self_attn", n_heads=heads, exact=_decoder_part_exact),
        cross=_bart_attention(
            f"{name} cross-attention",
            model_types,
            "encoder_attn",
            keys_from="key_value_states",
            n_heads=heads,
            exact=_cross_part_exact,
        ),
    )


def _t5_layout(name: str, sublayer: int, attention: str, **rest) -> Family:
    """One attention of a T5 stack: block[l].layer[sublayer].{attention.{q,k,v,o}, layer_norm}, pre-norm (an RMSNorm
    without bias), q.k unscaled; `bias=_t5_bias` where the attention adds a relative position bias (the encoder's
    bidirectional, the decoder's unidirectional buckets: the module's own compute_bias); cross-attention adds none."""
    path = f"layer.{sublayer}.{attention}"
    return Family(
        name,
        ("t5",),
        _at("block"),
        block=path,
        heads=path,
        projections=("q", "k", "v"),
        output=f"{path}.o",
        norm=f"layer.{sublayer}.layer_norm",
        post_layer_norm=False,
        scores="relative_bias" if "bias" in rest else "absolute",
        scale=_scaling,  # 1: T5 does not scale q.k
        final_norm="final_layer_norm",
        unbatched=("position_bias",),
        **rest,
    )


FAMILIES: tuple[Family, ...] = (
    _bert_layout("BERT", ("bert", "roberta", "xlm-roberta", "camembert", "electra", "ernie")),
    Family(
        "DistilBERT",
        ("distilbert",),
        _at("transformer.layer"),
        block="attention",
        heads="attention",
        projections=("q_lin", "k_lin", "v_lin"),
        output="attention.out_lin",
        norm="sa_layer_norm",
    ),
    Family(
        "ALBERT",
        ("albert",),
        _albert_layers,
        block="attention",
        heads="attention",
        projections=("query", "key", "value"),
        output="attention.dense",
        norm="attention.LayerNorm",
    ),
    _bert_layout("RoFormer", ("roformer",), scores="rotary", positions=_rotary_roformer),
    Family(
        "MPNet",
        ("mpnet",),
        _at("encoder.layer"),
        block="attention",
        heads="attention.attn",
        projections=("q", "k", "v"),
        output="attention.attn.o",
        norm="attention.LayerNorm",
        scores="relative_bias",
        bias=_mpnet_bias,
    ),
    _bert_layout(
        "DeBERTa",
        ("deberta",),
        projections=("in_proj",),
        scores="disentangled",
        split=_fused_per_head,
        bias=_deberta_bias,
        scale=_deberta_scale,
        unbatched=("relative_pos", "rel_embeddings"),
        exact=_deberta_exact,
    ),
    _bert_layout(
        "DeBERTa-v2",
        ("deberta-v2",),
        projections=("query_proj", "key_proj", "value_proj"),
        scores="disentangled",
        bias=_deberta_v2_bias,
        scale=_deberta_scale,
        unbatched=("relative_pos", "rel_embeddings"),
        after_first_layer="encoder.conv",  # deberta-v2-xlarge's ConvLayer (None in v3)
    ),
    Family(
        "ModernBERT",
        ("modernbert",),
        _at("layers"),
        block="attn",
        heads="attn",
        projections=("Wqkv",),
        output="attn.Wo",
        norm="attn_norm",
        post_layer_norm=False,
        scores="rotary",
        split=_fused_blocks,
        positions=_rotary_from_call,
        window=_modernbert_window,
        final_norm="final_norm",
    ),
    _llama_layout("Llama", ("llama", "mistral", "qwen2", "qwen3", "gemma")),
    _llama_layout(
        "Gemma 2",
        ("gemma2", "gemma3_text"),
        attention_norm="post_attention_layernorm",
        feed_forward_norm="post_feedforward_layernorm",
        score_cap=_attention_softcap,
    ),
    _llama_layout(
        "OLMo 2",
        ("olmo2",),
        norm=None,  # the heads and the feed-forward read the residual stream itself
        attention_norm="post_attention_layernorm",
        feed_forward_norm="post_feedforward_layernorm",
        qk_norm_over="projection",
    ),
    _llama_layout("Phi-3", ("phi3",), projections=("qkv_proj",), split=_fused_grouped),
    Family(
        "GPT-NeoX",
        ("gpt_neox",),
        _at("layers"),
        block="attention",
        heads="attention",
        projections=("query_key_value",),
        output="attention.dense",
        norm="input_layernorm",
        post_layer_norm=False,
        scores="rotary",
        split=_fused_interleaved,
        positions=_rotary_from_call,
        scale=_scaling,
        final_norm="final_layer_norm",
        exact=_decoder_exact,
    ),
    Family(
        "OPT",
        ("opt",),
        _at("decoder.layers"),
        block="self_attn",
        heads="self_attn",
        projections=("q_proj", "k_proj", "v_proj"),
        output="self_attn.out_proj",
        norm="self_attn_layer_norm",
        post_layer_norm=False,
        scale=_scaling,  # OPT multiplies its queries by it before the product
        final_norm="decoder.final_layer_norm",
        exact=_opt_exact,
    ),
    Family(
        "GPT-2",
        ("gpt2",),
        _at("h"),
        block="attn",
        heads="attn",
        projections=("c_attn",),
        output="attn.c_proj",
        norm="ln_1",
        post_layer_norm=False,
        split=_fused_blocks,
        final_norm="ln_f",
        exact=_decoder_exact,
    ),
    _t5_layout(
        "T5",
        0,
        "SelfAttention",
        bias=_t5_bias,
        decoder=_t5_layout("T5 decoder", 0, "SelfAttention", bias=_t5_bias, exact=_decoder_part_exact),
        cross=_t5_layout(
            "T5 cross-attention", 1, "EncDecAttention", keys_from="key_value_states", exact=_cross_part_exact
        ),
    ),
    _bart_layout("BART", ("bart",)),
    _bart_layout("Marian", ("marian",)),
)
# position ids start after the padding id: the longest input is max_position_embeddings - this
RESERVED_POSITIONS = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "mpnet": 2}
BY_MODEL_TYPE: dict[str, Family] = {t: f for f in FAMILIES for t in f.model_types}
SUPPORTED_NAMES = ", ".join(
    ["BERT", "RoBERTa", "XLM-RoBERTa", "CamemBERT", "ELECTRA", "ERNIE"] + [f.name for f in FAMILIES[1:]]
)


def layer_window(config, layer: int) -> int | None:
    """The half-width of a layer's local attention (ModernBERT's local layers, decoders' sliding windows), or None."""
    family = family_for(config)
    return family.window(config, layer) if family is not None else sliding_window(config, layer)


def family_of(model_type: str) -> Family | None:
    """The listed family of a model type, or None when it is not in the list (its layout may be found: family_for)."""
    return BY_MODEL_TYPE.get(model_type)


@dataclass(frozen=True)
class Found:
    """A layout found in one model and checked against its own forward pass (attnlib.core.found): the family as found
    (None: no known shape binds), its `exact` naming the statistics whose parts differ; and what was found, in words."""

    family: Family | None
    parts: dict[str, str]


_FOUND: dict[int, Found] = {}  # id(config) -> what was found in its model (dropped with the config)


def register_found(config, found: Found) -> None:
    """Keep what was found for the model of this config (its own config object, not the model type: two checkpoints
    of one type may differ)."""
    key = id(config)
    if key not in _FOUND:
        weakref.finalize(config, _FOUND.pop, key, None)
    _FOUND[key] = found


def found_for(config) -> Found | None:
    """What was found in the model of this config, or None for a listed family (or a model not checked)."""
    return None if config.model_type in BY_MODEL_TYPE else _FOUND.get(id(config))


def family_for(config) -> Family | None:
    """The model's family: the listed one of its type, or the layout found in it and checked; None when neither."""
    found = found_for(config)
    return BY_MODEL_TYPE.get(config.model_type) or (found.family if found is not None else None)


def unsupported_reason(config, statistic: Statistic, part: Part = "encoder") -> str | None:
    """Why a statistic cannot be computed exactly for a model with this config (for an encoder-decoder's `part`), in
    words; None when it can."""
    family = family_for(config)
    what = STATISTICS[statistic]
    kept = dtype_name(getattr(config, "dtype", None))
    if statistic != "queries_keys" and kept not in FULL_PRECISION:
        return (
            f"Norms, attribution and ablations run in float32, and this model's weights were kept in {kept}, as saved: "
            "load it in float32 (the default; leave out --model-dtype saved)."
        )
    if family is None:
        tried = " and finds none of their shapes in this model" if found_for(config) is not None else ""
        return (
            f"{what} are not available for '{config.model_type}' models: attnlib knows where the projections and "
            f"LayerNorms are only for {SUPPORTED_NAMES}{tried}. Attention weights, and every statistic made from them "
            "alone, work for this model."
        )
    laid_out = family.part(part)
    if laid_out is None:
        return (
            f"{what} are not available for the {part} attention of {family.name} models: attnlib has no layout of it."
        )
    exact = laid_out.exact(config)
    reason = exact.get(statistic) or (exact.get("norms") if statistic == "residual_ln" else None)
    if reason is None:
        return None
    if config.model_type not in BY_MODEL_TYPE:
        where = "" if part == "encoder" else f"the {part} attention of "
        return (
            f"{what} are not available for {where}this '{config.model_type}' model (attnlib found the layout of "
            f"{family.name.removesuffix('-shaped')} models in it): {reason}."
        )
    if part == "encoder":
        return f"{what} are not exact for this model: {reason}."
    return f"{what} are not available for the {part} attention of {family.name} models: {reason}."


def local_layers_text(windows: Sequence[int | None]) -> str | None:
    """A sentence naming the local layers (1-based) and their windows, or None when every layer is global."""
    by_width: dict[int, list[int]] = {}
    for layer, w in enumerate(windows):
        if w is not None:
            by_width.setdefault(w, []).append(layer + 1)
    if not by_width:
        return None
    parts = [
        f"in layer{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))} each query attends only to keys "
        f"within ±{w} tokens"
        for w, layers in sorted(by_width.items())
    ]
    n_global = sum(w is None for w in windows)
    rest = {0: "", 1: "; the other layer attends to every token"}.get(
        n_global, f"; the other {n_global} layers attend to every token"
    )
    return f"Local attention (a sliding window): {'; '.join(parts)}{rest}."


# ------------------------------------------------------------------------------------ one model's layout


@dataclass(frozen=True)
class LayerSite:
    """One layer application's modules (ALBERT's are the same objects at every index)."""

    index: int  # 0-based, as in the model's attentions[index]
    layer: torch.nn.Module
    block: torch.nn.Module
    heads: torch.nn.Module
    projections: tuple[torch.nn.Linear, ...]  # query, key, value; or the one fused projection
    output: torch.nn.Linear
    # post-LN: after attention + residual; pre-LN: before attention (an Identity where there is none: ModernBERT's layer
    # 0, OLMo 2's every layer)
    norm: torch.nn.Module
    window: int | None  # local attention: keys with |i - j| <= window; None: global
    attention_norm: torch.nn.Module | None = None  # Gemma 2 and 3, OLMo 2: the RMSNorm of the attention output
    feed_forward_norm: torch.nn.Module | None = None  # Gemma 2 and 3, OLMo 2: the RMSNorm of the feed-forward output


@dataclass(frozen=True)
class Layout:
    """A family bound to one encoder's modules."""

    family: Family
    sites: tuple[LayerSite, ...]
    n_heads: int
    head_dim: int
    final_norm: torch.nn.Module | None
    after_first_layer: torch.nn.Module | None  # DeBERTa-v2's convolution after layer 0, where the model has one

    def qkv(self, site: LayerSite, outputs: list[torch.Tensor], call: HeadsCall) -> QKV:
        """Queries, keys and values [batch, heads, n, d] as the dot product and the weights see them, from the
        projections' outputs of one call (after the projection bias, the norms of q and k and rotary where the
        family applies them)."""
        qkv = split_normed(self.family, site.heads, outputs, self.head_dim)
        return qkv if self.family.positions is None else self.family.positions(call, qkv)

    def scale(self, site: LayerSite) -> float:
        """The factor of q.k in the logits."""
        return self.family.scale(site.heads, self.head_dim)

    def bias(self, call: HeadsCall, qkv: QKV, scale: float) -> torch.Tensor | None:
        """What the logits add to scale * q.k before the mask (DeBERTa's c2p + p2c, MPNet's and T5's position bias)."""
        return None if self.family.bias is None else self.family.bias(call, qkv, scale)


_LAYOUTS: weakref.WeakKeyDictionary[torch.nn.Module, dict[Part, Layout]] = weakref.WeakKeyDictionary()


def layout(encoder: torch.nn.Module, statistic: Statistic = "norms", part: Part = "encoder") -> Layout:
    """The layout of a base model (found once per model), or of an encoder-decoder's decoder or cross attention in its
    decoder stack (`encoder` is then that stack); UnsupportedModelError, naming the statistic, when its family is
    unknown or not exact for it, or its modules are not where the family keeps them."""
    reason = unsupported_reason(encoder.config, statistic, part)
    if reason is not None:
        raise UnsupportedModelError(reason)
    bound = _LAYOUTS.setdefault(encoder, {})
    if part not in bound:
        found = family_for(encoder.config)
        family = found.part(part) if found is not None else None
        assert family is not None  # unsupported_reason said why otherwise
        bound[part] = _bind(encoder, family)
    return bound[part]


def _bind(encoder: torch.nn.Module, family: Family) -> Layout:
    """Find the family's modules in this encoder."""
    config = encoder.config
    try:
        layers = family.layers(encoder)
        sites = []
        for index, layer in enumerate(layers):
            heads = layer.get_submodule(family.heads)
            sites.append(
                LayerSite(
                    index=index,
                    layer=layer,
                    block=layer.get_submodule(family.block),
                    heads=heads,
                    projections=tuple(heads.get_submodule(p) for p in family.projections),
                    output=layer.get_submodule(family.output),
                    norm=torch.nn.Identity() if family.norm is None else layer.get_submodule(family.norm),
                    window=family.window(config, index),
                    attention_norm=_optional_submodule(layer, family.attention_norm),
                    feed_forward_norm=_optional_submodule(layer, family.feed_forward_norm),
                )
            )
        final_norm = _optional_submodule(encoder, family.final_norm)
        after_first = _optional_submodule(encoder, family.after_first_layer)
    except (AttributeError, IndexError, TypeError) as exc:
        raise UnsupportedModelError(
            f"This '{config.model_type}' model does not have the layout of {family.name} models "
            f"({exc}); its norms and attribution cannot be computed."
        ) from exc
    if family.n_heads is not None:
        n_heads = family.n_heads(config)
    else:
        n_heads = int(getattr(config, "num_attention_heads", None) or config.n_heads)
    width = linear_weight(sites[0].output).shape[1]
    return Layout(family, tuple(sites), n_heads, width // n_heads, final_norm, after_first)


def _optional_submodule(encoder: torch.nn.Module, path: str | None) -> torch.nn.Module | None:
    """The module at this path of the base model; None for no path, or where the model keeps None there."""
    if path is None:
        return None
    parent, _, name = path.rpartition(".")
    return getattr(encoder.get_submodule(parent) if parent else encoder, name)


def bound_arguments(module: torch.nn.Module, args: Sequence, kwargs: dict) -> dict:
    """A module call's arguments by parameter name (positional ones named by the module's forward signature)."""
    try:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
    except TypeError:
        return dict(kwargs)
    arguments = dict(bound.arguments)
    arguments.update(arguments.pop("kwargs", {}) or {})
    return arguments


def is_linear(module: torch.nn.Module) -> bool:
    """Whether the module is an affine map of its last dimension: a Linear, or GPT-2's Conv1D."""
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def linear_weight(module: torch.nn.Module) -> torch.Tensor:
    """The [out, in] weight of a Linear, or of GPT-2's Conv1D (which keeps it as [in, out]: y = x W + b)."""
    return module.weight.T if type(module).__name__ == "Conv1D" else module.weight


def rms_norm_gamma(module: torch.nn.Module, hidden: int, eps: float) -> torch.Tensor:
    """The per-coordinate factor of an RMSNorm, read off its own output for a row of ones (rms 1): Llama's weight,
    Gemma's 1 + weight."""
    ones = torch.ones(1, hidden, dtype=torch.float32, device=module.weight.device)
    with torch.no_grad():
        return (module(ones)[0].float() * math.sqrt(1.0 + eps)).detach()


def layer_norm_parameters(module: torch.nn.Module, hidden: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(gamma, beta, eps) of a LayerNorm (torch's, DeBERTa's own, or one without weight or bias)."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    eps = next((e for e in (getattr(module, "eps", None), getattr(module, "variance_epsilon", None)) if e), 0.0)
    return (
        torch.ones(hidden) if weight is None else weight.detach(),
        torch.zeros(hidden) if bias is None else bias.detach(),
        float(eps),
    )
