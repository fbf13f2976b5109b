"""Queries and keys in one picture (METHODS §17): the translation and scaling change no attention weight, the collected
queries and keys are the ones the weights give (rotary families after rotation), PCA by hand and against numpy's SVD,
the fidelity numbers on constructed heads, the collector, the command line and its result files.

The slow tier; test_qk.py holds the quick tests."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.analyses.qk import project

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tsne", "umap"])
def test_tsne_and_umap_are_seeded_on_one_machine(method):
    rng = np.random.default_rng(5)
    points = np.concatenate([rng.normal(c, 0.3, (60, 8)) for c in (-2, 0, 2)])
    first, second = project(points, method), project(points, method)
    np.testing.assert_array_equal(first, second)
    labels = np.repeat([0, 1, 2], 60)  # three separated clusters stay separated: each point's nearest is its own
    distances = np.linalg.norm(first[:, None] - first[None], axis=-1) + np.eye(180) * 1e9
    assert (labels[distances.argmin(1)] == labels).mean() > 0.95
