"""Hidden Token Attribution: exact mode against plain reverse-mode autograd; the estimate converges to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.core.runner import encode
from attnlib.stats.hta import attention, attribute, forward, hidden_token_attribution, norms
from support.reference import reverse_mode_reference
from support.tolerances import EPS32

pytestmark = pytest.mark.usefixtures("one_thread")


def test_linearised_layers_equal_the_models_own(tiny_model, monkeypatch):
    """Per-token Jacobians give what torch.func.jvp through the model's own layers gives, in both modes."""
    enc = encode(tiny_model, "The cat sat on the mat.", "It was warm.")
    runs = []
    linearised = forward.linearised_input_norms
    monkeypatch.setattr(forward, "linearised_input_norms", lambda *args: runs.append(1) or linearised(*args))
    for mode in ("exact", "estimate"):
        fast = hidden_token_attribution(tiny_model, enc, mode=mode, probes=5)
        plain = hidden_token_attribution(tiny_model, enc, mode=mode, probes=5, linearise=False)
        # shares of a few float32 sums of squares: the two orders of summation differ by a few ulp of ~0.1
        np.testing.assert_allclose(fast.input, plain.input, atol=1e-6)
        np.testing.assert_allclose(fast.previous, plain.previous, atol=1e-6)
    assert len(runs) == 4  # per mode: the check on two directions, then every direction


def test_layer_norm_tangent_is_the_layer_norms_jacobian():
    """The diagonal-minus-rank-two form gives what autograd's Jacobian of torch's LayerNorm gives, row by row."""
    torch.manual_seed(0)
    norm = torch.nn.LayerNorm(8, eps=1e-5)
    torch.nn.init.normal_(norm.weight)
    x, tangents = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64)
    norm = norm.double()
    at = norms.norm_at(norm, x)
    assert at is not None and at.centred
    for row in range(3):
        jacobian = torch.func.jacfwd(norm)(x[row])
        # float64: only rounding of a few length-8 sums separates the two
        torch.testing.assert_close(at.at(row).tangent(tangents[row]), jacobian @ tangents[row], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_rms_norm_tangent_is_the_rms_norms_jacobian(family):
    """A decoder's RMSNorm (Llama's gamma = weight, Gemma's 1 + weight): diagonal minus rank one, as autograd's."""
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    norm = (LlamaRMSNorm if family == "llama" else GemmaRMSNorm)(8, eps=1e-6)
    torch.nn.init.normal_(norm.weight)
    x, tangents = torch.randn(3, 8), torch.randn(3, 8)
    at = norms.norm_at(norm, x)
    assert at is not None and not at.centred
    for row in range(3):
        jacobian = torch.func.jacfwd(norm)(x[row])
        # float32 (these norms compute in float32): sums of 8 terms ~1, and gamma read back through one rsqrt
        torch.testing.assert_close(at.at(row).tangent(tangents[row]), jacobian @ tangents[row], rtol=0, atol=32 * EPS32)


def test_pair_rotation_is_the_matrix_it_was_read_from():
    """Rotary's per-position maps, read as coordinate pairs, act as the matrices do; a map that mixes more is refused."""
    torch.manual_seed(0)
    heads, n, d = 2, 3, 4
    angles = torch.rand(heads, n, d // 2)
    matrices = torch.zeros(heads, n, d, d)
    for e in range(d // 2):  # RoFormer's layout: coordinates 2e and 2e + 1 turn together
        c, s_ = angles[..., e].cos(), angles[..., e].sin()
        matrices[..., 2 * e, 2 * e], matrices[..., 2 * e, 2 * e + 1] = c, -s_
        matrices[..., 2 * e + 1, 2 * e], matrices[..., 2 * e + 1, 2 * e + 1] = s_, c
    pair = attention.pair_rotation(matrices)
    assert pair is not None
    t = torch.randn(n, 5, heads, d)
    # float32: each output is a two-term sum either way
    torch.testing.assert_close(pair.dense(t), torch.einsum("hjde,jche->jchd", matrices, t), rtol=1e-6, atol=1e-6)
    tokens = torch.tensor([2, 0])
    rows = torch.randn(2, heads, d)
    torch.testing.assert_close(
        pair.rows(rows, tokens), torch.einsum("hcde,che->chd", matrices[:, tokens], rows), rtol=1e-6, atol=1e-6
    )
    assert attention.pair_rotation(torch.randn(heads, n, d, d)) is None


def test_estimate_converges_to_exact(tiny_model):
    enc = encode(tiny_model, "A small dog barked at the postman.")
    exact = hidden_token_attribution(tiny_model, enc, mode="exact")
    errors = []
    for k in (2, 32, 512):
        est = hidden_token_attribution(tiny_model, enc, mode="estimate", probes=k)
        errors.append(max(np.abs(est.input - exact.input).mean(), np.abs(est.previous - exact.previous).mean()))
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < errors[0] / 5
    assert errors[2] < 0.01


def test_estimate_repeats_with_its_seed(tiny_model):
    a = attribute(tiny_model, "The keys are under the cushion.", mode="estimate", probes=4)
    b = attribute(tiny_model, "The keys are under the cushion.", mode="estimate", probes=4)
    c = attribute(tiny_model, "The keys are under the cushion.", mode="estimate", probes=4, seed=1)
    np.testing.assert_array_equal(a.input, b.input)
    assert not np.array_equal(a.input, c.input)
    assert a.probes == 4 and a.mode == "estimate"


# ---------- slow tests


@pytest.mark.slow
def test_exact_equals_reverse_mode_on_tiny_models(tiny_model):
    enc = encode(tiny_model, "The cat sat on the mat.", "It was warm.")
    exact = hidden_token_attribution(tiny_model, enc, mode="exact", chunk_size=37)
    f = tiny_model.facts
    heads = [(layer, head) for layer in range(f.n_layers) for head in range(f.n_heads)]
    ref_in, ref_prev = reverse_mode_reference(tiny_model, enc, heads)
    ref_in = ref_in.reshape(exact.input.shape)
    ref_prev = ref_prev.reshape(exact.input.shape)
    assert exact.input.shape == (f.n_layers, f.n_heads, enc.n, enc.n)
    assert exact.previous.shape == exact.input.shape
    np.testing.assert_allclose(exact.input, ref_in, atol=1e-5)
    np.testing.assert_allclose(exact.previous, ref_prev, atol=1e-5)
    np.testing.assert_allclose(exact.input.sum(-1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_exact_equals_reverse_mode_on_packaged_model(minilm):
    enc = encode(minilm, "Birds sing.")
    exact = hidden_token_attribution(minilm, enc, mode="exact")
    heads = [(0, 0), (2, 7), (5, 11)]  # a sample of heads keeps the reverse loop short
    ref_in, ref_prev = reverse_mode_reference(minilm, enc, heads)
    layers, head_ids = zip(*heads)
    np.testing.assert_allclose(exact.input[list(layers), list(head_ids)], ref_in, atol=1e-5)
    np.testing.assert_allclose(exact.previous[list(layers), list(head_ids)], ref_prev, atol=1e-5)
