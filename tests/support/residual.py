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
