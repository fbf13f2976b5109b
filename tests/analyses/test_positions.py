"""Relative-position histograms, centres of mass and correlations (METHODS §8, §9), the CLI, the shipped file, the page."""

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
from attnlib.results.shipped import ROOT
from attnlib.stats.attribution import Attribution
from attnlib.stats.value_norms import MEASURES
from support.apptest import across_tabs, figures, open_tab, tables
from support.cli import cli_json, run_cli
from support.positions import TABS

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


def test_page_opens_with_the_shipped_result():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/local_global/page.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Local versus global"
    assert len(figures(at)) == 1  # only the open tab, Centre of mass, is drawn
    assert any("precomputed" in c.value for c in at.caption)
    assert not at.error
    charts = across_tabs(at, "lg_tab", TABS.values(), figures)
    assert len(charts) >= 9  # centre of mass, two histogram grids, three correlation figures, aggregation, example
    assert "Global aggregation" in [h.value for h in open_tab(at, "lg_tab", TABS["aggregation"]).subheader]


# ---------- slow tests


@pytest.mark.slow
def test_page_computes_a_small_corpus_on_request():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/local_global/page.py").run()
    at.number_input(key="local_global_limit").set_value(3).run()
    at.number_input(key="lg_k").set_value(2).run()
    compute = [b for b in at.button if b.label.startswith("Compute for")]
    assert compute and compute[0].label == "Compute for 3 inputs"
    compute[0].click().run()
    assert not at.exception, at.exception
    assert any("3 inputs of" in c.value and "computed here" in c.value for c in at.caption)
    charts = across_tabs(at, "lg_tab", [TABS["com"], TABS["histograms"], TABS["correlation"]], figures)
    assert len(charts) >= 6
    assert at.query_params["probes"] == "2"


def _numbers_of_difference(text: str) -> tuple[float, float]:
    import re

    found = re.search(r"largest difference: .* in layer \d+, (-?\d+\.\d+) vs (-?\d+\.\d+)", text)
    assert found, text
    return float(found.group(1)), float(found.group(2))


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_compares_two_models_of_different_depth(tiny_model_dir, tmp_path):
    from support.models import save_tiny_bert
    from support.pages import assert_table_equals_cli, cli_aggregation, page_with

    first, second = str(tiny_model_dir), str(save_tiny_bert(tmp_path / "three-layers", layers=3, seed=1))
    at = page_with(first, second, tab="aggregation")
    for command in ("positions", "aggregation"):
        for name in (first, second):
            at.button(key=f"compute:{command}:{name}").click().run()
            assert not at.exception, at.exception
    assert at.query_params["cmp"] == second
    aggregation = next(d for d in tables(at) if "measure" in d.columns)
    aggregation_lines = [m.value for m in at.markdown if "largest difference" in m.value]
    specs = [json.dumps(json.loads(c.spec)) for c in figures(at)]  # "/" unescaped
    specs += across_tabs(
        at,
        "lg_tab",
        [TABS["com"], TABS["correlation"]],
        lambda at: [json.dumps(json.loads(c.spec)) for c in figures(at)],
    )
    summary = next(d for d in tables(open_tab(at, "lg_tab", TABS["com"])) if "attention centre of mass" in d.columns)
    assert list(summary["model"]) == [first] * 2 + [second] * 3  # a row per layer of each model
    data = {name: cli_aggregation(name) for name in (first, second)}
    for name in (first, second):
        assert_table_equals_cli(aggregation, name, data[name])
    # The aggregation line: the largest |difference| over the layers both have, of Spearman and centre of mass.
    diffs = [
        abs(np.array(data[first][key][m][:2], float) - np.array(data[second][key][m][:2], float)).max()
        for key, names in (("spearman", MEASURES), ("center_of_mass", (*MEASURES, "attribution")))
        for m in names
    ]
    assert len(aggregation_lines) == 2  # positions (above the tabs), then aggregation
    a, b = _numbers_of_difference(aggregation_lines[1])
    assert abs(a - b) == pytest.approx(max(diffs), abs=0.011)
    assert sum(first in s and second in s for s in specs) >= 7  # overlays and side-by-side heatmaps name both
    assert any("relative depth" in s for s in specs)  # 2 and 3 layers: the line charts share a relative-depth axis
