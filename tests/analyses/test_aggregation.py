"""Layer-output attribution G_out (METHODS §13) against reverse mode, and the aggregation accumulator and command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlib.analyses.aggregation import AggregationAccumulator, AggregationResult
from attnlib.cli.entry import main
from attnlib.core.runner import encode
from attnlib.stats.attribution import hidden_token_attribution
from attnlib.stats.value_norms import MEASURES

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("linearise", [True, False])
def test_output_only_when_asked(tiny_model, linearise):
    """Without with_output there is no G_out, and the per-head contributions are the same numbers."""
    enc = encode(tiny_model, "The cat sat on the mat.", "It was warm.")
    plain = hidden_token_attribution(tiny_model, enc, mode="estimate", probes=3, linearise=linearise)
    both = hidden_token_attribution(tiny_model, enc, mode="estimate", probes=3, linearise=linearise, with_output=True)
    assert plain.output is None and both.output is not None
    np.testing.assert_allclose(plain.input, both.input, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(plain.previous, both.previous, rtol=1e-5, atol=1e-7)


def test_estimate_output_approaches_exact(tiny_model):
    enc = encode(tiny_model, "A small dog barked at the postman.")
    exact = hidden_token_attribution(tiny_model, enc, mode="exact", with_output=True).output
    errors = [
        np.abs(
            hidden_token_attribution(tiny_model, enc, mode="estimate", probes=k, with_output=True).output - exact
        ).mean()
        for k in (2, 256)
    ]
    assert errors[1] < errors[0] / 4 and errors[1] < 0.01


def test_aggregation_by_hand():
    """One layer, 3 tokens: each measure's per-row Pearson/Spearman with G_out, and the centre of mass."""
    attribution = np.array([[[0.5, 0.3, 0.2], [0.2, 0.6, 0.2], [0.1, 0.2, 0.7]]])  # [1 layer, 3, 3]
    same = attribution[0]
    reverse = same[:, ::-1]
    uniform = np.full((3, 3), 1 / 3)  # constant rows are skipped
    measures = np.stack([same, reverse, uniform, same, same])[None]  # [1, 5 measures, 3, 3]
    acc = AggregationAccumulator(1)
    acc.add_maps(measures, attribution)
    result = acc.result()
    assert result.pearson["attention"][0] == pytest.approx(1.0)
    rows = [np.corrcoef(reverse[j], same[j])[0, 1] for j in range(3)]
    assert result.pearson["layer_norm"][0] == pytest.approx(np.mean(rows))
    # Ranks by hand: rows 0 and 2 reverse exactly (-1); row 1 [0.2, 0.6, 0.2] is its own reverse (+1).
    assert result.spearman["layer_norm"][0] == pytest.approx(-1 / 3)
    assert np.isnan(result.pearson["residual_ln"][0])
    # Centre of mass of the uniform map: offsets -2..2 occur 1,2,3,2,1 times, each row mass 1/3 -> H flat -> 0.
    assert result.center_of_mass["residual_ln"][0] == pytest.approx(0.0)
    # G_out: H[k] = mean of M[i, i+k]: k=-2: 0.1; -1: (0.2+0.2)/2; 0: 0.6; 1: (0.3+0.2)/2; 2: 0.2.
    h = np.array([0.1, 0.2, 0.6, 0.25, 0.2])
    assert result.center_of_mass["attribution"][0] == pytest.approx((h * np.arange(-2, 3)).sum() / h.sum())
    # Per-measure histograms: the same H as above, and the uniform map's flat 1/3.
    np.testing.assert_array_equal(result.offsets, np.arange(-2, 3))
    np.testing.assert_allclose(result.histograms["attribution"][0], h)
    np.testing.assert_allclose(result.histograms["residual_ln"][0], np.full(5, 1 / 3))
    back = AggregationResult.from_json(json.loads(json.dumps(result.to_json())))
    np.testing.assert_allclose(back.histograms["attention"], result.histograms["attention"])
    np.testing.assert_array_equal(back.offsets, result.offsets)


def test_histograms_of_inputs_of_different_lengths_merge_exactly():
    """Two inputs (3 and 2 tokens) in one accumulator equal two accumulators merged; offsets widen to the longest."""
    rng = np.random.default_rng(0)

    def maps(n: int) -> tuple[np.ndarray, np.ndarray]:
        m = rng.random((2, 5, n, n))
        g = rng.random((2, n, n))
        return m / m.sum(-1, keepdims=True), g / g.sum(-1, keepdims=True)

    first, second = maps(2), maps(3)
    whole, a, b = AggregationAccumulator(2), AggregationAccumulator(2), AggregationAccumulator(2)
    whole.add_maps(*first)
    whole.add_maps(*second)
    a.add_maps(*first)
    b.add_maps(*second)
    merged = a.merge(b).result()
    expected = whole.result()
    np.testing.assert_array_equal(merged.offsets, np.arange(-2, 3))
    for name in (*MEASURES, "attribution"):
        np.testing.assert_allclose(merged.histograms[name], expected.histograms[name], rtol=1e-12)
    # Offset +2 occurs only in the 3-token input, once (row 0 to key 2): its histogram value is that one entry.
    np.testing.assert_allclose(expected.histograms["attribution"][:, -1], second[1][:, 0, 2])
    np.testing.assert_allclose(expected.histograms["layer_norm"][:, -1], second[0][:, 1, 0, 2])


def test_results_written_before_histograms_still_read():
    acc = AggregationAccumulator(1)
    acc.add_maps(np.full((1, 5, 2, 2), 0.5), np.full((1, 2, 2), 0.5))
    data = acc.result().to_json()
    del data["histograms"]
    back = AggregationResult.from_json(data)
    assert back.histograms == {} and len(back.offsets) == 0


def test_hta_cli_prints_output(tiny_model_dir, tiny_model, capsys):
    assert main(["hta", "--text", "The cat sat.", "--model", str(tiny_model_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    expected = hidden_token_attribution(
        tiny_model, encode(tiny_model, "The cat sat."), mode="exact", with_output=True
    ).output
    np.testing.assert_allclose(np.array(data["output"]), expected, atol=1e-6)
