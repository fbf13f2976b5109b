"""Layer-output attribution G_out (METHODS §13) against reverse mode, and the aggregation accumulator and command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlib.analyses.aggregation import (
    AGGREGATION,
    AggregationAccumulator,
    AggregationOptions,
    AggregationResult,
    accumulate_aggregation,
)
from attnlib.core.corpus import read_corpus
from attnlib.core.runner import encode, model_inputs
from attnlib.results.files import read_result_file
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.stats.hta import hidden_token_attribution
from attnlib.stats.norms import MEASURES
from support.cli import cli_json
from support.tolerances import FORWARD_RTOL

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


def test_causal_aggregation_keeps_offsets_up_to_zero_by_hand():
    """A decoder's maps (METHODS §18) have nothing above the diagonal: the result keeps offsets -2..0, with the same
    sums as an encoder's, and says so in its JSON."""
    attribution = np.array([[[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.1, 0.2, 0.7]]])  # [1 layer, 3, 3], causal rows
    measures = np.broadcast_to(attribution[:, None], (1, len(MEASURES), 3, 3))
    acc = AggregationAccumulator(1, causal=True)
    acc.add_maps(measures, attribution)
    result = acc.result()
    # H[k] = mean of M[i, i+k] over the rows that have key i+k: k=-2: 0.1; -1: (0.4+0.2)/2; 0: (1+0.6+0.7)/3
    h = np.array([0.1, 0.3, 2.3 / 3])
    np.testing.assert_array_equal(result.offsets, [-2, -1, 0])
    for name in (*MEASURES, "attribution"):
        np.testing.assert_allclose(result.histograms[name][0], h)
        assert result.center_of_mass[name][0] == pytest.approx((h * np.arange(-2, 1)).sum() / h.sum())
    data = json.loads(json.dumps(result.to_json()))
    assert data["kind"] == "decoder" and data["histograms"]["offsets"] == [-2, -1, 0]
    assert AggregationResult.from_json(data).causal
    assert "kind" not in AggregationAccumulator(1).result().to_json()  # an encoder's JSON as before
    with pytest.raises(ValueError):
        acc.merge(AggregationAccumulator(1))


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


def test_hta_cli_prints_output(tiny_model_dir, tiny_model):
    data = cli_json("hta", "--text", "The cat sat.", "--model", str(tiny_model_dir), "--json")
    expected = hidden_token_attribution(
        tiny_model, encode(tiny_model, "The cat sat."), mode="exact", with_output=True
    ).output
    np.testing.assert_allclose(np.array(data["output"]), expected, atol=1e-6)


# ---------- slow tests


def reverse_mode_outputs(lm, enc, layers: list[int] | None = None) -> np.ndarray:
    """G_out [layers, j, i] with torch.autograd: the Jacobian of hidden_states[l+1] with respect to e0 (given layers)."""
    encoder = lm.encoder
    batch = model_inputs(lm, [enc])
    seen = []
    hook = encoder.embeddings.register_forward_hook(lambda _m, _a, out: seen.append(out.detach()))
    try:
        with torch.no_grad():
            encoder(**batch)
    finally:
        hook.remove()
    e0 = seen[0]

    def layer_outputs(x: torch.Tensor) -> torch.Tensor:
        hook = encoder.embeddings.register_forward_hook(lambda _m, _a, _o: x)
        try:
            hidden = encoder(**batch, output_hidden_states=True).hidden_states
        finally:
            hook.remove()
        return torch.stack(hidden[1:])[layers or slice(None), 0]  # [layers, n, hidden]

    jac = torch.autograd.functional.jacobian(layer_outputs, e0, vectorize=True)  # [layers, n, hidden, 1, n, hidden]
    norms = jac[:, :, :, 0].double().square().sum(dim=(2, 4)).sqrt()  # [layers, j, i]
    return (norms / norms.sum(-1, keepdim=True)).numpy()


@pytest.mark.slow
def test_output_equals_reverse_mode(tiny_model):
    enc = encode(tiny_model, "The cat sat on the mat.", "It was warm.")
    exact = hidden_token_attribution(tiny_model, enc, mode="exact", chunk_size=37, with_output=True)
    reference = reverse_mode_outputs(tiny_model, enc)
    assert exact.output.shape == (tiny_model.facts.n_layers, enc.n, enc.n)
    np.testing.assert_allclose(exact.output, reference, atol=1e-5)
    plain = hidden_token_attribution(tiny_model, enc, mode="exact", linearise=False, with_output=True)
    np.testing.assert_allclose(plain.output, reference, atol=1e-5)


@pytest.mark.slow
def test_output_equals_reverse_mode_on_minilm(minilm):
    enc = encode(minilm, "Birds sing.")
    layers = [0, 5]  # two layers keep the reverse pass short
    exact = hidden_token_attribution(minilm, enc, mode="exact", with_output=True).output[layers]
    np.testing.assert_allclose(exact, reverse_mode_outputs(minilm, enc, layers), atol=1e-5)


@pytest.mark.slow
def test_halves_merge_and_batches_do_not_matter(tiny_model):
    inputs = read_corpus(str(CLASSROOM_SINGLE), 7)
    options = AggregationOptions(mode="estimate", probes=4)
    whole = accumulate_aggregation(tiny_model, inputs, options, batch_size=7)
    single = accumulate_aggregation(tiny_model, inputs, options, batch_size=1)
    merged = accumulate_aggregation(tiny_model, inputs[:3], options, batch_size=7).merge(
        accumulate_aggregation(tiny_model, inputs[3:], options, batch_size=7)
    )
    a, b, c = whole.result(), single.result(), merged.result()
    assert a.n_inputs == b.n_inputs == c.n_inputs == 7
    for m in MEASURES:
        np.testing.assert_allclose(a.pearson[m], b.pearson[m], atol=1e-4)
        np.testing.assert_allclose(a.spearman[m], c.spearman[m], rtol=1e-10)
        np.testing.assert_allclose(a.center_of_mass[m], b.center_of_mass[m], atol=1e-4)
    np.testing.assert_allclose(a.center_of_mass["attribution"], c.center_of_mass["attribution"], rtol=1e-10)
    # maps of one padded batch and of another padding differ by float32 rounding (tests/support/tolerances.py)
    np.testing.assert_allclose(
        a.histograms["residual_ln_rollout"], c.histograms["residual_ln_rollout"], rtol=FORWARD_RTOL, atol=1e-12
    )


@pytest.mark.slow
def test_aggregation_cli_and_result_file(tiny_model_dir, tiny_model, tmp_path):
    out = tmp_path / "aggregation.json"
    args = ["aggregation", "--corpus", str(CLASSROOM_SINGLE), "--limit", "3", "--probes", "4"]
    data = cli_json(*args, "--model", str(tiny_model_dir), "--out", str(out), "--json")
    expected = accumulate_aggregation(
        tiny_model, read_corpus(str(CLASSROOM_SINGLE), 3), AggregationOptions(probes=4)
    ).result()
    assert data["n_inputs"] == 3 and data["measures"] == list(MEASURES)
    assert set(data["center_of_mass"]) == {*MEASURES, "attribution"}
    for m in MEASURES:
        assert len(data["pearson"][m]) == tiny_model.facts.n_layers
        np.testing.assert_allclose(data["spearman"][m], expected.spearman[m], rtol=1e-6)
    loaded = AGGREGATION.from_record(read_result_file(out.read_bytes(), "aggregation"))
    np.testing.assert_allclose(loaded.pearson["residual_ln"], expected.pearson["residual_ln"], rtol=1e-6)
