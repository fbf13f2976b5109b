"""The scale-out tests' corpus, accumulators and comparison (core/test_scale.py, results/, conftest.py)."""

from __future__ import annotations

import contextlib
import importlib.util

import numpy as np
import pytest
import torch

from attnlib.analyses.deps import DependencyCounts
from attnlib.stats.head_distances import HeadDistances
from attnlib.stats.special import STAT_KEYS, SpecialTokenStats
from support.tolerances import FORWARD_RTOL, JS_RTOL

requires_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install -r requirements-scale.txt)"
)


N_SENTENCES = 40


BATCH = 8  # 5 batches over 40 sentences, so shards hold several batches


def _all_accumulators():
    def all_accumulators(lm) -> list:
        """Special-token statistics, head distances and dependency counts: the statistics of `special` and `deps`."""
        f = lm.facts
        return [
            SpecialTokenStats(f.n_layers, f.n_heads),
            HeadDistances(f.n_layers, f.n_heads),
            DependencyCounts(f.n_layers, f.n_heads),
        ]

    return all_accumulators


all_accumulators = (
    _all_accumulators()
)  # a local function: Ray workers get it by value (this module is not on their path)


def assert_same_statistics(local: list, other: list) -> None:
    """Special statistics and JS distances within float32 rounding of other batchings (tests/support/tolerances.py),
    dependency counts and table identical."""
    a, b = local[0].result(), other[0].result()
    assert a.n_inputs == b.n_inputs == N_SENTENCES
    for key in STAT_KEYS:
        np.testing.assert_allclose(b.heads[key], a.heads[key], rtol=FORWARD_RTOL, atol=FORWARD_RTOL, err_msg=key)
    assert b.uniform_entropy == pytest.approx(a.uniform_entropy, abs=1e-9)  # float64 sums of ln n: exact to 1e-15
    np.testing.assert_allclose(other[1].result(), local[1].result(), rtol=JS_RTOL, atol=1e-9)
    for name in ("totals", "head_hits", "offset_hits", "n_sentences", "n_words"):
        la, lb = local[2], other[2]
        order = [lb.relations.index(r) for r in la.relations]  # labels may be met in another order
        got = getattr(lb, name)[:, order] if name in ("totals", "head_hits", "offset_hits") else getattr(lb, name)
        np.testing.assert_array_equal(got, getattr(la, name), err_msg=name)
    assert other[2].table(min_count=1).as_json() == local[2].table(min_count=1).as_json()


@contextlib.contextmanager
def torch_threads(n: int):
    """Run torch with n threads, as each Ray worker does with one CPU (CPU kernels may round by thread count)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
