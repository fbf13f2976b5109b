"""The figures registered for patching and composition results (attnlib.views.patching), from hand-made results."""

from __future__ import annotations

import numpy as np

from attnlib.analyses.compose import CompositionResult
from attnlib.analyses.patch import PatchResult
from attnlib.views.drawing import figures_of


def test_one_pair_draws_heads_grids_and_attribution_beside_the_exact_scores():
    heads = np.array([[0.1, -0.2], [0.9, 0.0]])
    result = PatchResult("logit-diff", "noise", {"encoder": heads}, clean={"tokens": ["a", "Ġb", "▁c"], "ids": [1, 2, 3]},
                         heads_positions={"encoder": np.zeros((2, 2, 3))}, residual=np.ones((2, 3)),
                         attribution={"encoder": heads * 0.5}, attribution_r=1.0)  # fmt: skip
    figures = figures_of(result, "m")
    titles = [f.layout.title.text for f in figures]
    assert len(figures) == 5 and "noising" in titles[0] and "r = 1.000" in titles[-1]
    np.testing.assert_array_equal(figures[0].data[0].z, heads)
    np.testing.assert_array_equal(figures[2].data[0].z, np.ones((2, 3)))  # layers x positions
    assert list(figures[2].layout.xaxis.ticktext) == ["0: a", "1:  b", "2:  c"]  # as readers see them (no "Ġ", "▁")
    np.testing.assert_array_equal(figures[-1].data[1].x, heads.ravel())
    np.testing.assert_array_equal(figures[-1].data[1].y, heads.ravel() * 0.5)


def test_pairs_draw_each_heads_mean_with_its_standard_error():
    means, se = np.array([[0.5, 0.1]]), np.array([[0.05, 0.02]])
    figures = figures_of(PatchResult("logprob", "denoise", {"encoder": means}, pairs=4, heads_se={"encoder": se}), "m")
    bars = figures[1].data[0]
    assert list(bars.x) == ["1-1", "1-2"] and list(bars.y) == [0.5, 0.1]
    np.testing.assert_array_equal(bars.error_y.array, [0.05, 0.02])


def test_composition_draws_a_sender_by_receiver_heatmap_per_kind():
    scores = np.random.default_rng(0).random((2, 2, 2, 2))
    figures = figures_of(CompositionResult(scores, scores * 2, scores * 3), "m")
    assert [f.layout.title.text.split(": ")[1][0] for f in figures] == ["Q", "K", "V"]
    np.testing.assert_allclose(figures[1].data[0].z, (scores * 2).reshape(4, 4))
