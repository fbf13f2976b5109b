"""Hidden Token Attribution: exact mode against plain reverse-mode autograd; the estimate converges to it.

The slow tier; test_attribution.py holds the quick tests."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.runner import encode
from attnlib.stats.attribution import hidden_token_attribution
from support.reference import reverse_mode_reference

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


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
