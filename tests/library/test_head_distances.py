"""Head distances (METHODS §4): JS divergence by hand and against scipy, the mergeable accumulator, MDS, labels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon, pdist, squareform

from attnlib.head_distances import (
    BEHAVIOURS,
    HeadDistances,
    behaviour_labels,
    classical_mds,
    head_map,
    js_divergence_rows,
    pairwise_js,
    smoothed,
)
from attnlib.special import STAT_KEYS, SpecialTokenResult
from support.results import random_input
from support.tolerances import JS_RTOL


def test_js_divergence_by_hand():
    assert js_divergence_rows([[1, 0]], [[0, 1]]) == pytest.approx(math.log(2))  # disjoint supports
    assert js_divergence_rows([[0.3, 0.7]], [[0.3, 0.7]]) == 0
    # p = (1/2, 1/2), q = (1, 0), m = (3/4, 1/4)
    expected = 0.5 * (0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)) + 0.5 * math.log(1 / 0.75)
    assert js_divergence_rows([[0.5, 0.5]], [[1, 0]]) == pytest.approx(expected)
    # rows are summed
    assert js_divergence_rows([[1, 0], [0.5, 0.5]], [[0, 1], [1, 0]]) == pytest.approx(math.log(2) + expected)


def test_smoothing_is_the_methods_formula():
    a = np.array([[[[1.0, 0.0], [0.5, 0.5]]]], np.float32)
    np.testing.assert_allclose(smoothed(a)[0, 0], [[0.9995, 0.0005], [0.5, 0.5]], rtol=1e-6)


def test_pairwise_js_against_scipy():
    rng = np.random.default_rng(0)
    attn = random_input(rng, layers=2, heads=3).attentions
    n = attn.shape[-1]
    p = smoothed(attn).astype(np.float64).reshape(6, n, n)
    expected = np.array(
        [[sum(jensenshannon(p[a, r], p[b, r]) ** 2 for r in range(n)) for b in range(6)] for a in range(6)]
    )
    np.testing.assert_allclose(pairwise_js(attn), expected, atol=1e-5)
    assert (np.diag(pairwise_js(attn)) == 0).all()


def test_accumulator_sums_over_inputs_whatever_the_buffer():
    rng = np.random.default_rng(1)
    inputs = [random_input(rng) for _ in range(12)]
    expected = sum(pairwise_js(r.attentions) for r in inputs)
    for columns in (16, 100, 4096):  # 16 forces the direct path for large inputs, 100 forces many flushes
        acc = HeadDistances(2, 3, buffer_columns=columns)
        for r in inputs:
            acc.add(r)
        np.testing.assert_allclose(acc.result(), expected, rtol=JS_RTOL)  # other tilings: float32 rounding
        assert acc.n_inputs == 12 and acc.n_rows == sum(r.n for r in inputs)


def test_merging_two_halves_equals_the_whole():
    rng = np.random.default_rng(2)
    inputs = [random_input(rng) for _ in range(10)]
    whole, first, second = (HeadDistances(2, 3, buffer_columns=200) for _ in range(3))
    for i, r in enumerate(inputs):
        whole.add(r)
        (first if i < 3 else second).add(r)
    first_alone = first.result().copy()
    merged = first.merge(second)
    np.testing.assert_allclose(merged.result(), whole.result(), rtol=JS_RTOL)  # the halves tile their rows otherwise
    np.testing.assert_allclose(first.result(), first_alone)  # operand unchanged
    assert merged.n_inputs == 10
    with pytest.raises(ValueError):
        first.merge(HeadDistances(3, 2))


def test_classical_mds_recovers_planar_points():
    rng = np.random.default_rng(3)
    points = rng.normal(size=(9, 2))
    d = squareform(pdist(points))
    coords = classical_mds(d)
    np.testing.assert_allclose(squareform(pdist(coords)), d, atol=1e-9)
    np.testing.assert_allclose(classical_mds(d), coords)  # same orientation every time
    assert (coords[np.abs(coords).argmax(axis=0), [0, 1]] > 0).all()


def special_result(**heads: np.ndarray) -> SpecialTokenResult:
    """A result with zeros except the given [layers, heads] arrays, and mean ln n = ln 10."""
    shape = np.shape(next(iter(heads.values())))
    values = {key: np.zeros(shape) for key in STAT_KEYS}
    values.update({key: np.array(v, float) for key, v in heads.items()})
    return SpecialTokenResult(5, values, math.log(10))


def test_behaviour_labels_use_the_stated_thresholds():
    result = special_result(
        next=[[0.6, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.4]],
        prev=[[0.0, 0.7, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]],
        cls=[[0.3, 0.0, 0.9, 0.0, 0.0, 0.0, 0.0, 0.0]],
        sep=[[0.0, 0.0, 0.0, 0.51, 0.0, 0.0, 0.5, 0.0]],
        punct=[[0.0, 0.0, 0.0, 0.0, 0.8, 0.0, 0.0, 0.0]],
        # 0.8 * ln 10 = 1.842
        entropy=[[2.2, 0.0, 0.0, 0.0, 0.0, 1.9, 1.8, 0.0]],
    )
    labels = behaviour_labels(result)
    assert labels.tolist() == [["next", "prev", "[CLS]", "[SEP]", "punctuation", "broad", "other", "other"]]
    assert set(labels.ravel()) <= set(BEHAVIOURS)


def test_head_map_points_are_layer_major():
    rng = np.random.default_rng(4)
    acc = HeadDistances(2, 3)
    for _ in range(3):
        acc.add(random_input(rng))
    result = special_result(cls=np.zeros((2, 3)))
    hm = head_map(acc.result(), result)
    assert hm.coords.shape == (6, 2)
    assert hm.layer.tolist() == [0, 0, 0, 1, 1, 1] and hm.head.tolist() == [0, 1, 2, 0, 1, 2]
    assert len(hm.to_json()["behaviour"]) == 6
