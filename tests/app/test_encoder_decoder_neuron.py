"""The neuron view of an encoder-decoder's three parts on the Live page (and from a notebook): its scores are the
logits rebuilt here from the attention modules' own q and k projections (BART, Marian: q·k/√d; T5: q·k unscaled plus
its relative position bias by compute_bias: the encoder's, the decoder's own; none in cross-attention), whose softmax
is the model's own attentions; cross-attention draws the target's tokens as the queries (left) and the source's as the
keys (right), the decoder its causal rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from app_pages.live.encoder_decoder import PART_NORMS
from attnlib.core.model import load_model
from attnlib.core.runner import run
from attnlib.core.seq2seq import run_seq2seq
from attnlib.views import neuron_view
from support.apptest import figures, plotly_values
from support.models import save_tiny
from support.pages import open_live, rerun, view_datas
from support.seq2seq import own_part, own_values
from support.tolerances import FORWARD_RTOL
from support.views import page_data
from ui.sources.live_inputs import pretty_token

SOURCE, TARGET = "The cat sat on the mat.", "A dog ran to the park."
LAYER, HEAD, QUERY = 1, 2, 3  # 0-based: the page's layer 2, head 3, token 4
ROUNDED = 5e-4  # the view's JSON keeps q, k and the scores to 3 decimals


@pytest.fixture(scope="module", params=["t5", "bart", "marian"])
def tiny_dir(request, tmp_path_factory):
    return save_tiny(request.param, tmp_path_factory.mktemp(f"{request.param}-neuron"))


def rebuilt_logits(folder) -> tuple[np.ndarray, np.ndarray]:
    """(logits, the model's attention) [heads, n, n] of LAYER for SOURCE, the logits from the encoder layer's own
    modules: its input (hidden_states[LAYER]), T5's pre-attention RMSNorm, the q and k projections, and T5's
    compute_bias of the first layer (which every later layer reuses) or BART's scaling."""
    lm = load_model(str(folder))
    model, d = lm.seq2seq, lm.facts.hidden_size // lm.facts.n_heads
    ids = lm.tokenizer(SOURCE, return_tensors="pt")["input_ids"]
    encoder = model.get_encoder()
    with torch.no_grad():
        out = encoder(input_ids=ids, output_hidden_states=True, output_attentions=True)
        x = out.hidden_states[LAYER]
        n = x.shape[1]
        if model.config.model_type == "t5":
            attention = encoder.block[LAYER].layer[0]
            x = attention.layer_norm(x)
            q, k = attention.SelfAttention.q(x), attention.SelfAttention.k(x)
            extra = encoder.block[0].layer[0].SelfAttention.compute_bias(n, n)[0]
            scale = 1.0
        else:
            attention = encoder.layers[LAYER].self_attn
            q, k = attention.q_proj(x), attention.k_proj(x)
            extra, scale = torch.zeros(1), d**-0.5
        heads = lambda t: t[0].reshape(n, -1, d).transpose(0, 1)  # noqa: E731  [n, H d] -> [H, n, d]
        logits = heads(q) @ heads(k).transpose(1, 2) * scale + extra
    return logits.double().numpy(), out.attentions[LAYER][0].double().numpy()


def test_the_encoders_neuron_view_is_q_dot_k_of_the_encoder_layer(tiny_dir):
    logits, model_attention = rebuilt_logits(tiny_dir)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(-1, keepdims=True), model_attention, atol=FORWARD_RTOL)  # the rebuild holds
    at = open_live(model=str(tiny_dir), a=SOURCE, target=TARGET, view="neuron", part="encoder", layer="2", head="3")
    at.selectbox(key="live_token").set_value(QUERY + 1)
    (data,) = view_datas(rerun(at))
    assert (data["layer"], data["head"], data["qi"]) == (LAYER + 1, HEAD + 1, QUERY)
    assert len(data["labels"]) == logits.shape[-1] and at.query_params["token"] == str(QUERY + 1)
    np.testing.assert_allclose(data["scores"], logits[HEAD, QUERY], atol=ROUNDED + FORWARD_RTOL)
    np.testing.assert_allclose(data["softmax"], model_attention[HEAD, QUERY], atol=5e-5 + FORWARD_RTOL)
    assert data["diff"] < 1e-6  # the page's own softmax of the captured vectors against the model's row
    assert any("equals the model's attention row" in c.value for c in at.caption)


def own_row(folder, part: str) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(the query tokens, the key tokens, the logits, the model's attention, the keys' value norms) of (LAYER, HEAD,
    QUERY) of a decoder part, the logits from the attention modules' own projections and the value norms
    ||v_j W_O^h|| from their own value and output projections (support.seq2seq)."""
    lm = load_model(str(folder))
    maps = run_seq2seq(lm, SOURCE, TARGET)
    kind, source_ids, target_ids = lm.seq2seq.config.model_type, maps.source.input_ids, maps.target.input_ids
    own = own_part(lm, kind, part, source_ids, target_ids)
    value_norms = np.linalg.norm(own_values(lm, kind, part, source_ids, target_ids).vectors[LAYER][HEAD], axis=-1)
    _, query_tokens, key_tokens = maps.part(part)
    return query_tokens, key_tokens, own.logits[LAYER, HEAD, QUERY], own.attentions[LAYER, HEAD, QUERY], value_norms


@pytest.mark.parametrize("part", ["decoder", "cross"])
def test_the_decoder_and_cross_parts_draw_their_neuron_view(tiny_dir, part):
    query_tokens, key_tokens, logits, model_attention, value_norms = own_row(tiny_dir, part)
    at = open_live(model=str(tiny_dir), a=SOURCE, target=TARGET, view="neuron", part=part, layer="2", head="3")
    at.selectbox(key="live_token").set_value(QUERY + 1)
    (data,) = view_datas(rerun(at))
    assert (data["layer"], data["head"], data["qi"]) == (LAYER + 1, HEAD + 1, QUERY)
    assert data["labels"] == [pretty_token(t) for t in key_tokens]  # cross: the source's tokens, on the right
    assert data["query_labels"] == ([pretty_token(t) for t in query_tokens] if part == "cross" else None)
    assert data["causal"] == (part == "decoder") and at.query_params["part"] == part
    np.testing.assert_allclose(data["scores"], logits, atol=ROUNDED + FORWARD_RTOL)
    np.testing.assert_allclose(data["softmax"], model_attention, atol=5e-5 + FORWARD_RTOL)
    if part == "decoder":
        assert not any(data["softmax"][QUERY + 1 :])  # the keys after the query
    assert data["diff"] < 1e-6
    assert any("equals the model's attention row" in c.value for c in at.caption)
    assert any(c.value == PART_NORMS[part] for c in at.caption) and not at.info and not at.warning
    (chart,) = figures(at)  # the value norms of the part's keys (cross: the source's, from the encoder's output)
    bar = json.loads(chart.spec)["data"][0]
    assert bar["y"] == [f"{j + 1}: {pretty_token(t)}" for j, t in enumerate(key_tokens)]
    np.testing.assert_allclose(plotly_values(bar["x"]), value_norms, rtol=1e-5)
    at.radio(key="live_part").set_value("encoder")
    (data,) = view_datas(rerun(at))
    assert data["query_labels"] is None and not data["causal"]  # the encoder's, as before
    assert not any(c.value in PART_NORMS.values() for c in at.caption)


def test_a_notebooks_neuron_view_of_the_encoders_run_uses_its_scale_and_bias(tiny_dir):
    lm = load_model(str(tiny_dir))
    logits, _ = rebuilt_logits(tiny_dir)
    view = neuron_view(run(lm, SOURCE), layer=LAYER, head=HEAD, query=QUERY)
    data = page_data(view.html)
    np.testing.assert_allclose(data["scores"], logits[HEAD, QUERY], atol=ROUNDED + FORWARD_RTOL)
    assert data["diff"] < 1e-6
    with pytest.raises(ValueError, match=r"qk='encoder', 'decoder' or 'cross'"):
        neuron_view(run_seq2seq(lm, SOURCE, TARGET))


@pytest.mark.parametrize("part", ["decoder", "cross"])
def test_a_notebooks_neuron_view_of_a_decoder_part(tiny_dir, part):
    query_tokens, key_tokens, logits, _, _ = own_row(tiny_dir, part)
    lm = load_model(str(tiny_dir))
    view = neuron_view(run_seq2seq(lm, SOURCE, TARGET, qk=part), layer=LAYER, head=HEAD, query=QUERY)
    data = page_data(view.html)
    assert data["labels"] == key_tokens and data["query_labels"] == (query_tokens if part == "cross" else None)
    np.testing.assert_allclose(data["scores"], logits, atol=ROUNDED + FORWARD_RTOL)
    assert data["causal"] == (part == "decoder") and data["diff"] < 1e-6
