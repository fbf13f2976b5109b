"""Sampled query rows of long inputs (METHODS §19): the offset sums from a sample of rows are the full ones when every
row is taken and unbiased otherwise, with the standard error of sampling without replacement; the rows' attribution
equals the full attribution's rows; the JSON says so only when rows were sampled; the flags and their errors."""

from __future__ import annotations

import json
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pytest

from attnlib.analyses.positions import (
    POSITIONS,
    SAMPLING,
    PositionAccumulator,
    PositionOptions,
    PositionsResult,
    RelativePositionHistogram,
    accumulate_positions,
    relative_position_sums,
)
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import numbered
from attnlib.core.model import load_model
from attnlib.core.runner import encode
from attnlib.stats.hta import RowAttribution, hidden_token_attribution, row_attribution
from attnlib.stats.row_sampling import sampled_offset_sums, sampled_rows
from support.cli import run_cli
from support.models import save_tiny

F32 = float(np.finfo(np.float32).eps)


def _population(maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per offset: the full offset sums and the variance of their estimate from m rows, n^2 (1 - m/n) S^2 / m without
    the m (S^2: the variance of y_i[k] over all n rows, y_i[k] = M[i, i+k] or 0), from every row's y."""
    n = maps.shape[-1]
    y = np.zeros((*maps.shape[:-2], n, 2 * n - 1))
    for i in range(n):
        y[..., i, n - 1 - i : 2 * n - 1 - i] = maps[..., i, :]
    return y.sum(-2), y.var(-2, ddof=1) * n * n


def test_every_row_gives_the_full_sums_and_no_variance():
    maps = np.random.default_rng(0).dirichlet(np.ones(7), size=(2, 3, 7))
    keep = np.array([False, True, True, True, True, True, False])
    for k in (None, keep):
        sums, variance = sampled_offset_sums(maps, np.arange(7), k)
        np.testing.assert_allclose(sums, relative_position_sums(maps, k)[0], rtol=1e-12, atol=1e-15)
        assert not variance.any()


def test_the_sampled_sums_are_unbiased_and_their_variance_estimate_too():
    """Over every draw of rows the mean estimate is the full sum within 4 standard errors of that mean, and so is the
    mean variance estimate the true variance n^2 (1 - m/n) S^2 / m (worked out from all n rows)."""
    n, m, draws = 12, 4, 4000
    maps = np.random.default_rng(1).dirichlet(np.ones(n), size=(2, n))
    full, spread = _population(maps)
    true_variance = spread * (1 - m / n) / m
    estimates, variances = [], []
    for seed in range(draws):
        rows = sampled_rows(n, m, sample_from=1, seed=seed, input_index=0)
        assert rows is not None
        s, v = sampled_offset_sums(maps[..., rows, :], rows)
        estimates.append(s)
        variances.append(v)
    estimates, variances = np.array(estimates), np.array(variances)
    assert np.all(np.abs(estimates.mean(0) - full) <= 4 * np.sqrt(true_variance / draws) + 1e-12)
    assert np.all(np.abs(variances.mean(0) - true_variance) <= 4 * variances.std(0) / np.sqrt(draws) + 1e-12)
    assert np.abs(estimates.var(0) - true_variance).max() < 0.1 * true_variance.max()  # the formula is the spread


def test_standard_error_by_hand():
    """n = 4, rows 0 and 2. Offset 0: y = M[0,0] = 1, M[2,2] = 3: estimate 4/2 * 4 = 8, s^2 = 2, variance
    16 * (1 - 1/2) / 2 * 2 = 8; offset +1: y = M[0,1] = 2, M[2,3] = 2: estimate 8, s^2 = 0; offset +3: y = M[0,3] = 5,
    0 (row 2 has no key 5): estimate 10, s^2 = 12.5, variance 50. The histogram divides by 4, 3 and 1 rows."""
    maps = np.zeros((1, 1, 4, 4))
    maps[0, 0, 0] = [1, 2, 0, 5]
    maps[0, 0, 2] = [0, 0, 3, 2]
    rows = np.array([0, 2])
    sums, variance = sampled_offset_sums(maps[:, :, rows], rows)
    offset = {k: k + 3 for k in range(-3, 4)}
    assert (sums[0, 0, offset[0]], sums[0, 0, offset[1]], sums[0, 0, offset[3]]) == (8, 8, 10)
    assert (variance[0, 0, offset[0]], variance[0, 0, offset[1]], variance[0, 0, offset[3]]) == (8, 0, 50)
    h = RelativePositionHistogram(1, 1)
    h.add_sampled_rows(maps[:, :, rows], rows)
    np.testing.assert_allclose(h.histograms()[0, 0, [3, 4, 6]], [8 / 4, 8 / 3, 10 / 1])
    np.testing.assert_allclose(h.standard_errors()[0, 0, [3, 4, 6]], [np.sqrt(8) / 4, 0, np.sqrt(50) / 1])
    assert (h.rows_sampled, h.inputs_sampled) == (2, 1)


def test_which_rows_are_sampled():
    assert sampled_rows(512, 128, 512, 0, 0) is None  # short enough: every row
    assert sampled_rows(600, 600, 512, 0, 0) is None  # as many rows as the input has
    rows = sampled_rows(2048, 128, 512, 0, 3)
    assert rows is not None and len(np.unique(rows)) == 128 and np.all(np.diff(rows) > 0) and rows[-1] < 2048
    np.testing.assert_array_equal(rows, sampled_rows(2048, 128, 512, 0, 3))  # seeded
    assert not np.array_equal(rows, sampled_rows(2048, 128, 512, 0, 4))  # each input its own rows


def _fake_input(attention):
    n = attention.shape[-1]
    return SimpleNamespace(attentions=attention, cls_mask=np.eye(n, dtype=bool)[0], sep_mask=np.zeros(n, bool), n=n,
                           truncated=False)  # fmt: skip


def test_json_keys_only_when_rows_were_sampled():
    rng = np.random.default_rng(3)
    maps = rng.dirichlet(np.ones(6), size=(2, 2, 6))
    full, sampled = PositionAccumulator(2, 2, head_dim=4), PositionAccumulator(2, 2, head_dim=4)
    every = RowAttribution(np.arange(6), maps.copy(), maps.copy(), "exact", None)
    full.add(_fake_input(maps), SimpleNamespace(input=maps.copy(), previous=maps.copy()))
    sampled.add(_fake_input(maps), every)
    a, b = full.result(), sampled.result()
    np.testing.assert_allclose(b.attribution_histograms, a.attribution_histograms, rtol=1e-12)
    assert set(a.to_json()) == set(b.to_json()) - {"attribution_stderr", "attribution_rows_sampled",
                                                   "attribution_inputs_sampled"}  # fmt: skip
    assert a.to_json()["options"] == {k: v for k, v in asdict(PositionOptions()).items() if k not in SAMPLING}
    assert b.to_json()["options"] == asdict(PositionOptions())
    assert b.to_json()["attribution_rows_sampled"] == 6 and not np.any(b.attribution_stderr)
    back = PositionsResult.from_json(json.loads(json.dumps(b.to_json(), allow_nan=False)))
    assert back.attribution_rows_sampled == 6 and back.attribution_stderr is not None
    assert POSITIONS.options_from_json(a.to_json()["options"]) == PositionOptions()  # files without the new options


def test_cli_sampling_flags_and_a_bad_value():
    assert "--sample-rows" in run_cli("positions", "--corpus", "x.txt", "--sample-rows", "1", "--json").error
    help_text = run_cli("positions", "--help").out
    assert "--sample-rows" in help_text and "--sample-from" in help_text


@pytest.mark.parametrize("kind", ["modernbert", "bert"])
def test_row_attribution_is_the_full_attribution_of_those_rows(kind, tmp_path):
    """Exact mode by reverse mode, the linearised layers and the model's own, against exact forward mode; float32
    sums of at most n * hidden squared terms."""
    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    enc = encode(lm, "The quick brown fox jumps over the lazy dog near the river.")
    full = hidden_token_attribution(lm, enc, mode="exact")
    rows = np.array([0, 3, enc.n - 1])
    tolerance = 64 * F32 * enc.n
    for linearise in (True, False):
        got = row_attribution(lm, enc, rows, mode="exact", linearise=linearise)
        np.testing.assert_allclose(got.input, full.input[:, :, rows], atol=tolerance)
        np.testing.assert_allclose(got.previous, full.previous[:, :, rows], atol=tolerance)
    said: list[float] = []
    every = row_attribution(lm, enc, np.arange(enc.n), mode="exact", estimate=said.append)
    np.testing.assert_allclose(every.input, full.input, atol=tolerance)
    assert len(said) == 1 and said[0] > 0


def test_a_shard_samples_the_rows_the_whole_corpus_would(tmp_path):
    """Rows are seeded by an input's place in its corpus (the one a Ray shard carries), so the shards' merged sums are
    the whole corpus's: float32 sums of a few exact rows per input, merged in another order."""
    lm = load_model(str(save_tiny("bert", tmp_path / "bert")))
    texts = ["The quick brown fox jumps over the lazy dog.", "A cat sat on the warm mat today.", "Birds sing early."]
    inputs = [CorpusInput(text, None) for text in texts]
    options = PositionOptions(mode="exact", sample_rows=3, sample_from=5)
    whole = accumulate_positions(lm, inputs, options)
    first, rest = (accumulate_positions(lm, [numbered(inputs[i], i) for i in part], options) for part in ([0], [1, 2]))
    shards = first.merge(rest)
    assert whole.attribution.inputs_sampled == 3 and shards.attribution.rows_sampled == 9
    np.testing.assert_allclose(shards.attribution.sums, whole.attribution.sums, rtol=0, atol=64 * F32)
    np.testing.assert_allclose(shards.attribution.variance, whole.attribution.variance, rtol=0, atol=64 * F32)
    alone = accumulate_positions(lm, inputs[1:], options)  # the same inputs at other places draw other rows
    assert not np.allclose(alone.attribution.sums, rest.attribution.sums, rtol=0, atol=64 * F32)
