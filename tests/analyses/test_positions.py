"""Relative-position histograms, centres of mass and correlations (METHODS §8, §9) and the CLI (the page:
app/test_local_global_page.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from attnlib.analyses.positions import (
    CorrelationSums,
    PositionAccumulator,
    PositionOptions,
    PositionsResult,
    RelativePositionHistogram,
    accumulate_positions,
    center_of_mass,
    relative_position_sums,
    row_correlations,
)
from attnlib.core.corpus import read_corpus
from attnlib.stats.hta import Attribution
from support.cli import cli_json, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")

M3 = np.array([[0.1, 0.2, 0.7], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]])
M2 = np.array([[0.6, 0.4], [0.9, 0.1]])


def test_offset_sums_and_counts_by_hand():
    sums, counts = relative_position_sums(M3[None, None])
    # offsets -2..2: [2,0]; [1,0]+[2,1]; diagonal; [0,1]+[1,2]; [0,2]
    np.testing.assert_allclose(sums[0, 0], [0.5, 0.3 + 0.25, 0.1 + 0.3 + 0.25, 0.2 + 0.4, 0.7])
    np.testing.assert_array_equal(counts, [1, 2, 3, 2, 1])


def test_dropping_positions_removes_them_as_queries_and_keys():
    sums, counts = relative_position_sums(M3[None, None], keep=np.array([False, True, True]))
    np.testing.assert_allclose(sums[0, 0], [0.0, 0.25, 0.3 + 0.25, 0.4, 0.0])
    np.testing.assert_array_equal(counts, [0, 1, 2, 1, 0])


def test_histogram_divides_each_offset_by_its_count_over_inputs():
    hist = RelativePositionHistogram(1, 1)
    hist.add_maps(M2[None, None])
    hist.add_maps(M3[None, None])
    np.testing.assert_array_equal(hist.offsets, [-2, -1, 0, 1, 2])
    np.testing.assert_array_equal(hist.counts, [1, 3, 5, 3, 1])
    expected = [0.5 / 1, (0.9 + 0.3 + 0.25) / 3, (0.6 + 0.1 + 0.1 + 0.3 + 0.25) / 5, (0.4 + 0.2 + 0.4) / 3, 0.7 / 1]
    np.testing.assert_allclose(hist.histograms()[0, 0], expected)
    com = sum(k * h for k, h in zip(range(-2, 3), expected)) / sum(expected)
    np.testing.assert_allclose(hist.center_of_mass()[0, 0], com)


def test_center_of_mass_by_hand_and_only_over_offsets_seen():
    offsets = np.array([-1, 0, 1])
    np.testing.assert_allclose(center_of_mass(np.array([0.0, 0.5, 0.5]), offsets, np.ones(3, bool)), 0.5)
    np.testing.assert_allclose(center_of_mass(np.array([1.0, 1.0, 3.0]), offsets, np.array([True, True, False])), -0.5)
    assert np.isnan(center_of_mass(np.zeros(3), offsets, np.ones(3, bool)))


def test_histogram_merge_equals_the_whole():
    rng = np.random.default_rng(0)
    maps = [rng.dirichlet(np.ones(n), size=(2, 3, n)) for n in (4, 7, 5)]
    whole, first, second = (RelativePositionHistogram(2, 3) for _ in range(3))
    for m in maps:
        whole.add_maps(m)
    first.add_maps(maps[0])
    for m in maps[1:]:
        second.add_maps(m)
    merged = first.merge(second)
    np.testing.assert_allclose(merged.sums, whole.sums)
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert first.max_offset == 3  # merging does not change its operands


def test_row_correlations_match_scipy_and_skip_constant_rows():
    rng = np.random.default_rng(1)
    a = rng.random((3, 6))
    b = rng.random((3, 6))
    b[2] = 0.25  # constant row
    a[1, :2] = a[1, 2]  # ties
    p, s, valid = row_correlations(a, b)
    np.testing.assert_array_equal(valid, [True, True, False])
    for r in range(2):
        np.testing.assert_allclose(p[r], pearsonr(a[r], b[r])[0])
        np.testing.assert_allclose(s[r], spearmanr(a[r], b[r])[0])
    sums = CorrelationSums(1, 1)
    sums.add_maps(a[None, None], b[None, None])
    np.testing.assert_allclose(sums.means()[0][0, 0], (p[0] + p[1]) / 2)
    assert sums.rows[0, 0] == 2


def _fake_input(attention, special, truncated=False):
    n = attention.shape[-1]
    cls = np.zeros(n, bool)
    cls[0] = True
    sep = np.zeros(n, bool)
    sep[-1] = special
    return SimpleNamespace(attentions=attention, cls_mask=cls, sep_mask=sep, n=n, truncated=truncated)


def test_accumulator_options_counts_and_round_trip():
    rng = np.random.default_rng(2)
    acc = PositionAccumulator(2, 2, head_dim=4, options=PositionOptions(drop_special=True, identifiable_only=True))
    short = rng.dirichlet(np.ones(4), size=(2, 2, 4))
    assert acc.wants(4) and not acc.wants(5)
    acc.add(_fake_input(short, True, truncated=True), Attribution([], short[::-1].copy(), short.copy(), "exact", None))
    acc.skip()
    r = acc.result()
    assert (r.n_inputs, r.n_skipped, r.n_longer, r.n_truncated) == (1, 1, 0, 1)
    keep = np.array([False, True, True, False])
    expected, counts = relative_position_sums(short, keep)
    np.testing.assert_allclose(
        r.attention_histograms, np.divide(expected, counts, out=np.zeros_like(expected), where=counts > 0)
    )
    np.testing.assert_allclose(r.correlation["pearson_previous"], 1.0)  # attention against itself
    back = PositionsResult.from_json(json.loads(json.dumps(r.to_json(), allow_nan=False)))
    np.testing.assert_allclose(back.attribution_histograms, r.attribution_histograms)
    np.testing.assert_allclose(back.attention_center_of_mass, r.attention_center_of_mass)
    assert back.options == r.options and back.n_truncated == 1


def test_corpus_halves_merge_into_the_whole(tiny_model, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat.\nA dog barked at the postman.\nRain fell.\tThe street was wet.\n")
    inputs = read_corpus(corpus)
    options = PositionOptions(probes=4)
    whole = accumulate_positions(tiny_model, inputs, options).result().to_json()
    merged = (
        accumulate_positions(tiny_model, inputs[:1], options)
        .merge(accumulate_positions(tiny_model, inputs[1:], options))
        .result()
        .to_json()
    )
    assert whole["n_inputs"] == 3
    np.testing.assert_allclose(
        np.array(merged["histograms"]["attribution"]), np.array(whole["histograms"]["attribution"]), atol=1e-9
    )
    np.testing.assert_allclose(
        np.array(merged["correlation"]["spearman_input"], float),
        np.array(whole["correlation"]["spearman_input"], float),
        atol=1e-9,
    )


def test_cli_hta_and_positions(tiny_model_dir, tmp_path):
    out = cli_json(
        "hta",
        "--text",
        "The cat sat.",
        "--pair",
        "It slept.",
        "--model",
        str(tiny_model_dir),
        "--mode",
        "estimate",
        "--probes",
        "3",
        "--json",
    )
    n = len(out["tokens"])
    assert np.array(out["input"]).shape == (2, 4, n, n) == np.array(out["previous"]).shape
    np.testing.assert_allclose(np.array(out["input"]).sum(-1), 1.0, atol=1e-5)
    corpus = tmp_path / "c.txt"
    corpus.write_text("The cat sat.\nA dog barked.\nRain fell.\n")
    out = cli_json(
        "positions", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--limit", "2", "--probes", "2", "--json"
    )
    assert out["n_inputs"] == 2
    assert len(out["attention_center_of_mass"]) == len(out["attribution_center_of_mass"]) == 2
    offsets = out["histograms"]["offsets"]
    assert np.array(out["histograms"]["attention"]).shape == (2, 4, len(offsets))
    for name in ("pearson_previous", "spearman_previous", "pearson_input", "spearman_input"):
        assert np.array(out["correlation"][name], float).shape == (2, 4)


def test_cli_rejects_a_missing_corpus(tiny_model_dir):
    ran = run_cli("positions", "--corpus", "no/such/file.txt", "--model", str(tiny_model_dir), "--json")
    assert ran.code == 2, ran.err
    assert "no such file" in ran.err


# ---------- slow tests
