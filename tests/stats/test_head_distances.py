"""Head distances (METHODS §4): JS divergence by hand and against scipy, the mergeable accumulator, MDS, labels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon, pdist, squareform

from attnlib.stats import js_kernel
from attnlib.stats.head_distances import (
    BEHAVIOURS,
    TILE_COLUMNS,
    HeadDistances,
    behaviour_labels,
    classical_mds,
    head_map,
    js_divergence_rows,
    js_row_error,
    pairwise_js,
    smoothed,
)
from attnlib.stats.special import STAT_KEYS, SpecialTokenResult
from support.results import random_input
from support.tolerances import EPS32, JS_RTOL


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
    np.testing.assert_allclose(pairwise_js(attn), expected, rtol=0, atol=n * js_row_error(n))
    assert (np.diag(pairwise_js(attn)) == 0).all()


def binade(exponent: int, step: int = 1) -> np.ndarray:
    """Every step-th float32 in [2^exponent, 2^(exponent + 1))."""
    first = (exponent + 127) << 23
    return np.arange(first, first + 2**23, step, dtype=np.int32).view(np.float32)


def test_kernel_x_log_x_is_within_its_float32_bound():
    """s ln s from the kernel's log against float64, on every 7th float32 of [1/2, 2) (where the log's range reduction
    switches, at 2/3 and 4/3) and every 61st one elsewhere down to 2^-24 (smoothed maps of up to 33,000 tokens);
    scripts/fit_log_polynomial.py --check tries every one."""
    worst = 0.0
    for exponent in range(-24, 2):
        x = binade(exponent, 7 if exponent in (-1, 0) else 61)
        out = np.empty_like(x)
        js_kernel.s_log_s(x, np.zeros_like(x), out)  # s = x + 0 = x
        exact = x * np.log(x.astype(np.float64))
        nonzero = exact != 0
        assert (out[~nonzero] == 0).all()  # ln 1 = 0 exactly: r = 0
        worst = max(worst, float((np.abs(out - exact)[nonzero] / np.abs(exact[nonzero])).max()))
    # the log within LOG_REL_ERROR, the product rounded once more (the bound head_distances' analysis uses)
    assert worst <= js_kernel.LOG_REL_ERROR + EPS32 * (1 + 1e-6)
    assert worst > EPS32  # a genuine float32 computation: the check has something to find


def peaked_attention(rng: np.random.Generator, layers: int, heads: int, n: int) -> np.ndarray:
    """[layers, heads, n, n] rows as trained heads have them: one-hot, on a few tokens, or broad."""
    logits = rng.normal(size=(layers, heads, n, n)) * rng.choice([0.5, 3.0, 30.0], size=(layers, heads, n, 1))
    attn = np.exp(logits - logits.max(-1, keepdims=True))
    return (attn / attn.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("threads", [1, 2])
def test_pairwise_js_against_the_definition_in_float64(threads):
    """Every pair of heads of long inputs (several column tiles and a partial one) against js_divergence_rows: the
    definition in float64 on the same float32 smoothed maps, within the worst-case float32 error per row."""
    rng = np.random.default_rng(5)
    layers, heads = 2, 4
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for n in (7, 100):  # 100 * 100 columns: 4 full tiles and a partial one
            assert n * n < TILE_COLUMNS or (n * n) % TILE_COLUMNS
            attn = peaked_attention(rng, layers, heads, n)
            p = smoothed(attn).reshape(layers * heads, n, n)
            expected = np.array([[js_divergence_rows(p[a], p[b]) for b in range(len(p))] for a in range(len(p))])
            got = pairwise_js(attn)
            np.testing.assert_allclose(got, expected, rtol=0, atol=n * js_row_error(n))
            assert np.array_equal(got, got.T) and (np.diag(got) == 0).all()
    finally:
        torch.set_num_threads(old_threads)


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
