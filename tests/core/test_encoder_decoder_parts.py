"""The queries and keys of an encoder-decoder's decoder self-attention and cross-attention (the decoder and cross
layouts of its family, captured by hooks in the whole model's forward pass: run_seq2seq(qk=part)) for T5, BART and
Marian: they are the attention modules' own projections of their own inputs (cross: keys from the encoder's output),
the scale is the family's (T5 1, else d^-1/2), T5's decoder adds the unidirectional relative position bias of its
first decoder layer (worked out here bucket by bucket) and its cross-attention none, and softmax of scale * q.k + bias,
masked (the decoder causally), is the model's own eager decoder_attentions / cross_attentions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnlib.core.families import STATISTICS, unsupported_reason
from attnlib.core.seq2seq import run_seq2seq
from support.models import ENCODER_DECODER_KINDS, FOUND_ENCODER_DECODER_KINDS
from support.seq2seq import masked_softmax, moved_off_encoder_decoder, own_part, own_scale, parent, softmax_tolerance

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE = "The cat sat on the mat because it was warm."
TARGET = "A dog ran to the park, and then it slept for a very long time by the fire."  # > 8 tokens: T5's log buckets
PARTS = ("decoder", "cross")


@pytest.fixture(scope="module", params=(*ENCODER_DECODER_KINDS, *FOUND_ENCODER_DECODER_KINDS))
def encdec(request, tmp_path_factory):
    """(kind, LoadedModel) of a tiny random encoder-decoder with every bias and norm weight moved off its initial
    value, so that a projection's bias left out, or the wrong LayerNorm's input, changes q or k."""
    kind = request.param
    return kind, moved_off_encoder_decoder(kind, tmp_path_factory.mktemp(f"encdec-parts-{kind}"))


@pytest.mark.parametrize("part", PARTS)
def test_the_parts_queries_and_keys_give_the_models_own_attentions(encdec, part):
    kind, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, qk=part)
    heads = maps.heads
    assert heads is not None and heads.part == part
    n_source, n_target = maps.source.n, len(maps.target.tokens)
    assert heads.queries.shape == (2, 4, n_target, lm.facts.head_dim)
    assert heads.keys.shape == (2, 4, n_source if part == "cross" else n_target, lm.facts.head_dim)
    np.testing.assert_array_equal(heads.qk_scale, np.float32(own_scale(kind, lm.facts.head_dim)))
    assert (heads.score_bias is not None) == (parent(kind) == "t5" and part == "decoder")
    q, k = heads.queries.astype(np.float64), heads.keys.astype(np.float64)
    scale = heads.qk_scale.astype(np.float64)[:, None, None, None]
    logits = scale * np.einsum("lhid,lhjd->lhij", q, k) + (0 if heads.score_bias is None else heads.score_bias)
    model_attention = maps.part(part)[0]
    tolerance = softmax_tolerance(q, k, scale, heads.score_bias)
    assert np.all(np.abs(masked_softmax(logits, part == "decoder") - model_attention) <= tolerance)
    if part == "decoder":
        assert np.all(np.triu(model_attention, 1) == 0)  # the model's own mask is causal, as the rebuild's


@pytest.mark.parametrize("part", PARTS)
def test_the_parts_queries_and_keys_are_the_attention_modules_own(encdec, part):
    """Against the modules' own q and k projections of their own inputs (support.seq2seq's paths), in a forward pass
    without attnlib's hooks; T5's cross-attention module adds a bias of zeros, which attnlib leaves out."""
    kind, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, qk=part)
    own = own_part(lm, kind, part, maps.source.input_ids, maps.target.input_ids)
    heads = maps.heads
    # the same float32 operations on the same inputs, in the same order
    np.testing.assert_array_equal(heads.queries, own.queries)
    np.testing.assert_array_equal(heads.keys, own.keys)
    np.testing.assert_array_equal(maps.part(part)[0], own.attentions)
    if parent(kind) == "t5" and part == "cross":
        assert own.bias is not None and not own.bias.any()
    elif parent(kind) == "t5":
        np.testing.assert_array_equal(heads.score_bias, own.bias)
    own_softmax = masked_softmax(own.logits, part == "decoder")
    scale = own_scale(kind, lm.facts.head_dim)
    assert np.all(np.abs(own_softmax - own.attentions) <= softmax_tolerance(own.queries, own.keys, scale, own.bias))


def unidirectional_bucket(distance: int, buckets: int, max_distance: int) -> int:
    """T5's decoder bucket of a key `distance` tokens before the query (Raffel et al.; mesh-tensorflow): exact below
    buckets/2, then logarithmic up to max_distance, the last bucket beyond."""
    exact = buckets // 2
    if distance < exact:
        return distance
    return min(
        buckets - 1, exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (buckets - exact))
    )


T5_KINDS = [k for k in (*ENCODER_DECODER_KINDS, *FOUND_ENCODER_DECODER_KINDS) if parent(k) == "t5"]


@pytest.mark.parametrize("encdec", T5_KINDS, indirect=True)  # BART's and Marian's positions are added to the embeddings
def test_t5s_decoder_bias_is_its_first_layers_unidirectional_buckets(encdec):
    _, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, qk="decoder")
    config, n = lm.seq2seq.config, len(maps.target.tokens)
    table = lm.seq2seq.get_decoder().block[0].layer[0].SelfAttention.relative_attention_bias.weight.detach().numpy()
    buckets = [
        [unidirectional_bucket(max(i - j, 0), config.relative_attention_num_buckets, config.relative_attention_max_distance) for j in range(n)]
        for i in range(n)
    ]  # fmt: skip
    assert len({b for row in buckets for b in row}) > config.relative_attention_num_buckets // 2  # log buckets reached
    expected = table[np.array(buckets)].transpose(2, 0, 1)  # [heads, n, n]: keys after the query share bucket 0
    for layer in range(2):  # computed by the first layer, passed on to the second
        np.testing.assert_array_equal(maps.heads.score_bias[layer], expected)


def test_the_decoders_parts_give_queries_keys_and_norms_but_not_the_encoders_statistics(encdec):
    """Queries and keys and the norms of both parts; §12-13 of the decoder only (cross-attention's residual is the
    target token's own, its map not square); attribution and ablation of the encoder stack alone."""
    _, lm = encdec
    available = {"decoder": {"queries_keys", "norms", "residual_ln"}, "cross": {"queries_keys", "norms"}}
    for part in PARTS:
        for statistic in STATISTICS:
            reason = unsupported_reason(lm.encoder.config, statistic, part)
            assert (reason is None) == (statistic in available[part]), (part, statistic)
            assert reason is None or f"the {part} attention" in reason
    assert "not square" in unsupported_reason(lm.encoder.config, "residual_ln", "cross")


def test_an_encoder_decoders_own_attentions_are_unchanged_by_the_hooks(encdec):
    _, lm = encdec
    plain = run_seq2seq(lm, SOURCE, TARGET)
    for part in PARTS:
        hooked = run_seq2seq(lm, SOURCE, TARGET, qk=part)
        for name in ("encoder", "decoder", "cross"):
            np.testing.assert_array_equal(getattr(hooked, name), getattr(plain, name))
    assert plain.heads is None
