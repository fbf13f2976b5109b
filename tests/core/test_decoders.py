"""Decoder-only models (METHODS §18): loaded with causal attention equal to the model's own, FIRST/SEP classes, the
causal shares and entropy worked by hand, and the attention sink (first_share, sink_rate) for decoders and encoders."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib.analyses.base import run_analysis
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.core.model import load_model
from attnlib.core.runner import run
from attnlib.stats.special import (
    STAT_KEYS,
    SpecialTokenResult,
    input_statistics,
    row_entropy,
    sink_rate,
    uniform_entropy,
)
from support.cli import run_cli
from support.models import DECODER_KINDS, save_tiny

TEXT = "The cat sat on the mat because it was warm."
SENTENCES = ["The cat sat on the mat.", "A dog barked at the moon, twice.", "She reads books every night."]

# A causal map of 4 tokens worked by hand: row i has the keys 0..i.
CAUSAL = np.array(
    [
        [1.0, 0.0, 0.0, 0.0],
        [0.5, 0.5, 0.0, 0.0],
        [0.6, 0.2, 0.2, 0.0],
        [0.7, 0.1, 0.1, 0.1],
    ],
    np.float32,
)


@pytest.fixture(scope="module", params=DECODER_KINDS)
def decoder_dir(request, tmp_path_factory):
    return save_tiny(request.param, tmp_path_factory.mktemp(request.param))


def test_causal_shares_and_entropy_by_hand():
    first = np.array([True, False, False, False])
    stats = input_statistics(CAUSAL[None, None], first, np.zeros(4, bool), np.zeros(4, bool), causal=True)
    assert stats["cls"][0, 0] == pytest.approx((0.5 + 0.6 + 0.7) / 3)  # FIRST over rows 1..3 only
    # entropy of row i over its i + 1 keys, smoothed 0.9999 A + 0.0001 / (i + 1), rows 1..3
    by_hand = []
    for i in range(1, 4):
        p = 0.9999 * CAUSAL[i, : i + 1].astype(np.float64) + 0.0001 / (i + 1)
        by_hand.append(-(p * np.log(p)).sum())
    np.testing.assert_allclose(row_entropy(CAUSAL, causal=True)[1:], by_hand, rtol=1e-6)
    assert stats["entropy"][0, 0] == pytest.approx(np.mean(by_hand), rel=1e-6)
    assert uniform_entropy(4, causal=True) == pytest.approx((math.log(2) + math.log(3) + math.log(4)) / 3)
    assert uniform_entropy(4) == pytest.approx(math.log(4))


def test_sink_rate_by_hand():
    rate = sink_rate(np.array([[0.31, 0.29], [0.5, 0.1], [0.3, 0.9]]))
    assert rate["overall"] == pytest.approx(3 / 6)  # 0.3 itself is not above the threshold
    np.testing.assert_allclose(rate["per_layer"], [0.5, 0.5, 0.5])


def test_encoder_first_share_is_cls_plus_sep():
    heads = {key: np.full((1, 2), 0.1) for key in STAT_KEYS}
    heads["cls"] = np.array([[0.05, 0.3]])
    heads["sep"] = np.array([[0.2, 0.4]])
    encoder = SpecialTokenResult(3, heads, 1.0)
    np.testing.assert_allclose(encoder.first_share, [[0.25, 0.7]])
    decoder = SpecialTokenResult(3, heads, 1.0, causal=True)
    np.testing.assert_allclose(decoder.first_share, [[0.05, 0.3]])
    assert encoder.to_json()["sink_rate"]["overall"] == 0.5 and decoder.to_json()["kind"] == "decoder"
    back = SpecialTokenResult.from_json(decoder.to_json())
    assert back.causal and np.array_equal(back.first_share, decoder.first_share)


def test_decoder_loads_with_its_own_causal_attention(decoder_dir):
    from transformers import AutoConfig, AutoModelForCausalLM

    lm = load_model(str(decoder_dir))
    assert lm.facts.kind == "decoder" and lm.facts.causal and lm.mlm is None
    config = AutoConfig.from_pretrained(decoder_dir)
    config._attn_implementation = "eager"
    reference = AutoModelForCausalLM.from_pretrained(decoder_dir, config=config).eval()
    result = run(lm, TEXT)
    with torch.no_grad():
        own = reference.base_model(**lm.tokenizer(TEXT, return_tensors="pt"), output_attentions=True).attentions
    np.testing.assert_allclose(result.attentions, torch.cat(own).numpy(), atol=1e-6)  # the same eager arithmetic
    n = result.n
    assert not np.triu(result.attentions, 1).any()  # causal: no weight above the diagonal
    for layer, w in enumerate(lm.facts.windows):  # a sliding layer's keys stop at i - j <= w
        if w is not None:
            far = np.tril(np.ones((n, n), bool), -(w + 1))
            assert not result.attentions[layer][:, far].any()
    assert result.cls_mask.tolist() == [True] + [False] * (n - 1)  # FIRST is position 0


def test_decoder_special_first_share_is_the_first_tokens_mean_share(decoder_dir):
    lm = load_model(str(decoder_dir))
    special = run_analysis(SPECIAL, lm, SpecialOptions(), inputs={"corpus": SENTENCES}).result.special
    per_input = [run(lm, s).attentions[:, :, 1:, 0].mean(-1) for s in SENTENCES]  # rows i >= 1 to key 0
    np.testing.assert_allclose(special.first_share, np.mean(per_input, axis=0), rtol=1e-5)
    data = special.to_json()
    assert data["kind"] == "decoder"
    assert data["sink_rate"]["overall"] == pytest.approx(float((np.mean(per_input, axis=0) > 0.3).mean()))


def test_decoder_reads_a_pair_as_its_tokenizer_joins_it(tmp_path_factory):
    lm = load_model(str(save_tiny("llama", tmp_path_factory.mktemp("llama-pair"))))
    r = run(lm, "The cat sat.", "It was warm.")
    joined = lm.tokenizer("The cat sat.", "It was warm.")["input_ids"]
    assert r.input_ids == joined and set(r.segments.tolist()) == {0, 1}
    assert not np.triu(r.attentions, 1).any()


def test_causal_dependency_predictions_by_hand():
    """METHODS §18: dep->head among earlier words, head<-dep among later ones; the first and last word: none."""
    from attnlib.analyses.deps import predict_heads

    w = np.zeros((5, 5))  # slot 0 (a BOS), three words, slot 4 empty (no end token)
    w[1, :2] = [0.5, 0.5]
    w[2, :3] = [0.2, 0.5, 0.3]
    w[3, :4] = [0.1, 0.2, 0.6, 0.1]
    assert predict_heads(w, causal=True).tolist() == [[-1, 1, 2], [2, 3, -1]]
    assert predict_heads(w).tolist() == [[1, 1, 2], [2, 3, 1]]  # an encoder: ties at 0 go to the first word


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_cli_special_json_carries_the_sink_for_every_kind(kind, tmp_path_factory, tmp_path):
    folder = save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-cli"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    ran = run_cli("special", "--corpus", str(corpus), "--model", str(folder), "--json")
    assert ran.code == 0, ran.err
    assert ran.json["kind"] == ("decoder" if kind == "gpt2" else "encoder")
    first = np.array(ran.json["first_share"])
    assert first.shape == (2, 4)
    heads = ran.json["heads"]
    expected = np.array(heads["cls"]) + (0 if kind == "gpt2" else np.array(heads["sep"]))
    np.testing.assert_allclose(first, expected, rtol=1e-12)
    assert ran.json["sink_rate"]["per_layer"] == pytest.approx(list((first > 0.3).mean(axis=1)))


SOFT_CAP = 0.01  # Gemma 2's c of c tanh(s / c), set below the tiny model's scores (~0.01) so that capping matters


def _masked_softmax(logits: np.ndarray, facts) -> np.ndarray:
    """softmax over keys of [layers, heads, n, n] logits, later keys and keys past a layer's sliding window masked."""
    n = logits.shape[-1]
    offset = np.arange(n)[:, None] - np.arange(n)[None]  # i - j
    logits = logits.copy()
    for layer in range(facts.n_layers):
        w = facts.window(layer)
        logits[layer][:, (offset < 0) | (offset > (w if w is not None else n))] = -np.inf
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("kind", DECODER_KINDS)
def test_queries_and_keys_give_a_decoders_logits(kind, tmp_path_factory):
    """softmax(scale q.k), later keys and keys past a sliding window masked, is the model's attention: rotary (after
    Qwen3's and Gemma 3's q_norm and k_norm) applied, and each query head reading its group's key head; Gemma 2's q.k
    is the score before capping: softmax(c tanh(scale q.k / c)) is its attention (c lowered to SOFT_CAP, in the model
    and in its config, so that the cap matters)."""
    lm = load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-qk"))))
    cap = None
    if kind == "gemma2":
        cap = lm.encoder.config.attn_logit_softcapping = SOFT_CAP
        for layer in lm.encoder.layers:
            layer.self_attn.attn_logit_softcapping = SOFT_CAP
    r = run(lm, TEXT, capture_qk=True)
    assert r.queries.shape == r.keys.shape == (lm.facts.n_layers, lm.facts.n_heads, r.n, lm.facts.head_dim)
    q, k = r.queries.astype(np.float64), r.keys.astype(np.float64)
    logits = r.qk_scale[:, None, None, None] * np.einsum("lhid,lhjd->lhij", q, k)
    # float32 q and k of magnitude ~1, exponentiated: relative errors of ~1e-7 in the weights
    if cap is None:
        assert r.score_cap is None
    else:
        np.testing.assert_array_equal(r.score_cap, [cap] * lm.facts.n_layers)
        assert np.abs(_masked_softmax(logits, lm.facts) - r.attentions).max() > 1e-3  # the cap matters here
        logits = cap * np.tanh(logits / cap)
    np.testing.assert_allclose(_masked_softmax(logits, lm.facts), r.attentions, atol=1e-5)


def test_neuron_view_of_soft_capped_scores_says_q_dot_k_is_before_capping(tmp_path_factory):
    """Gemma 2's neuron view: its scores are c tanh(scale q.k / c), their softmax the model's row, its label says so."""
    from attnlib.views.neuron_view import neuron_scores, result_terms

    lm = load_model(str(save_tiny("gemma2", tmp_path_factory.mktemp("gemma2-neuron"))))
    for layer in lm.encoder.layers:
        layer.self_attn.attn_logit_softcapping = SOFT_CAP
    r = run(lm, TEXT, capture_qk=True)
    layer, head, query = 1, 2, r.n - 1  # layer 1 attends to the whole prefix
    ns = neuron_scores(
        r.queries[layer, head], r.keys[layer, head], query, **result_terms(r, layer, head, query), causal=True
    )
    np.testing.assert_allclose(ns.softmax, r.attentions[layer, head, query], atol=1e-5)
    s = r.qk_scale[layer] * r.keys[layer, head].astype(np.float64) @ r.queries[layer, head, query].astype(np.float64)
    np.testing.assert_allclose(ns.scores, SOFT_CAP * np.tanh(s / SOFT_CAP), rtol=1e-6)
    assert ns.cap == SOFT_CAP and ns.label.startswith(f"{SOFT_CAP:g}·tanh((q·k")
