"""Value-weighted norms, N, N_ResLN and rollouts (METHODS §11-13): hand-worked cases, the model's own weights, CLI.

The slow tier; test_norms.py holds the quick tests."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.families import layout
from attnlib.core.runner import run
from attnlib.stats import value_norms as norms
from support.reference import _reference_vectors

pytestmark = pytest.mark.slow


@pytest.mark.slow
def test_decomposition_rebuilds_the_block_output_on_minilm(minilm, one_thread):
    captured = []
    hooks = [
        s.norm.register_forward_hook(lambda _m, _i, o: captured.append(o[0].detach()))
        for s in layout(minilm.encoder).sites
    ]
    try:
        r = run(minilm, "Colourless green ideas sleep furiously, they say.", capture_norms=True)
    finally:
        for hook in hooks:
            hook.remove()
    w = r.norm_weights
    vectors = norms.head_vectors(r.values, w.out_weight)
    np.testing.assert_allclose(vectors, _reference_vectors(minilm, r), rtol=1e-4, atol=1e-5)
    maps = norms.norm_maps(r)
    weighted = np.linalg.norm(r.attentions[..., None] * vectors[:, :, None], axis=-1)  # ||A_ij f_h(x_j)||
    np.testing.assert_allclose(maps.weighted_norm, weighted, rtol=1e-5, atol=1e-6)
    for l in range(minilm.facts.n_layers):
        parts = norms.layer_norm_parts(
            r.attentions[l], vectors[l], r.layer_inputs[l], w.out_bias[l], w.gamma[l], w.beta[l], float(w.eps[l])
        )
        np.testing.assert_allclose(parts.output(), captured[l].numpy(), atol=1e-5)
    for rolled in (maps.attention_rollout, maps.residual_ln_rollout):
        np.testing.assert_allclose(rolled.sum(-1), 1.0, atol=1e-5)
        assert (rolled >= 0).all()
