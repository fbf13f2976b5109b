"""The model's own forward pass of a tiny model of each kind, captured with hooks on modules named by path here (not by
attnlib's layouts), and each head's value vectors computed directly from the projections' weights: what the residual
decomposition and the contributions (METHODS §21) are held against (core/test_residual.py, stats/test_routes.py)."""

from __future__ import annotations

from pathlib import Path

import torch

from attnlib.core.model import LoadedModel, load_model
from attnlib.core.runner import encode, model_inputs
from support.models import move_off_initial, save_tiny

SENTENCE = "The cat sat on the mat and the dog sat too."
# layer path; the module whose output the attention block adds; the one whose input is the whole after attention; the
# feed-forward block's (output; BERT: the second LayerNorm, whose input is the feed-forward node's whole)
PATHS = {
    "gpt2": ("h", "attn", "ln_2", "mlp"),
    "llama": ("layers", "self_attn", "post_attention_layernorm", "mlp"),
    "gemma2": ("layers", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"),
    "gpt-neox": ("layers", "attention", None, "mlp"),
    "gptj": ("h", "attn", None, "mlp"),
    "bert": ("encoder.layer", "attention.output.dense", "attention.output.LayerNorm", "output.LayerNorm"),
}


def model_pass(kind: str, folder: Path) -> dict:
    """A tiny model of this kind (biases and norms moved off their initial values), its batch of SENTENCE, and what its
    own forward pass gave: `own` (hidden states, attentions) and `seen` ((layer, path) -> (input, output))."""
    save_tiny(kind, folder)
    lm = load_model(str(folder))
    move_off_initial(lm.encoder)
    batch = model_inputs(lm, [encode(lm, SENTENCE)])
    layers_path, *named = PATHS[kind]
    seen: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for l, layer in enumerate(lm.encoder.get_submodule(layers_path)):
        for path in filter(None, named):
            module = layer.get_submodule(path)
            keep = lambda _m, args, kwargs, out, key=(l, path): seen.__setitem__(  # noqa: E731
                key,
                (
                    (args[0] if args else next(iter(kwargs.values()))).detach(),
                    (out if isinstance(out, torch.Tensor) else out[0]).detach(),
                ),
            )
            handles.append(module.register_forward_hook(keep, with_kwargs=True))
    try:
        with torch.no_grad():
            own = lm.encoder(**batch, output_hidden_states=True, output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    return dict(kind=kind, lm=lm, batch=batch, own=own, seen=seen, layers=layers_path, named=named)


def direct_values(kind: str, lm: LoadedModel, layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """f_h(N1(x_j)) [H, n, d] from the weights read by path: the value projection (its bias), head h's key/value head
    (grouped-query: h // group), and head h's rows of the output projection."""
    config = lm.encoder.config
    H = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_head
    with torch.no_grad():
        if kind == "gpt2":
            d = x.shape[-1]
            v = layer.ln_1(x) @ layer.attn.c_attn.weight[:, 2 * d :] + layer.attn.c_attn.bias[2 * d :]
            w_o = layer.attn.c_proj.weight  # Conv1D: [in, out]
        elif kind == "bert":
            v = layer.attention.self.value(x)
            w_o = layer.attention.output.dense.weight.T
        elif kind == "gpt-neox":
            qkv = layer.attention.query_key_value(layer.input_layernorm(x))
            dh = qkv.shape[-1] // (3 * H)
            v = qkv.view(x.shape[0], H, 3 * dh)[..., 2 * dh :].reshape(x.shape[0], H * dh)
            w_o = layer.attention.dense.weight.T
        elif kind == "gptj":
            v = layer.attn.v_proj(layer.ln_1(x))
            w_o = layer.attn.out_proj.weight.T
        else:
            v = layer.self_attn.v_proj(layer.input_layernorm(x))
            w_o = layer.self_attn.o_proj.weight.T
        dh = w_o.shape[0] // H
        kv = v.view(x.shape[0], -1, dh).transpose(0, 1)  # [H_kv, n, dh]
        kv = kv.repeat_interleave(H // kv.shape[0], dim=0)
        return torch.einsum("hnk,hkd->hnd", kv, w_o.reshape(H, dh, -1))


SOURCE, TARGET = SENTENCE, "A dog sat down."
# an encoder-decoder's decoder layers by path: the layers; each self-attention's and cross-attention's output projection
# and the cross-attention's value projection; post-norm: the norms after self-attention, cross-attention and the
# feed-forward block; pre-norm: the module whose input is the state the feed-forward block adds to
DECODER_PATHS = {
    "t5": dict(layers="block", self_out="layer.0.SelfAttention.o", cross_out="layer.1.EncDecAttention.o",
               cross_v="layer.1.EncDecAttention.v", ffn_in="layer.2"),
    "bart": dict(layers="layers", self_out="self_attn.out_proj", cross_out="encoder_attn.out_proj",
                 cross_v="encoder_attn.v_proj", self_norm="self_attn_layer_norm",
                 cross_norm="encoder_attn_layer_norm", ffn_norm="final_layer_norm"),
    "mbart": dict(layers="layers", self_out="self_attn.out_proj", cross_out="encoder_attn.out_proj",
                  cross_v="encoder_attn.v_proj", ffn_in="final_layer_norm"),
}  # fmt: skip
DECODER_PATHS |= {"mt5": DECODER_PATHS["t5"], "marian": DECODER_PATHS["bart"]}


def seq2seq_pass(kind: str, folder: Path) -> dict:
    """A tiny encoder-decoder of this kind (moved off its initial values), SOURCE and TARGET, and what the whole
    model's own pass gave: `own` (its decoder's hidden states and both attentions, the encoder's output, the logits)
    and `seen` ((layer, name) -> (input, output)) of the modules named by path in DECODER_PATHS."""
    from attnlib.core.seq2seq import encode_target, source_inputs

    save_tiny(kind, folder)
    lm = load_model(str(folder))
    assert lm.seq2seq is not None
    move_off_initial(lm.seq2seq)
    source, target = encode(lm, SOURCE), encode_target(lm, TARGET)
    paths = dict(DECODER_PATHS[kind])
    layers = lm.seq2seq.get_decoder().get_submodule(paths.pop("layers"))
    seen: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
    handles = []
    for l, layer in enumerate(layers):
        for name, path in paths.items():
            keep = lambda _m, args, kwargs, out, key=(l, name): seen.__setitem__(  # noqa: E731
                key,
                (
                    (args[0] if args else kwargs["hidden_states"]).detach()[0],
                    (out if isinstance(out, torch.Tensor) else out[0]).detach()[0],
                ),
            )
            handles.append(layer.get_submodule(path).register_forward_hook(keep, with_kwargs=True))
    try:
        with torch.no_grad():
            own = lm.seq2seq(**source_inputs(lm, source), decoder_input_ids=torch.tensor([target.input_ids]),
                             output_hidden_states=True, output_attentions=True, use_cache=False)  # fmt: skip
    finally:
        for h in handles:
            h.remove()
    return dict(kind=kind, lm=lm, source=source, target=target, own=own, seen=seen, layers=layers, paths=paths)
