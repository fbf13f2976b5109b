"""An encoder-decoder's decoder self-attention and cross-attention rebuilt from the model's own modules, found by
paths written here (read off the transformers sources, not attnlib's families): the tests of their queries, keys and
neuron view compare the library with it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from support.models import move_off_initial, tiny_model, tokenizer_for
from support.tolerances import EPS32

# per kind, in the decoder stack: layer l's self-attention and cross-attention modules, and their q and k projections
ATTENTION = {
    "t5": {"decoder": "block.{}.layer.0.SelfAttention", "cross": "block.{}.layer.1.EncDecAttention"},
    "bart": {"decoder": "layers.{}.self_attn", "cross": "layers.{}.encoder_attn"},
    "marian": {"decoder": "layers.{}.self_attn", "cross": "layers.{}.encoder_attn"},
}
QK = {"t5": ("q", "k"), "bart": ("q_proj", "k_proj"), "marian": ("q_proj", "k_proj")}
PARENT = {"mt5": "t5", "mbart": "bart"}  # the found layouts' kinds (support.models.FOUND_ENCODER_DECODER_KINDS): paths


def parent(kind: str) -> str:
    """The listed kind whose module paths this kind shares (mT5: T5's; mBART: BART's), or the kind itself."""
    return PARENT.get(kind, kind)


def own_scale(kind: str, head_dim: int) -> float:
    """The factor of q.k in each family's eager attention: T5 none (its bias carries the positions), else d^-1/2."""
    return 1.0 if parent(kind) == "t5" else head_dim**-0.5


@dataclass
class OwnPart:
    """One part, float64, from the model's forward pass: queries [layers, heads, n_query, d], keys [layers, heads,
    n_key, d], the position bias that T5's attention module returns ([layers, heads, n_query, n_key]; None for BART
    and Marian), the logits scale * q.k + bias before the mask and the model's own attentions of the part."""

    queries: np.ndarray
    keys: np.ndarray
    bias: np.ndarray | None
    logits: np.ndarray
    attentions: np.ndarray


def own_part(lm, kind: str, part: str, source_ids: list[int], target_ids: list[int]) -> OwnPart:
    """The part's queries and keys from each attention module's own inputs (hidden_states; cross: key_value_states,
    the encoder's output) through its own q and k projections, in the model's forward pass for these ids."""
    q_name, k_name = QK[parent(kind)]
    d, decoder = lm.facts.head_dim, lm.seq2seq.get_decoder()
    queries, keys, biases = [], [], []

    def keep(attention, args, kwargs, out):
        x = args[0] if args else kwargs["hidden_states"]
        kv = kwargs["key_value_states"] if part == "cross" else x
        for found, name, states in ((queries, q_name, x), (keys, k_name, kv)):
            found.append(getattr(attention, name)(states)[0].reshape(states.shape[1], -1, d).transpose(0, 1))
        if parent(kind) == "t5":
            biases.append(out[1][0].expand(len(queries[-1]), -1, -1))  # T5Attention returns (output, bias, weights)

    path = ATTENTION[parent(kind)][part]
    n_layers = len(decoder.get_submodule(path.partition(".{}")[0]))
    modules = [decoder.get_submodule(path.format(l)) for l in range(n_layers)]
    handles = [m.register_forward_hook(keep, with_kwargs=True) for m in modules]
    try:
        with torch.no_grad():
            out = lm.seq2seq(
                input_ids=torch.tensor([source_ids]),
                decoder_input_ids=torch.tensor([target_ids]),
                output_attentions=True,
                use_cache=False,
            )
    finally:
        for handle in handles:
            handle.remove()
    q, k = (torch.stack(found).double().numpy() for found in (queries, keys))
    bias = torch.stack(biases).double().numpy() if biases else None
    logits = own_scale(kind, d) * np.einsum("lhid,lhjd->lhij", q, k) + (0 if bias is None else bias)
    own = out.decoder_attentions if part == "decoder" else out.cross_attentions
    return OwnPart(q, k, bias, logits, torch.stack([a[0] for a in own]).double().numpy())


def masked_softmax(logits: np.ndarray, causal: bool) -> np.ndarray:
    """Softmax over the last axis, keys after the query (j > i) left out when causal."""
    if causal:
        n_query, n_key = logits.shape[-2:]
        logits = np.where(np.tril(np.ones((n_query, n_key), bool)), logits, -np.inf)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def softmax_tolerance(queries: np.ndarray, keys: np.ndarray, scale, bias: np.ndarray | None) -> np.ndarray:
    """How far the model's float32 softmax of scale * q.k + bias may be from the exact one, per row [..., n_query, 1]:
    each logit's float32 dot product of d terms, its scaling and the bias' addition are within (d + 2) eps M of the
    exact one, M = scale sum|q_c k_c| + |bias| (support.tolerances), which moves each probability by at most twice the
    largest logit error; softmax's own float32 exp, sum and division add (n + 4) eps."""
    d, n = queries.shape[-1], keys.shape[-2]
    magnitude = np.abs(scale) * np.einsum("...id,...jd->...ij", np.abs(queries), np.abs(keys))
    if bias is not None:
        magnitude = magnitude + np.abs(bias)
    return 2 * (d + 2) * EPS32 * magnitude.max(-1, keepdims=True) + (n + 4) * EPS32


# per kind, in the decoder stack: the value and output projections of each attention module, and for the decoder's
# self-attention the module whose output is its sublayer's (T5: the pre-norm sublayer, x + attention; BART, Marian:
# the LayerNorm after the residual, whose input is u)
VO = {"t5": ("v", "o"), "bart": ("v_proj", "out_proj"), "marian": ("v_proj", "out_proj")}
SUBLAYER = {
    "t5": "block.{}.layer.0",
    "bart": "layers.{}.self_attn_layer_norm",
    "marian": "layers.{}.self_attn_layer_norm",
}


@dataclass
class OwnValues:
    """One part's value side, float64, from the model's own forward pass, per layer: each head's f_h(x_j) = v_j W_O^h
    [heads, n_key, hidden] from the attention module's own value projection of its own keys' input (cross: the
    encoder's output) and the rows of its output projection's weight, that projection's bias b_O [hidden] and output
    [n_query, hidden], and for the decoder the sublayer's input (T5: x; BART, Marian: u, the LayerNorm's input) and
    output [n_query, hidden]."""

    vectors: list[np.ndarray]
    out_bias: list[np.ndarray]
    projected: list[np.ndarray]
    sublayer_input: list[np.ndarray]
    sublayer_output: list[np.ndarray]


def own_values(lm, kind: str, part: str, source_ids: list[int], target_ids: list[int]) -> OwnValues:
    """OwnValues of a part in the model's forward pass for these ids (hooks on the paths written here)."""
    v_name, o_name = VO[parent(kind)]
    d, decoder = lm.facts.head_dim, lm.seq2seq.get_decoder()
    found = OwnValues([], [], [], [], [])

    def keep_values(attention, args, kwargs, _out):
        x = args[0] if args else kwargs["hidden_states"]
        states = kwargs["key_value_states"] if part == "cross" else x
        v = getattr(attention, v_name)(states)[0].double()  # [n_key, heads * d]
        o = getattr(attention, o_name)
        w = o.weight.detach().double()  # [hidden, heads * d]
        heads = w.shape[1] // d
        by_head = v.reshape(len(v), heads, d).transpose(0, 1)  # [heads, n_key, d]
        found.vectors.append(torch.einsum("hjd,chd->hjc", by_head, w.reshape(-1, heads, d)).numpy())
        found.out_bias.append(np.zeros(w.shape[0]) if o.bias is None else o.bias.detach().double().numpy())

    def keep_projection(_module, _args, out):
        found.projected.append(out[0].double().numpy())

    def keep_sublayer(_module, args, kwargs, out):
        found.sublayer_input.append((args[0] if args else kwargs["hidden_states"])[0].double().numpy())
        found.sublayer_output.append((out[0] if isinstance(out, tuple) else out)[0].double().numpy())

    path = ATTENTION[parent(kind)][part]
    n_layers = len(decoder.get_submodule(path.partition(".{}")[0]))
    attentions = [decoder.get_submodule(path.format(l)) for l in range(n_layers)]
    handles = [m.register_forward_hook(keep_values, with_kwargs=True) for m in attentions]
    handles += [getattr(m, o_name).register_forward_hook(keep_projection) for m in attentions]
    if part == "decoder":
        handles += [
            decoder.get_submodule(SUBLAYER[parent(kind)].format(l)).register_forward_hook(
                keep_sublayer, with_kwargs=True
            )
            for l in range(n_layers)
        ]
    try:
        with torch.no_grad():
            lm.seq2seq(
                input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids]), use_cache=False
            )
    finally:
        for handle in handles:
            handle.remove()
    return found


def moved_off_encoder_decoder(kind: str, folder):
    """A tiny random encoder-decoder of this kind, loaded by attnlib, with every bias and norm weight moved off its
    initial value, so that a bias left out, a misplaced gamma or the wrong LayerNorm's input changes what is compared."""
    from attnlib.core.model import load_model

    tokenizer = tokenizer_for(kind)
    move_off_initial(tiny_model(kind, tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder))
