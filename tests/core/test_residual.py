"""The residual decomposition (attnlib.core.residual, METHODS §21) against the model's own forward pass: its hidden
states, its attention weights, each sublayer's output captured with hooks on modules named by path in the test, and
each head's value vector computed directly from the value projection's and output projection's weights read by path
(GPT-2: LayerNorm, fused Conv1D, biases; Llama: RMSNorm, grouped-query; GPT-NeoX and GPT-J: parallel blocks; Gemma 2:
the RMSNorm of the attention output; BERT: post-norm)."""

from __future__ import annotations

import pytest
import torch

from attnlib.core.model import load_model
from attnlib.core.residual import decompose
from attnlib.core.runner import encode, model_inputs
from support.models import move_off_initial, save_tiny
from support.tolerances import FORWARD_RTOL

SENTENCE = "The cat sat on the mat and the dog sat too."
# (layer path, what the attention block adds, the whole after attention's input, the feed-forward output or None)
PATHS = {
    "gpt2": ("h", "attn", "ln_2", "mlp"),
    "llama": ("layers", "self_attn", "post_attention_layernorm", "mlp"),
    "gemma2": ("layers", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"),
    "gpt-neox": ("layers", "attention", None, "mlp"),
    "gptj": ("h", "attn", None, "mlp"),
    "bert": ("encoder.layer", "attention.output.dense", "attention.output.LayerNorm", "output.LayerNorm"),
}


@pytest.fixture(scope="module", params=sorted(PATHS))
def decomposed(request, tmp_path_factory):
    """A tiny model of each kind (biases and norms moved off their initial values), its decomposition of SENTENCE,
    and what its own forward pass gave: hidden states, attentions and each named module's input and output."""
    kind = request.param
    folder = save_tiny(kind, tmp_path_factory.mktemp(f"residual-{kind}"))
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
    residual = decompose(lm, batch)
    return dict(kind=kind, lm=lm, own=own, seen=seen, residual=residual, layers=layers_path, named=named)


def close(a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> None:
    """Equal within the forward pass's float32 error, relative to the larger magnitude compared."""
    size = max(float(a.abs().max()), float(b.abs().max()), 1.0) * scale
    assert float((a - b).abs().max()) <= 4 * FORWARD_RTOL * size


def test_layer_inputs_outputs_and_weights_are_the_models_own(decomposed):
    own, residual = decomposed["own"], decomposed["residual"]
    states = own.hidden_states
    close(residual.embeddings, states[0][0])
    for parts in residual.layers:
        close(parts.x, states[parts.layer][0])
        close(parts.weights, own.attentions[parts.layer][0])
        last = parts.layer == len(residual.layers) - 1
        if last and residual.final_norm is not None:
            with torch.no_grad():
                close(residual.final_norm(parts.out[None])[0], states[-1][0])
        else:
            close(parts.out, states[parts.layer + 1][0])


def test_sublayer_wholes_are_the_models_own(decomposed):
    """mid, carried and the feed-forward part against the inputs and outputs of the model's own modules."""
    kind, seen, residual = decomposed["kind"], decomposed["seen"], decomposed["residual"]
    added, after_attention, ffn = decomposed["named"]
    for parts in residual.layers:
        l = parts.layer
        if kind == "bert":
            u, normed = seen[(l, after_attention)]
            close(parts.mid, u[0])
            close(parts.carried, normed[0])
            close(parts.ffn_whole, seen[(l, ffn)][0][0])
            continue
        close(parts.mid, parts.x + seen[(l, added)][1][0])
        if after_attention is not None:
            close(parts.mid, seen[(l, after_attention)][0][0])
        close(parts.ffn, seen[(l, ffn)][1][0])
        close(parts.ffn_whole, parts.out)


def _direct_values(kind: str, lm, layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """f_h(N1(x_j)) [H, n, d] from the weights read by path: the value projection (its bias), head h's key/value head
    (grouped-query: h // group), and head h's rows of the output projection."""
    config = lm.encoder.config
    H = config.num_attention_heads if hasattr(config, "num_attention_heads") else config.n_head
    if kind == "gpt2":
        d = x.shape[-1]
        normed = layer.ln_1(x)
        v = normed @ layer.attn.c_attn.weight[:, 2 * d :] + layer.attn.c_attn.bias[2 * d :]
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


def test_values_are_the_value_and_output_projections_of_the_normed_input(decomposed):
    kind, lm, residual = decomposed["kind"], decomposed["lm"], decomposed["residual"]
    layers = lm.encoder.get_submodule(decomposed["layers"])
    with torch.no_grad():
        for parts in residual.layers:
            close(parts.values, _direct_values(kind, lm, layers[parts.layer], parts.x))


def test_parts_sum_to_the_attention_nodes_whole(decomposed):
    """mid = x + sum over heads and keys of the parts + the bias, every family (Gemma 2 through its output norm)."""
    residual = decomposed["residual"]
    for parts in residual.layers:
        weights, values = parts.attention_parts()
        assert torch.all(weights.triu(1) == 0) or decomposed["kind"] == "bert"
        summed = parts.x + torch.einsum("hij,hjd->id", weights, values) + parts.added_bias()
        close(summed, parts.mid)
