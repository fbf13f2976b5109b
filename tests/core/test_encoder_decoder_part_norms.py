"""METHODS §11-13 of an encoder-decoder's decoder self-attention and §11 of its cross-attention (METHODS §18), for T5
(pre-norm RMSNorm: the sublayer's output is x + attention), BART and Marian (post-LN: the LayerNorm after the residual),
checked against the model's own modules found by support.seq2seq's paths (not attnlib's families) in a forward pass
without attnlib's hooks: each head's f_h(x_j) from the attention module's own value projection and output weight, the
output projection's own output, and the sublayer's own output."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.families import UnsupportedModelError, layout, unsupported_reason
from attnlib.core.seq2seq import run_seq2seq
from attnlib.stats import norms
from attnlib.stats.norms import NormMaps, ValueNormMaps
from support.models import ENCODER_DECODER_KINDS
from support.seq2seq import moved_off_encoder_decoder, own_values, parent
from support.tolerances import EPS32

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE = "The cat sat on the mat because it was warm."
TARGET = "A dog ran to the park, and then it slept for a very long time by the fire."
PARTS = ("decoder", "cross")


@pytest.fixture(scope="module", params=(*ENCODER_DECODER_KINDS, "mt5"))  # mT5: found in the model
def encdec(request, tmp_path_factory):
    """(kind, LoadedModel) of a tiny random encoder-decoder with every bias and norm weight moved off its initial
    value, so that a bias left out or a misplaced gamma changes what is compared."""
    kind = request.param
    return kind, moved_off_encoder_decoder(kind, tmp_path_factory.mktemp(f"encdec-part-norms-{kind}"))


def norm_tolerance(squared_error: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """How far a norm may be from the exact one when its square is within squared_error of the exact square:
    |c - e| = |c^2 - e^2| / (c + e) <= squared_error / e, and <= sqrt(squared_error) (c, e >= 0)."""
    relative = np.divide(squared_error, exact, out=np.full_like(exact, np.inf), where=exact > 0)
    return np.minimum(relative, np.sqrt(squared_error))


def test_the_decoders_decomposition_rebuilds_its_self_attention_sublayer(encdec):
    """sum_h sum_j A f_h(x_j) + b_O is the output projection's own output, and sum_j g_i(z_ij) + g_i(b_O) + beta the
    sublayer's own output (T5: x + attention, s_i = 1; BART, Marian: the LayerNorm after the residual, s_i from its own
    input); residual_ln is ||g_i(z_ij)||."""
    kind, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, norms="decoder")
    v = maps.values
    assert v is not None and v.part == "decoder" and v.layer_inputs is not None and v.block_scale is not None
    w = v.weights
    assert w.post_layer_norm == (parent(kind) != "t5") and not w.attention_norm
    own = own_values(lm, kind, "decoder", maps.source.input_ids, maps.target.input_ids)
    found = norms.part_norm_maps(maps)
    assert isinstance(found, NormMaps)
    vectors = norms.head_vectors(v.values, w.out_weight)
    n, heads, d, hidden = len(maps.target.tokens), lm.facts.n_heads, lm.facts.head_dim, lm.facts.hidden_size
    for layer in range(lm.facts.n_layers):
        attention = maps.decoder[layer].astype(np.float64)
        summed = np.einsum("hij,hjc->ic", attention, own.vectors[layer]) + own.out_bias[layer]
        # the model's float32 sums over n keys (A v) and heads * d (W_O), each within k eps sum|terms|
        # (support.tolerances); f_h from the same float32 v in float64 adds nothing
        magnitude = np.einsum(
            "hij,hjd,hdc->ic", np.abs(attention), np.abs(v.values[layer]), np.abs(w.out_weight[layer])
        ) + np.abs(w.out_bias[layer])
        tolerance = 2 * (n + heads * d + 2) * EPS32 * magnitude
        assert (np.abs(summed - own.projected[layer]) <= tolerance).all(), f"{kind} layer {layer}: W_O sum"
        parts = norms.layer_norm_parts(
            maps.decoder[layer], vectors[layer], v.layer_inputs[layer], w.out_bias[layer], w.gamma[layer],
            w.beta[layer], float(w.eps[layer]), post_layer_norm=w.post_layer_norm,
        )  # fmt: skip
        residual = tolerance + (n + heads * d + 2) * EPS32 * np.abs(v.layer_inputs[layer])
        if w.post_layer_norm:
            u = own.sublayer_input[layer]
            s_own = np.sqrt(u.var(-1) + w.eps[layer])
            np.testing.assert_allclose(v.block_scale[layer], s_own, rtol=(hidden + 2) * EPS32)
            # LN(u) moves by |gamma| / s_i times u's error (twice: the centring), and by its own float32 rounding
            residual = 2 * residual * np.abs(w.gamma[layer]) / s_own[:, None] + hidden * EPS32 * np.abs(
                own.sublayer_output[layer]
            )
        else:
            np.testing.assert_array_equal(v.layer_inputs[layer], own.sublayer_input[layer])  # the residual x itself
            np.testing.assert_array_equal(v.block_scale[layer], 1.0)
        error = np.abs(parts.output() - own.sublayer_output[layer])
        assert (error <= residual).all(), f"{kind} layer {layer}: error {error.max():.2e}"
        np.testing.assert_allclose(found.residual_ln[layer], np.linalg.norm(parts.parts, axis=-1), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("part", PARTS)
def test_weighted_and_layer_norms_are_those_of_the_modules_own_head_vectors(encdec, part):
    """value_norm ||f_h(x_j)||, weighted_norm A ||f_h(x_j)|| and layer_norm ||sum_h A f_h(x_j)|| against f_h made
    in float64 from the attention module's own value projection (cross: of the encoder's output) and output weight;
    cross-attention's rows are the target's tokens and its columns the source's."""
    kind, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, norms=part)
    found = norms.part_norm_maps(maps)
    attentions, queries, keys = maps.part(part)
    assert found.tokens == queries
    assert found.weighted_norm.shape == attentions.shape == (2, 4, len(queries), len(keys))
    assert found.value_norm.shape == (2, 4, len(keys)) and found.layer_norm.shape == (2, len(queries), len(keys))
    own = own_values(lm, kind, part, maps.source.input_ids, maps.target.input_ids)
    v, w = maps.values, maps.values.weights
    d, hidden, heads = lm.facts.head_dim, lm.facts.hidden_size, lm.facts.n_heads
    for layer in range(lm.facts.n_layers):
        f = own.vectors[layer]  # [heads, n_key, hidden]
        a = attentions[layer].astype(np.float64)
        # bound of each f_h(x_j)'s coordinates' float32 terms: |v| |W_O^h|
        bound = np.abs(v.values[layer]).astype(np.float64) @ np.abs(w.out_weight[layer])
        # a squared norm from float32 products: W_O's Gram over hidden, v's d (and f's d) terms, the heads' mix
        squared_error = (hidden + 2 * d + 2 * heads + 4) * EPS32 * np.square(bound).sum(-1)
        own_norm = np.linalg.norm(f, axis=-1)
        assert (np.abs(found.value_norm[layer] - own_norm) <= norm_tolerance(squared_error, own_norm)).all()
        own_weighted = a * own_norm[:, None, :]
        weighted_tolerance = a * norm_tolerance(squared_error, own_norm)[:, None, :] + EPS32 * own_weighted
        assert (np.abs(found.weighted_norm[layer] - own_weighted) <= weighted_tolerance).all()
        own_layer = np.linalg.norm(np.einsum("hij,hjc->ijc", a, f), axis=-1)
        mixed_bound = np.einsum("hij,hjc->ijc", np.abs(a), bound)
        mixed_error = (hidden + 2 * d + 2 * heads + 4) * EPS32 * np.square(mixed_bound).sum(-1)
        assert (np.abs(found.layer_norm[layer] - own_layer) <= norm_tolerance(mixed_error, own_layer)).all(), layer


def test_the_decoders_maps_are_causal_and_its_rollouts_roll_out_its_own_maps(encdec):
    """Nothing above the diagonal in any map (the decoder attends to keys j <= i only, and the residual is i's own);
    the attention rollout is the product of 0.5 mean_h A + 0.5 I in float64, every rollout row sums to 1."""
    _, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, norms="decoder")
    found = norms.part_norm_maps(maps)
    assert isinstance(found, NormMaps)
    n = len(maps.target.tokens)
    for name in ("weighted_norm", "layer_norm", "residual_ln", "attention_rollout", "residual_ln_rollout"):
        m = getattr(found, name)
        assert m.shape[-2:] == (n, n) and not np.triu(m, 1).any(), name
        assert (np.diagonal(m, axis1=-2, axis2=-1) > 0).all(), name
    steps = 0.5 * maps.decoder.astype(np.float64).mean(1) + 0.5 * np.eye(n)
    rolled = [steps[0]]
    for step in steps[1:]:
        rolled.append(step @ rolled[-1])
    np.testing.assert_allclose(found.attention_rollout, np.stack(rolled), atol=n * EPS32 * 4)
    for rollout in (found.attention_rollout, found.residual_ln_rollout):
        np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(rollout[:, 0], np.eye(n)[0][None].repeat(2, 0), atol=1e-6)  # row 0: itself


def test_cross_attention_refuses_the_residual_and_rollouts_in_words(encdec):
    """§12-13 have no meaning for cross-attention: its residual is the target token's own hidden state and its map
    is not square; the run keeps its values only, part_norm_maps gives §11 alone, the layout is refused with why."""
    _, lm = encdec
    maps = run_seq2seq(lm, SOURCE, TARGET, norms="cross")
    assert maps.values is not None and maps.values.layer_inputs is None and maps.values.block_scale is None
    found = norms.part_norm_maps(maps)
    assert type(found) is ValueNormMaps and not hasattr(found, "residual_ln")
    reason = unsupported_reason(lm.encoder.config, "residual_ln", "cross")
    assert reason is not None and "cross attention" in reason and "not square" in reason and "§12-13" in reason
    with pytest.raises(UnsupportedModelError, match="not square"):
        layout(lm.seq2seq.get_decoder(), "residual_ln", "cross")
    assert unsupported_reason(lm.encoder.config, "norms", "cross") is None


def test_the_norms_hooks_leave_the_models_attentions_unchanged(encdec):
    _, lm = encdec
    plain = run_seq2seq(lm, SOURCE, TARGET)
    for part in PARTS:
        hooked = run_seq2seq(lm, SOURCE, TARGET, norms=part, qk=part)
        assert hooked.heads is not None and hooked.values is not None
        for name in ("encoder", "decoder", "cross"):
            np.testing.assert_array_equal(getattr(hooked, name), getattr(plain, name))
    with pytest.raises(ValueError, match="one part"):
        run_seq2seq(lm, SOURCE, TARGET, norms="cross", qk="decoder")
