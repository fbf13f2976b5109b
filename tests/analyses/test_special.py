"""Special-token statistics (METHODS §1-3, §5): hand-worked arrays, merging, the CLI against transformers (the page:
app/test_special_page.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from attnlib.core.batches import accumulate
from attnlib.core.corpus import CorpusInput, read_text_corpus
from attnlib.core.model import bundled_model_path
from attnlib.core.runner import encode
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV
from attnlib.stats import special as special_stats
from attnlib.stats.gradient import (
    GradientImportanceSums,
    GradientImportanceUnavailable,
    _masked_batch,
    batch_attention_gradients,
    gradient_importance,
    masked_positions,
    unavailable_reason,
)
from attnlib.stats.special import (
    STAT_KEYS,
    InputRows,
    SpecialTokenStats,
    class_masks,
    class_row_mass,
    class_share,
    heads_above,
    input_layer_statistics,
    input_statistics,
    offset_share,
    punct_mask,
    row_entropy,
    rows_to_mask,
)
from support.cli import cli_json, run_cli
from support.results import fake_result, random_input
from support.tolerances import EPS32

# One head over [CLS] hi . [SEP]; every row sums to 1.
A = np.array(
    [
        [0.50, 0.25, 0.25, 0.00],
        [0.10, 0.20, 0.30, 0.40],
        [0.00, 0.00, 0.00, 1.00],
        [0.25, 0.25, 0.25, 0.25],
    ],
    dtype=np.float32,
)
TOKENS = ["[CLS]", "hi", ".", "[SEP]"]
CLS = np.array([1, 0, 0, 0], bool)
SEP = np.array([0, 0, 0, 1], bool)


def smoothed_entropy(row: list[float]) -> float:
    """Entropy of one row by the METHODS §3 formula, element by element."""
    n = len(row)
    return -sum((0.9999 * a + 0.0001 / n) * math.log(0.9999 * a + 0.0001 / n) for a in row)


# --- statistics on hand-worked arrays -------------------------------------------------------------------------


def test_class_shares_by_hand():
    assert class_share(A, CLS) == pytest.approx((0.50 + 0.10 + 0.00 + 0.25) / 4)  # 0.2125
    assert class_share(A, SEP) == pytest.approx((0.00 + 0.40 + 1.00 + 0.25) / 4)  # 0.4125
    assert class_share(A, [0, 0, 1, 0]) == pytest.approx((0.25 + 0.30 + 0.00 + 0.25) / 4)  # 0.2
    assert class_share(A, [0, 1, 0, 0]) == pytest.approx((0.25 + 0.20 + 0.00 + 0.25) / 4)  # 0.175


def test_offsets_by_hand():
    assert offset_share(A, -1) == pytest.approx((0.10 + 0.00 + 0.25) / 4)  # A[1,0] + A[2,1] + A[3,2]
    assert offset_share(A, 0) == pytest.approx((0.50 + 0.20 + 0.00 + 0.25) / 4)
    assert offset_share(A, 1) == pytest.approx((0.25 + 0.30 + 1.00) / 4)  # A[0,1] + A[1,2] + A[2,3]


def test_sep_rows_by_hand():
    assert rows_to_mask(A, SEP, SEP) == pytest.approx(0.25)
    assert rows_to_mask(A, ~SEP, SEP) == pytest.approx((0.00 + 0.40 + 1.00) / 3)
    assert np.isnan(rows_to_mask(A, np.zeros(4, bool), SEP))


def test_entropy_by_hand():
    h = row_entropy(A)
    for i in range(4):
        assert h[i] == pytest.approx(smoothed_entropy(A[i].tolist()), abs=1e-6)  # float32
    assert h[3] == pytest.approx(math.log(4), rel=1e-6)  # a uniform row
    # a one-hot row: three entries of 0.0001/4 and one of 0.9999 + 0.0001/4
    tiny, big = 0.000025, 0.999925
    assert h[2] == pytest.approx(-3 * tiny * math.log(tiny) - big * math.log(big), abs=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_entropy_in_pieces_of_rows_is_the_definition(monkeypatch, causal):
    # row_entropy works a few rows at a time: pieces of 1, 2 and 3 rows of [2, 3, 7, n] give each row's entropy as
    # the float64 sum of METHODS §3's terms (§18's for causal rows: keys j <= i, smoothed with 0.0001 / (i + 1))
    n = 40
    rng = np.random.default_rng(1)
    attn = rng.random((2, 3, 7, n)).astype(np.float32) ** 4
    first_row = 20
    i = first_row + np.arange(7)
    if causal:
        attn[..., np.arange(n)[None, :] > i[:, None]] = 0
    attn /= attn.sum(-1, keepdims=True)
    a = attn.astype(np.float64)
    keys = (i + 1)[:, None] if causal else n
    p = 0.9999 * a + 0.0001 / keys
    terms = np.where(np.arange(n)[None, :] > i[:, None], 0, p * np.log(p)) if causal else p * np.log(p)
    expected = -terms.sum(-1)
    # float32: each of n terms off by about 2 eps |p ln p|, the sum by n eps: atol n x 3 eps x max |ln p|
    atol = n * 3 * np.finfo(np.float32).eps * abs(math.log(0.0001 / n))
    for rows in (1, 2, 3):
        monkeypatch.setattr(special_stats, "ENTROPY_CHUNK", rows * 6 * n)
        got = row_entropy(attn, causal, first_row)
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("gathered", [0, 1000])
def test_class_masses_are_the_product_with_the_class_indicators(monkeypatch, gathered):
    # each class gathered and summed (gathered=1000) or multiplied by its indicator (0): both are attn @ classes
    n = 50
    rng = np.random.default_rng(2)
    attn = rng.random((2, 3, 5, n)).astype(np.float32)
    attn /= attn.sum(-1, keepdims=True)
    classes = class_masks(np.eye(n)[0], np.eye(n)[n - 1], rng.random(n) < 0.4)
    monkeypatch.setattr(special_stats, "GATHERED_KEYS", gathered)
    got = class_row_mass(attn, classes)
    expected = attn.astype(np.float64) @ classes
    # float32 sums of at most n weights <= 1 (rows summing to 1), "other" a difference of such sums: (n + 3) eps
    np.testing.assert_allclose(got, expected, rtol=0, atol=(n + 3) * np.finfo(np.float32).eps)
    assert expected[..., 2].min() > 0.2  # the punctuation class has many keys


@pytest.mark.parametrize("causal", [False, True])
def test_a_block_of_the_attended_keys_gives_the_whole_rows_statistics(causal):
    # rows 3..6 of a 9-token input attend keys 2..6 only (a local window; causal: keys <= the row): handed over as
    # that band, with the masked keys' smoothing added in closed form, the statistics are the whole rows'
    n, first_row, keys = 9, 3, slice(2, 7)
    rng = np.random.default_rng(0)
    band = rng.random((1, 4, keys.stop - keys.start)).astype(np.float32)
    i = first_row + np.arange(4)
    if causal:
        band[0, np.arange(keys.start, keys.stop)[None, :] > i[:, None]] = 0
    band /= band.sum(-1, keepdims=True)
    whole = np.zeros((1, 4, n), np.float32)
    whole[..., keys] = band
    classes = class_masks(np.eye(n)[0], np.eye(n)[n - 1], np.eye(n)[4])
    got, expected = (InputRows.empty(1, 1, classes, causal) for _ in range(2))
    got.add_block(band, first_row, 0, first_key=keys.start)
    expected.add_block(whole, first_row, 0)
    # float32 sums of at most n terms, each rounded, of magnitude at most ln n: n eps ln n
    atol = n * np.finfo(np.float32).eps * math.log(n)
    np.testing.assert_allclose(got.entropy, expected.entropy, rtol=0, atol=atol)
    np.testing.assert_allclose(got.mass, expected.mass, rtol=0, atol=atol)
    np.testing.assert_array_equal(got.offsets, expected.offsets)
    assert (expected.entropy[0, 0, first_row : first_row + 4] > 0).all()


def test_input_statistics_by_hand():
    stats = input_statistics(A[None, None], CLS, SEP, np.array([0, 0, 1, 0], bool))
    expected = {
        "cls": 0.2125,
        "sep": 0.4125,
        "punct": 0.2,
        "other": 0.175,
        "prev": 0.35 / 4,
        "self": 0.95 / 4,
        "next": 1.55 / 4,
        "entropy": np.mean([smoothed_entropy(r) for r in A.tolist()]),
        "cls_entropy": smoothed_entropy(A[0].tolist()),
        "sep_to_sep": 0.25,
        "rest_to_sep": 1.4 / 3,
    }
    assert set(stats) == set(STAT_KEYS)
    for key, value in expected.items():
        assert stats[key].shape == (1, 1)
        assert stats[key][0, 0] == pytest.approx(value, rel=1e-5), key


def test_input_layer_statistics_are_the_means_over_heads_by_hand():
    """Layer 1 holds A and a head whose every row attends to [SEP], layer 2 that head twice; the punctuation is found
    in the tokens ('.'), [CLS] and [SEP] by name."""
    to_sep = np.zeros_like(A)
    to_sep[:, 3] = 1
    maps = np.stack([np.stack([A, to_sep]), np.stack([to_sep, to_sep])])
    found = input_layer_statistics(maps, fake_result(maps, TOKENS))
    # A's values are test_input_statistics_by_hand's; to_sep's: all on [SEP], row 3 on itself, row 2 on its next
    expected = {
        "cls": [0.2125 / 2, 0.0],
        "sep": [(0.4125 + 1) / 2, 1.0],
        "punct": [0.2 / 2, 0.0],
        "prev": [0.35 / 4 / 2, 0.0],
        "self": [(0.95 / 4 + 1 / 4) / 2, 1 / 4],
        "next": [(1.55 / 4 + 1 / 4) / 2, 1 / 4],
        "sep_to_sep": [(0.25 + 1) / 2, 1.0],
    }
    assert set(found) == set(STAT_KEYS)
    for key, values in expected.items():
        assert found[key].shape == (2,)
        # float32 entries (each within eps/2), means of 4 rows, then of 2 heads: within 8 eps of the exact share
        np.testing.assert_allclose(found[key], values, rtol=0, atol=8 * EPS32, err_msg=key)


def test_pair_with_two_seps_by_hand():
    # [CLS] x [SEP] y [SEP]
    a = np.array(
        [
            [0.2, 0.2, 0.2, 0.2, 0.2],
            [0.0, 0.5, 0.5, 0.0, 0.0],
            [0.0, 0.0, 0.6, 0.0, 0.4],
            [0.1, 0.1, 0.1, 0.1, 0.6],
            [0.0, 0.0, 0.3, 0.0, 0.7],
        ],
        dtype=np.float32,
    )
    cls = np.array([1, 0, 0, 0, 0], bool)
    sep = np.array([0, 0, 1, 0, 1], bool)
    stats = input_statistics(a[None, None], cls, sep, np.zeros(5, bool))
    assert stats["sep_to_sep"][0, 0] == pytest.approx((1.0 + 1.0) / 2)  # both SEP rows send everything to SEPs
    assert stats["rest_to_sep"][0, 0] == pytest.approx((0.4 + 0.5 + 0.7) / 3)
    assert stats["sep"][0, 0] == pytest.approx((0.4 + 0.5 + 1.0 + 0.7 + 1.0) / 5)
    assert stats["punct"][0, 0] == 0


def test_punct_mask_strips_wordpiece_markers():
    tokens = ["[CLS]", "hello", ",", "##.", "Ġ,", "▁.", "!", "...", "Ġ", "##", "[SEP]"]
    special = np.array([1] + [0] * 9 + [1], bool)
    assert punct_mask(tokens, special).tolist() == [0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert punct_mask(tokens, special, all_punct=True).tolist() == [0, 0, 1, 1, 1, 1, 1, 1, 0, 1, 0]
    assert not punct_mask(["[CLS]"], np.array([True]), all_punct=True)[0]  # special tokens are never punctuation


def test_heads_above():
    values = np.array([[0.2, 0.7], [0.9, 0.5]])
    assert heads_above(values, 0.5) == [(1, 0, 0.9), (0, 1, 0.7)]


# --- the accumulator --------------------------------------------------------------------------------------------


def test_accumulator_is_the_unweighted_mean_over_inputs():
    rng = np.random.default_rng(1)
    inputs = [random_input(rng) for _ in range(5)]
    acc = SpecialTokenStats(2, 3)
    for r in inputs:
        acc.add(r, CorpusInput("x"))
    result = acc.result()
    per_input = [
        input_statistics(r.attentions, r.cls_mask, r.sep_mask, punct_mask(r.tokens, r.special_mask)) for r in inputs
    ]
    assert result.n_inputs == 5
    for key in STAT_KEYS:
        np.testing.assert_allclose(result.heads[key], np.mean([s[key] for s in per_input], axis=0), rtol=1e-6)
        np.testing.assert_allclose(result.layers[key], result.heads[key].mean(axis=1), rtol=1e-12)
    assert result.uniform_entropy == pytest.approx(np.mean([math.log(r.n) for r in inputs]))
    shares = sum(result.heads[k] for k in ("cls", "sep", "punct", "other"))
    np.testing.assert_allclose(shares, 1.0, rtol=1e-5)


def test_sep_to_sep_counts_only_inputs_with_sep_rows():
    rng = np.random.default_rng(2)
    with_sep = random_input(rng)
    no_sep = fake_result(A[None, None], ["[CLS]", "a", "b", "c"], CLS, np.zeros(4, bool))
    acc = SpecialTokenStats(1, 1)
    first = fake_result(with_sep.attentions[:1, :1], with_sep.tokens, with_sep.cls_mask, with_sep.sep_mask)
    acc.add(first)
    acc.add(no_sep)
    alone = SpecialTokenStats(1, 1)
    alone.add(first)
    assert acc.result().heads["sep_to_sep"][0, 0] == pytest.approx(alone.result().heads["sep_to_sep"][0, 0])
    assert acc.result().heads["rest_to_sep"][0, 0] == pytest.approx(
        (alone.result().heads["rest_to_sep"][0, 0] + 0.0) / 2
    )


def test_merging_two_halves_equals_the_whole():
    rng = np.random.default_rng(3)
    inputs = [random_input(rng) for _ in range(9)]
    whole, first, second = (SpecialTokenStats(2, 3) for _ in range(3))
    for i, r in enumerate(inputs):
        whole.add(r)
        (first if i < 4 else second).add(r)
    before = first.result().heads["cls"].copy()
    merged = first.merge(second).result()
    np.testing.assert_array_equal(first.result().heads["cls"], before)  # operands unchanged
    expected = whole.result()
    assert merged.n_inputs == expected.n_inputs == 9
    assert merged.uniform_entropy == pytest.approx(expected.uniform_entropy)
    for key in STAT_KEYS:
        np.testing.assert_allclose(merged.heads[key], expected.heads[key], rtol=1e-12)
    with pytest.raises(ValueError):
        first.merge(SpecialTokenStats(2, 3, all_punct=True))


def test_padding_never_enters(minilm):
    inputs = read_text_corpus(CLASSROOM_SINGLE)[:6] + [CorpusInput("Short.")]
    batched, single = SpecialTokenStats(6, 12), SpecialTokenStats(6, 12)
    accumulate(minilm, inputs, [batched], batch_size=7)
    accumulate(minilm, inputs, [single], batch_size=1)
    for key in STAT_KEYS:
        np.testing.assert_allclose(batched.result().heads[key], single.result().heads[key], atol=2e-5)


# --- the command line against transformers' own attentions -------------------------------------------------------


def direct_statistics(pairs: list[tuple[str, str | None]]) -> dict[str, np.ndarray]:
    """Every statistic from transformers' own attentions, one input at a time, written out with torch ops."""
    from transformers import AutoModel, AutoTokenizer

    path = str(bundled_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    per_input = []
    for a, b in pairs:
        enc = tok(a, b, return_tensors="pt")
        with torch.no_grad():
            attn = torch.stack(model(**enc, output_attentions=True).attentions, dim=1)[0].double()  # [L, H, n, n]
        ids = enc["input_ids"][0].tolist()
        n = len(ids)
        tokens = tok.convert_ids_to_tokens(ids)
        sep = [i for i, t in enumerate(ids) if t == tok.sep_token_id]
        rest = [i for i in range(n) if i not in sep]
        punct = [i for i, t in enumerate(tokens) if t in (".", ",")]
        other = [i for i in range(n) if i not in sep and i != 0 and i not in punct]
        p = 0.9999 * attn + 0.0001 / n
        row_h = -(p * p.log()).sum(-1)
        per_input.append(
            {
                "cls": attn[..., :, 0].mean(-1),
                "sep": attn[..., :, sep].sum(-1).mean(-1),
                "punct": attn[..., :, punct].sum(-1).mean(-1),
                "other": attn[..., :, other].sum(-1).mean(-1),
                "prev": sum(attn[..., i, i - 1] for i in range(1, n)) / n,
                "self": sum(attn[..., i, i] for i in range(n)) / n,
                "next": sum(attn[..., i, i + 1] for i in range(n - 1)) / n,
                "entropy": row_h.mean(-1),
                "cls_entropy": row_h[..., 0],
                "sep_to_sep": attn[..., sep, :][..., sep].sum(-1).mean(-1),
                "rest_to_sep": attn[..., rest, :][..., sep].sum(-1).mean(-1),
                "log_n": torch.tensor(math.log(n), dtype=torch.float64),
            }
        )
    return {key: torch.stack([s[key] for s in per_input]).mean(0).numpy() for key in per_input[0]}


@pytest.mark.parametrize("source", [CLASSROOM_SINGLE, CLASSROOM_PAIRS], ids=["single", "pairs"])
def test_cli_matches_transformers_attentions(source):
    out = cli_json("special", "--corpus", str(source), "--limit", "3", "--json")
    pairs = [(item.text_a, item.text_b) for item in read_text_corpus(source)[:3]]
    assert any("," in a + (b or "") or "." in a for a, b in pairs)
    direct = direct_statistics(pairs)
    assert out["n_inputs"] == 3
    assert out["uniform_entropy"] == pytest.approx(float(direct["log_n"]), rel=1e-9)
    assert len(out["layers"]) == 6
    for key in STAT_KEYS:
        heads = np.array(out["heads"][key])
        assert heads.shape == (6, 12)
        np.testing.assert_allclose(heads, direct[key], atol=1e-5, err_msg=key)
        np.testing.assert_allclose([layer[key] for layer in out["layers"]], direct[key].mean(axis=1), atol=1e-5)
    assert set(out["layers"][0]) == set(STAT_KEYS)


def test_cli_reads_conllu_and_draws_the_head_map():
    out = cli_json("special", "--corpus", str(EWT_DEV), "--limit", "4", "--all-punct", "--head-map", "--json")
    assert out["n_inputs"] == 4 and out["punctuation"] == "all"
    assert len(out["head_map"]["x"]) == 72 and len(out["head_map"]["behaviour"]) == 72
    d = np.array(out["head_map"]["js_divergence"])
    np.testing.assert_allclose(d, d.T)
    assert (np.diag(d) == 0).all()


def test_cli_user_errors_exit_2(tmp_path):
    ran = run_cli("special", "--corpus", str(tmp_path / "missing.txt"), "--json")
    assert ran.code == 2, ran.err
    assert "no such file" in ran.err


# --- gradient importance (METHODS §5) ----------------------------------------------------------------------------


def test_gradient_importance_needs_an_mlm_head(minilm):
    assert minilm.mlm is None
    assert "masked-language-model head" in unavailable_reason(minilm)
    with pytest.raises(GradientImportanceUnavailable, match="masked-language-model head"):
        gradient_importance(minilm, [CorpusInput("A sentence.")])


@pytest.mark.parametrize("kind, says", [("gpt2", "is a decoder"), ("t5", "is an encoder-decoder")])
def test_gradient_importance_refuses_decoders_and_encoder_decoders_as_what_they_are(tmp_path, kind, says):
    from attnlib.core.model import load_model
    from support.models import save_tiny

    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    reason = unavailable_reason(lm)
    assert says in reason and "masked-language-model head" in reason
    assert "Choose an encoder with its masked-LM head" in reason


def test_masked_positions_are_fixed_and_skip_special_tokens():
    special = np.array([1] + [0] * 20 + [1], bool)
    pos = masked_positions(special, seed=0, index=3)
    assert len(pos) == 3  # round(0.15 * 20)
    assert not special[pos].any()
    np.testing.assert_array_equal(pos, masked_positions(special, seed=0, index=3))
    assert len(masked_positions(np.array([1, 0, 1], bool), 0, 0)) == 1  # at least one


def test_gradient_sums_merge():
    rng = np.random.default_rng(4)
    grads = [(rng.normal(size=(2, 3, n, n)), np.arange(n) == n - 1) for n in (4, 6, 5)]
    whole, first, second = (GradientImportanceSums(2, 3) for _ in range(3))
    for i, (g, sep) in enumerate(grads):
        whole.add_input(g, sep)
        (first if i == 0 else second).add_input(g, sep)
    merged = first.merge(second).result()
    np.testing.assert_allclose(merged.sep, whole.result().sep)
    g, sep = grads[0]
    np.testing.assert_allclose(first.result().sep[1, 2], np.abs(g[1, 2][:, sep]).mean())
    np.testing.assert_allclose(first.result().all[1, 2], np.abs(g[1, 2]).mean())


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)  # the perturbation hook is BERT's attention
def test_attention_gradient_matches_finite_differences(tiny_model_dir, tiny_model):
    """dLoss/dA from autograd against a central difference made by perturbing one layer's attention."""
    assert tiny_model.facts.model_type == "bert"
    import transformers.models.bert.modeling_bert as modeling

    mlm = copy.deepcopy(tiny_model.mlm).double()
    lm = dataclasses.replace(tiny_model, mlm=mlm, encoder=mlm.base_model)
    encoded = [encode(lm, "The cat sat on the mat.")]
    grad = batch_attention_gradients(lm, encoded)[0]  # [layers, heads, n, n]
    layer = 1
    target = mlm.bert.encoder.layer[layer].attention.self
    direction = torch.tensor(np.random.default_rng(5).normal(size=grad.shape[1:]))[None].double()
    original = modeling.eager_attention_forward
    shift = {"eps": 0.0}

    def perturbed(module, query, key, value, attention_mask, **kwargs):
        _, weights = original(module, query, key, value, attention_mask, **kwargs)
        if module is target:
            weights = weights + shift["eps"] * direction
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights

    def loss(eps: float) -> float:
        shift["eps"] = eps
        batch, labels = _masked_batch(lm, encoded, [0], 0, 0.15)
        with torch.no_grad():
            logits = mlm(**batch).logits
        return float(torch.nn.functional.cross_entropy(logits[0], labels[0], ignore_index=-100))

    modeling.eager_attention_forward = perturbed
    try:
        eps = 1e-4
        numeric = (loss(eps) - loss(-eps)) / (2 * eps)
    finally:
        modeling.eager_attention_forward = original
    analytic = float((grad[layer] * direction[0].numpy()).sum())
    assert numeric == pytest.approx(analytic, rel=1e-3, abs=1e-6)


# --- the page ----------------------------------------------------------------------------------------------------


# --- weights vs norms, shipped results, comparison (issues 14, 15, 17) -------------------------------------------


def test_largest_weight_norm_gap_by_hand():
    from attnlib.analyses.special import largest_weight_norm_gap

    weights = {"cls": np.array([0.1, 0.6, 0.3]), "sep": np.array([0.2, 0.1, 0.7])}
    norms = {"cls": np.array([0.1, 0.2, 0.3]), "sep": np.array([0.1, np.nan, 0.2])}
    gap = largest_weight_norm_gap(weights, norms)  # |gaps|: cls 0, 0.4, 0; sep 0.1, NaN, 0.5
    assert (gap.key, gap.layer) == ("sep", 2)
    assert (gap.weight_share, gap.norm_share) == pytest.approx((0.7, 0.2))
    assert largest_weight_norm_gap(weights, norms, keys=["cls"]).layer == 1
    nothing = {"cls": np.array([np.nan]), "sep": np.array([np.nan])}
    assert largest_weight_norm_gap(nothing, nothing) is None


def test_weight_norm_gap_verdict_by_hand():
    from attnlib.analyses.special import WeightNormGap

    def verdict(weight_share: float, norm_share: float) -> str:
        return WeightNormGap("cls", 0, weight_share, norm_share).verdict

    assert verdict(0.60, 0.17) == "smaller"  # 0.17 < 0.60 / 2
    assert verdict(0.60, 0.31) == "similar"  # within a factor of 2 either way
    assert verdict(0.10, 0.19) == "similar"
    assert verdict(0.10, 0.21) == "larger"  # 0.21 > 0.10 * 2


def test_special_tokens_from_json_round_trip(minilm):
    from attnlib.analyses.registry import analyse
    from attnlib.analyses.special import SpecialTokens
    from attnlib.results.files import json_ready

    inputs = read_text_corpus(CLASSROOM_SINGLE)[:3]
    run = analyse("special", minilm, corpus=inputs, head_map=True, norms=True).result
    back = SpecialTokens.from_json(json.loads(json.dumps(json_ready(run.to_json()))))
    assert back.head_map is not None and back.norms is not None
    for key in STAT_KEYS:
        np.testing.assert_allclose(back.special.heads[key], run.special.heads[key], rtol=1e-6)
    for key, values in run.norms.heads.items():
        np.testing.assert_allclose(back.norms.heads[key], values, rtol=1e-6)
    assert SpecialTokens.from_json(run.special.to_json()).norms is None


# ---------- slow tests


@pytest.mark.slow
def test_gradient_importance_does_not_depend_on_batching(tiny_model):
    inputs = read_text_corpus(CLASSROOM_PAIRS)[:3] + read_text_corpus(CLASSROOM_SINGLE)[:2]
    one = gradient_importance(tiny_model, inputs, batch_size=1)
    five = gradient_importance(tiny_model, inputs, batch_size=5)
    assert one.n_inputs == 5 and one.sep.shape == (2, 4)
    assert np.isfinite(one.sep).all() and (one.all > 0).all()
    np.testing.assert_allclose(one.sep, five.sep, rtol=1e-4, atol=1e-9)
    np.testing.assert_allclose(one.all, five.all, rtol=1e-4, atol=1e-9)
