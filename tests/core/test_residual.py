"""The residual decomposition (attnlib.core.residual, METHODS §21) against the model's own forward pass: its hidden
states, its attention weights, each sublayer's output captured with hooks on modules named by path in the test, and
each head's value vector computed directly from the value projection's and output projection's weights read by path
(GPT-2: LayerNorm, fused Conv1D, biases; Llama: RMSNorm, grouped-query; GPT-NeoX and GPT-J: parallel blocks; Gemma 2:
the RMSNorm of the attention output; BERT: post-norm)."""

from __future__ import annotations

import pytest
import torch

from attnlib.core.blockwise import supports_blockwise
from attnlib.core.residual import decompose
from support.residual import DECODER_PATHS, PATHS, direct_values, model_pass, seq2seq_pass
from support.tolerances import FORWARD_RTOL


@pytest.fixture(scope="module", params=sorted(PATHS))
def decomposed(request, tmp_path_factory):
    """model_pass of each kind, with attnlib's decomposition of its input."""
    seen = model_pass(request.param, tmp_path_factory.mktemp(f"residual-{request.param}"))
    return seen | {"residual": decompose(seen["lm"], seen["batch"])}


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


def test_values_are_the_value_and_output_projections_of_the_normed_input(decomposed):
    kind, lm, residual = decomposed["kind"], decomposed["lm"], decomposed["residual"]
    layers = lm.encoder.get_submodule(decomposed["layers"])
    for parts in residual.layers:
        close(parts.values, direct_values(kind, lm, layers[parts.layer], parts.x))


def test_parts_sum_to_the_attention_nodes_whole(decomposed):
    """mid = x + sum over heads and keys of the parts + the bias, every family (Gemma 2 through its output norm)."""
    residual = decomposed["residual"]
    for parts in residual.layers:
        weights, values = parts.attention_parts()
        assert torch.all(weights.triu(1) == 0) or decomposed["kind"] == "bert"
        summed = parts.x + torch.einsum("hij,hjd->id", weights, values) + parts.added_bias()
        close(summed, parts.mid)


def test_blockwise_run_gives_the_eager_parts(decomposed, monkeypatch):
    """A long input's run (METHODS §19: the weights made by attnlib block by block while the model's pass needs no n x n
    scores) gives the eager run's parts, forced here on a short input in blocks of 3 query rows."""
    import attnlib.core.residual as residual_module

    lm = decomposed["lm"]
    monkeypatch.setattr(residual_module, "default_block_rows", lambda n, heads: 3)
    blocks = decompose(lm, decomposed["batch"], blockwise=True)
    assert len(blocks.layers) == len(decomposed["residual"].layers)
    for eager, blocked in zip(decomposed["residual"].layers, blocks.layers):
        for name in ("x", "weights", "values", "mid", "carried", "ffn", "out"):
            close(getattr(blocked, name), getattr(eager, name))


FAMILIES = (
    "qwen3",
    "olmo2",
    "gemma3",
    "mistral",
    "phi3",
    "opt",
    "mixtral",
    "phi",
    "falcon",
    "bloom",
    "stablelm",
    "t5",
    "bart",
    "modernbert",
    "deberta-v2",
    "albert",
)


@pytest.mark.parametrize("kind", FAMILIES)
def test_every_familys_parts_add_up_to_its_own_hidden_states(kind, tmp_path, monkeypatch):
    """Listed and found families beyond those above: each layer's input and output are the model's own hidden states
    (the last through the final norm), its weights the model's own attentions, and x plus every head's parts plus the
    bias is the attention node's whole, whose feed-forward part completes the layer; where the family runs block-wise,
    that run gives the same parts (T5's relative position bias included; Falcon, Bloom's ALiBi and DeBERTa-v2 compute
    attention in their own code and run eager)."""
    from attnlib.core.model import load_model
    from attnlib.core.runner import encode, model_inputs
    from support.models import move_off_initial, save_tiny

    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    move_off_initial(lm.encoder)
    batch = model_inputs(lm, [encode(lm, "The cat sat on the mat and the dog sat too.")])
    with torch.no_grad():
        own = lm.encoder(**batch, output_hidden_states=True, output_attentions=True)
    residual = decompose(lm, batch)
    for parts in residual.layers:
        close(parts.x, own.hidden_states[parts.layer][0])
        close(parts.weights, own.attentions[parts.layer][0])
        weights, values = parts.attention_parts()
        close(parts.x + torch.einsum("hij,hjd->id", weights, values) + parts.added_bias(), parts.mid)
    last = residual.layers[-1].out[None]
    with torch.no_grad():
        close(last if residual.final_norm is None else residual.final_norm(last), own.last_hidden_state)
    if supports_blockwise(lm.encoder):  # a long input's run (METHODS §19), forced here in blocks of 3 query rows
        import attnlib.core.residual as residual_module

        monkeypatch.setattr(residual_module, "default_block_rows", lambda n, heads: 3)
        for eager, blocked in zip(residual.layers, decompose(lm, batch, blockwise=True).layers, strict=True):
            for name in ("weights", "mid", "carried", "ffn", "out"):
                close(getattr(blocked, name), getattr(eager, name))


@pytest.mark.parametrize("kind", sorted(DECODER_PATHS))
def test_an_encoder_decoders_decoder_parts_are_the_models_own(kind, tmp_path):
    """An encoder-decoder's decoder layers (METHODS §21): the layer inputs, both attentions' weights and the logits are
    the model's own; the self-attention's parts add up to the state after it (node S) and the cross-attention's to the
    state after it (node A), each against the model's own modules named by path (their outputs added in pre-norm
    stacks; the norms' inputs and outputs in post-norm ones); the source's values are the cross-attention's value and
    output projections of the encoder's own output; the feed-forward part completes the layer."""
    from attnlib.core.residual import decoder_parts
    from attnlib.core.seq2seq import source_inputs

    seen = seq2seq_pass(kind, tmp_path / kind)
    lm, own, got = seen["lm"], seen["own"], seen["seen"]
    layers, x0, logits = decoder_parts(lm, source_inputs(lm, seen["source"]), seen["target"].input_ids)
    close(x0, own.decoder_hidden_states[0][0])
    close(logits, own.logits[0])
    post = "self_norm" in seen["paths"]
    for parts in layers:
        l, cross = parts.layer, parts.cross
        assert cross is not None
        close(parts.x, own.decoder_hidden_states[l][0])
        close(parts.weights, own.decoder_attentions[l][0])
        close(cross.weights, own.cross_attentions[l][0])
        weights, values = parts.attention_parts()
        close(parts.x + torch.einsum("hij,hjd->id", weights, values) + parts.added_bias(), parts.mid)
        cross_bias = 0 if cross.out_bias is None else cross.out_bias
        close(cross.before + torch.einsum("hij,hjd->id", cross.weights, cross.values) + cross_bias, cross.whole)
        v = got[(l, "cross_v")][1]  # [m, H d_h]: the value projection of the encoder's own output
        out = seen["layers"][l].get_submodule(seen["paths"]["cross_out"]).weight.detach()  # [d, H d_h]
        heads = cross.weights.shape[0]
        direct = torch.einsum("mhk,dhk->hmd", v.reshape(v.shape[0], heads, -1), out.reshape(out.shape[0], heads, -1))
        close(cross.values, direct)
        close(got[(l, "cross_v")][0], own.encoder_last_hidden_state[0])
        if post:
            close(parts.mid, got[(l, "self_norm")][0])
            close(cross.before, got[(l, "self_norm")][1])
            close(cross.whole, got[(l, "cross_norm")][0])
            close(parts.carried, got[(l, "cross_norm")][1])
            close(parts.ffn_whole, got[(l, "ffn_norm")][0])
            close(got[(l, "ffn_norm")][1], parts.out)
        else:
            close(parts.mid, parts.x + got[(l, "self_out")][1])
            close(cross.whole, parts.mid + got[(l, "cross_out")][1])
            close(parts.carried, got[(l, "ffn_in")][0])
            close(parts.ffn_whole, parts.out)
        if l < len(layers) - 1:
            close(parts.out, own.decoder_hidden_states[l + 1][0])
