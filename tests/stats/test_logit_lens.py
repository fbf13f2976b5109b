"""The lens's plain functions (METHODS §21) on small arrays worked out by hand or by torch's own norms: a final norm's
kind and weight read off its output (LayerNorm, RMSNorm, Gemma's 1 + w, Cohere's LayerNorm without bias), N_f and
the readings against torch's layer_norm, the direct effects' sum against the reading, ranks and rank changes, and
each model's unembedding against its own logits (T5's d_model**-0.5 with tied embeddings, BART's final_logits_bias)."""

from __future__ import annotations

import pytest
import torch

from attnlib.core.model import load_model
from attnlib.stats.lens import Unembedding, extremes, lens_tokens, norm_of, ranks, token_logit_gap, unembedding_of
from support.models import move_off_initial, save_tiny
from support.tolerances import FORWARD_RTOL

D, V = 6, 9


def _random(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _layer_norm() -> torch.nn.LayerNorm:
    norm = torch.nn.LayerNorm(D, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(_random(D, seed=1))
        norm.bias.copy_(_random(D, seed=2))
    return norm


def test_norm_kinds_are_read_off_their_output():
    from transformers.models.cohere.modeling_cohere import CohereLayerNorm
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    kind, gamma, beta, eps = norm_of(_layer_norm(), D)
    assert kind == "layer" and beta is not None and eps == 1e-5
    llama, gemma, cohere = LlamaRMSNorm(D, eps=1e-6), GemmaRMSNorm(D, eps=1e-6), CohereLayerNorm(D, eps=1e-5)
    for module in (llama, gemma, cohere):
        with torch.no_grad():
            module.weight.copy_(_random(D, seed=3))
    assert norm_of(llama, D)[0] == "rms" and torch.allclose(norm_of(llama, D)[1], llama.weight)
    assert norm_of(gemma, D)[0] == "rms" and torch.allclose(norm_of(gemma, D)[1], 1 + gemma.weight)  # Gemma: 1 + w
    kind, gamma, beta, eps = norm_of(cohere, D)
    assert (kind, beta, eps) == ("layer", None, 1e-5) and torch.equal(gamma, cohere.weight)
    assert norm_of(None, D)[0] == "none"


def test_normed_reading_and_direct_effects_add_up():
    norm = _layer_norm()
    rows, bias = _random(V, D, seed=4), _random(V, seed=5)
    head = Unembedding("layer", norm.weight.detach(), norm.bias.detach(), 1e-5, rows, bias, softcap=2.0)
    x = _random(3, D, seed=6)
    with torch.no_grad():
        expected = norm(x) @ rows.T + bias
    assert torch.allclose(head.uncapped(x), expected, atol=1e-6)
    assert torch.allclose(head.logits(x), 2.0 * torch.tanh(expected / 2.0), atol=1e-6)
    assert torch.allclose(head.logits(x, "raw"), 2.0 * torch.tanh(x @ rows.T / 2.0), atol=1e-6)
    parts = _random(4, D, seed=7)
    last = parts.sum(0)
    direct = head.direct(parts, last)  # each part's share, the norm's scale fixed from their sum
    total = direct.sum(0) + head.constant()
    assert torch.allclose(total, head.uncapped(last), atol=1e-5)
    # by hand for one token: g (c - mean c) / s . W_U[:, w]
    s = torch.sqrt(last.var(unbiased=False) + 1e-5)
    w = 3
    by_hand = [float((norm.weight.detach() * (c - c.mean()) / s) @ rows[w]) for c in parts]
    assert direct[:, w].tolist() == pytest.approx(by_hand, abs=1e-5)
    assert token_logit_gap(direct, w, 1).tolist() == pytest.approx((direct[:, w] - direct[:, 1]).tolist())


def test_rms_norm_subtracts_no_mean():
    gamma, rows = _random(D, seed=8), _random(V, D, seed=9)
    head = Unembedding("rms", gamma, None, 1e-6, rows, None)
    x = _random(D, seed=10)
    expected = gamma * x / torch.sqrt(x.pow(2).mean() + 1e-6) @ rows.T
    assert torch.allclose(head.uncapped(x), expected, atol=1e-5)
    parts = torch.stack([x / 2, x / 2])
    assert torch.allclose(head.direct(parts, x), expected.expand(2, V) / 2, atol=1e-5)
    assert torch.equal(head.constant(), torch.zeros(V))


def test_ranks_and_rank_changes_by_hand():
    readings = torch.tensor([[0.0, 3.0, 1.0, 2.0], [4.0, 0.0, 2.0, -1.0]])  # node 1 follows node 0
    assert ranks(readings[0], torch.tensor([1, 3, 2, 0])).tolist() == [0, 1, 2, 3]
    (top0, bottom0), (top1, bottom1) = lens_tokens(readings, k=2)
    assert (top0.ids, top0.logits, top0.rank_change) == ([1, 3], [3.0, 2.0], None)
    assert (bottom0.ids, bottom0.rank_change) == ([0, 2], None)
    # node 1's top: token 0 (rank 3 in node 0 -> 0: +3), token 2 (rank 2 -> 1: +1)
    assert (top1.ids, top1.rank_change) == ([0, 2], [3, 1])
    # its bottom: token 3 (rank 1 -> 3: -2), token 1 (rank 0 -> 2: -2)
    assert (bottom1.ids, bottom1.logits, bottom1.rank_change) == ([3, 1], [-1.0, 0.0], [-2, -2])
    (ids, values), (low_ids, low) = extremes(readings, 1)
    assert (ids, values, low_ids, low) == ([[1], [0]], [[3.0], [4.0]], [[0], [3]], [[0.0], [-1.0]])


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_an_encoder_decoders_unembedding_gives_its_own_logits(kind, tmp_path, one_thread):
    """T5 (tied: the decoder's output times d_model**-0.5 before the head) and BART (final_logits_bias after it), read
    off the decoder stack's last state before its final norm, captured here with a hook."""
    lm = load_model(str(save_tiny(kind, tmp_path)))
    move_off_initial(lm.seq2seq)
    head = unembedding_of(lm)
    source = lm.tokenizer("The cat sat.", return_tensors="pt")
    target = torch.tensor([[lm.seq2seq.config.decoder_start_token_id, 5, 7, 9]])
    stack = lm.seq2seq.get_decoder()
    final = getattr(stack, "final_layer_norm", None)
    seen = []
    if final is not None:  # T5: the final norm's input
        handle = final.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))
    else:  # BART: post-norm, no final norm; the last layer's output
        last = stack.layers[-1]
        handle = last.register_forward_hook(lambda _m, _a, out: seen.append(out[0] if isinstance(out, tuple) else out))
    try:
        with torch.no_grad():
            own = lm.seq2seq(**source, decoder_input_ids=target).logits[0]
    finally:
        handle.remove()
    read = head.logits(seen[-1][0].float())
    assert head.norm == ("rms" if kind == "t5" else "none")
    assert torch.allclose(read, own, rtol=0, atol=FORWARD_RTOL * float(own.abs().max()))
