"""Value-weighted norms, N, N_ResLN and rollouts (METHODS §11-13): hand-worked cases, the model's own weights, CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlib.core.batches import accumulate
from attnlib.core.corpus import read_corpus
from attnlib.core.families import layout
from attnlib.core.hooks import NORMS
from attnlib.core.runner import encode, run, run_encoded
from attnlib.results.files import read_result_file
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.stats import norms
from attnlib.stats.norms import special_norms_from_json
from attnlib.stats.special import class_masks
from support.cli import cli_json, run_cli
from support.reference import _reference_vectors
from support.tolerances import FORWARD_RTOL

SENTENCES = [
    "The cat sat on the mat.",
    "A dog barked.",
    "Colourless green ideas sleep furiously, they say.",
    "Yes.",
    "She gave him the book that he had asked for yesterday.",
    "Rain, rain, go away.",
    "Why?",
]


def _hand_layer():
    """One head, two tokens, hidden size 2, W_O = I, b_O = 0, gamma = 1, beta = 0, eps = 0."""
    attn = np.array([[[1.0, 0.0], [0.5, 0.5]]])  # [heads, n, n]
    vectors = np.array([[[2.0, 0.0], [0.0, 2.0]]])  # f(x_0), f(x_1): [heads, n, hidden]
    x = np.array([[1.0, 1.0], [0.0, 2.0]])
    return attn, vectors, x


def test_hand_worked_layer():
    attn, vectors, x = _hand_layer()
    zero, one = np.zeros(2), np.ones(2)
    # Row 0: z_00 = [2,0] + [1,1] = [3,1], z_01 = 0; u_0 = [3,1], s_0 = 1, g(z_00) = [1,-1].
    # Row 1: z_10 = [1,0], z_11 = [0,1] + [0,2] = [0,3]; u_1 = [1,3], s_1 = 1, g = [0.5,-0.5] and [-1.5,1.5].
    expected_res = np.array([[math.sqrt(2), 0.0], [math.sqrt(0.5), 1.5 * math.sqrt(2)]])
    got = norms.residual_ln_map(attn[None], vectors[None], x[None], zero[None], one[None], np.zeros(1))
    np.testing.assert_allclose(got[0], expected_res, rtol=1e-6)
    np.testing.assert_allclose(norms.layer_norm_map(attn[None], vectors[None])[0], [[2, 0], [1, 1]], rtol=1e-6)
    value_norm = norms.value_norms(vectors)
    np.testing.assert_allclose(value_norm, [[2, 2]])
    np.testing.assert_allclose(norms.weighted_norms(attn, value_norm), [[[2, 0], [1, 1]]])
    parts = norms.layer_norm_parts(attn, vectors, x, zero, one, zero, 0.0)
    np.testing.assert_allclose(parts.scale, [1, 1])
    np.testing.assert_allclose(parts.parts[1], [[0.5, -0.5], [-1.5, 1.5]])
    np.testing.assert_allclose(parts.output(), [[1, -1], [-1, 1]])  # (u - mean u) / s
    np.testing.assert_allclose(np.linalg.norm(parts.parts, axis=-1), expected_res)


def test_hand_worked_rollout():
    attn = np.array([[[[1.0, 0.0], [0.5, 0.5]]], [[[0.0, 1.0], [1.0, 0.0]]]])  # [layers, heads, n, n]
    # R_0 = [[1, 0], [0.25, 0.75]], R_1 = [[0.5, 0.5], [0.5, 0.5]], P_1 = R_1 R_0.
    rolled = norms.attention_rollout(attn)
    np.testing.assert_allclose(rolled[0], [[1, 0], [0.25, 0.75]])
    np.testing.assert_allclose(rolled[1], [[0.625, 0.375], [0.625, 0.375]])
    np.testing.assert_allclose(norms.row_normalised(np.array([[1.0, 3.0], [0.0, 0.0]])), [[0.25, 0.75], [0, 0]])
    res = np.array([[[1.0, 3.0], [2.0, 2.0]], [[1.0, 1.0], [0.0, 4.0]]])
    p = norms.residual_ln_rollout(res)
    np.testing.assert_allclose(p[1], np.array([[0.5, 0.5], [0, 1]]) @ np.array([[0.25, 0.75], [0.5, 0.5]]))


def test_norms_from_the_models_weights(tiny_model):
    """Layer inputs are hidden_states; f_h(x_j) from the weight matrices gives value_norm, N and the decomposition."""
    from transformers.modeling_utils import PreTrainedModel

    lm = tiny_model
    assert isinstance(lm.encoder, PreTrainedModel)
    captured = []
    hooks = [
        s.norm.register_forward_hook(lambda _m, _i, o: captured.append(o[0].detach())) for s in layout(lm.encoder).sites
    ]
    try:
        r = run(lm, "The cat sat on the mat.", "It purred.", capture_norms=True)
    finally:
        for hook in hooks:
            hook.remove()
    enc = encode(lm, "The cat sat on the mat.", "It purred.")
    batch = {"input_ids": torch.tensor([enc.input_ids])}
    if enc.token_type_ids is not None:
        batch["token_type_ids"] = torch.tensor([enc.token_type_ids])
    with torch.no_grad():
        hidden = lm.encoder(**batch, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(r.layer_inputs, torch.stack(hidden[:-1])[:, 0].numpy(), atol=1e-5)
    vectors = _reference_vectors(lm, r)
    maps = norms.norm_maps(r)
    np.testing.assert_allclose(maps.value_norm, np.linalg.norm(vectors, axis=-1), rtol=1e-4, atol=1e-6)
    explicit = np.linalg.norm(np.einsum("lhij,lhjd->lijd", r.attentions, vectors), axis=-1)
    np.testing.assert_allclose(maps.layer_norm, explicit, rtol=1e-4, atol=1e-6)
    w = r.norm_weights
    from_values = norms.value_norms_from_values(r.values, w.out_gram)
    np.testing.assert_allclose(from_values, np.linalg.norm(vectors, axis=-1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r.value_norm, np.linalg.norm(vectors, axis=-1), rtol=1e-4, atol=1e-5)
    for l in range(lm.facts.n_layers):
        parts = norms.layer_norm_parts(
            r.attentions[l], vectors[l], r.layer_inputs[l], w.out_bias[l], w.gamma[l], w.beta[l], float(w.eps[l])
        )
        np.testing.assert_allclose(parts.output(), captured[l].numpy(), atol=1e-5)
        np.testing.assert_allclose(maps.residual_ln[l], np.linalg.norm(parts.parts, axis=-1), rtol=1e-4, atol=1e-6)


def test_captured_block_scale_equals_the_computed_one(tiny_model):
    """s_i taken from the LayerNorm's own input equals s_i rebuilt from attentions, f_h(x_j), x and b_O."""
    for r in run_encoded(tiny_model, [encode(tiny_model, s) for s in SENTENCES[:3]], NORMS):
        w = r.norm_weights
        vectors = norms.head_vectors(r.values, w.out_weight)
        rebuilt = norms.block_scale(r.attentions, vectors, r.layer_inputs, w.out_bias, w.eps)
        assert r.block_scale.shape == (tiny_model.facts.n_layers, r.n)
        np.testing.assert_allclose(r.block_scale, rebuilt, rtol=1e-5)
        computed = norms.residual_ln_map(r.attentions, vectors, r.layer_inputs, w.out_bias, w.gamma, w.eps)
        np.testing.assert_allclose(norms.norm_maps(r).residual_ln, computed, rtol=1e-4, atol=1e-6)


def test_padding_never_enters(tiny_model):
    """Seven inputs in one padded batch give what each gives alone (maps and norm statistics); the batch's maps
    equal the per-input functions of norms.py."""
    lm = tiny_model
    encoded = [encode(lm, s) for s in SENTENCES]
    batched = run_encoded(lm, encoded, batch_maps=norms.batch_norm_maps)
    alone = [run_encoded(lm, [e], NORMS)[0] for e in encoded]
    for b, a in zip(batched, alone):
        assert b.values.shape == a.values.shape and b.layer_inputs.shape[1] == a.n
        assert b.maps is not None and a.maps is None
        mb, ma = norms.norm_maps(b), norms.norm_maps(a)
        w = a.norm_weights
        vectors = norms.head_vectors(a.values, w.out_weight)
        residual = norms.residual_ln_map(a.attentions, vectors, a.layer_inputs, w.out_bias, w.gamma, w.eps)
        reference = {
            "value_norm": norms.value_norms(vectors),
            "weighted_norm": norms.weighted_norms(a.attentions, norms.value_norms(vectors)),
            "layer_norm": norms.layer_norm_map(a.attentions, vectors),
            "residual_ln": residual,
            "attention_rollout": norms.attention_rollout(a.attentions),
            "residual_ln_rollout": norms.residual_ln_rollout(residual),
        }
        np.testing.assert_allclose(b.value_norm, reference["value_norm"], rtol=1e-4, atol=1e-5)
        for name, expected in reference.items():
            np.testing.assert_allclose(getattr(mb, name), getattr(ma, name), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(getattr(mb, name), expected, rtol=1e-4, atol=1e-5)
    f = lm.facts
    whole, single = norms.NormShareStats(f.n_layers, f.n_heads), norms.NormShareStats(f.n_layers, f.n_heads)
    for b, a in zip(batched, alone):
        whole.add(b)
        single.add(a)
    for key in norms.NORM_KEYS:
        np.testing.assert_allclose(whole.result().heads[key], single.result().heads[key], rtol=1e-4, atol=1e-6)


def test_norm_share_by_hand():
    """Two tokens [CLS] x: shares from A * value_norm row-normalised; value norm of a class is its mean."""
    attn = np.array([[[[0.5, 0.5], [0.25, 0.75]]]])  # [1 layer, 1 head, 2, 2]
    value_norm = np.array([[[3.0, 1.0]]])
    classes = class_masks(np.array([True, False]), np.array([False, False]), np.array([False, False]))
    shares, by_class, present = norms.norm_class_statistics(attn, value_norm, classes)
    # Row 0: 1.5 / 2 to CLS; row 1: 0.75 / 1.5 to CLS -> mean 0.625.
    np.testing.assert_allclose(shares[0, 0], [0.625, 0, 0, 0.375])
    np.testing.assert_allclose(by_class[0, 0, [0, 3]], [3.0, 1.0])
    assert present.tolist() == [True, False, False, True]


def test_causal_norm_share_by_hand():
    """A decoder (METHODS §18): FIRST's norm share over rows i >= 1 (row 0 sees only itself), the others over all rows."""
    attn = np.array([[[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]]])
    value_norm = np.array([[[1.0, 2.0, 4.0]]])
    first = np.array([True, False, False])
    classes = class_masks(first, np.zeros(3, bool), np.zeros(3, bool))
    # weighted rows: [1, 0, 0], [0.5, 1, 0], [0.2, 0.6, 2]: FIRST 1/3 and 0.2/2.8 = 1/14 in rows 1 and 2
    causal, _, _ = norms.norm_class_statistics(attn, value_norm, classes, causal=True)
    np.testing.assert_allclose(causal[0, 0], [(1 / 3 + 1 / 14) / 2, 0, 0, (2 / 3 + 13 / 14) / 3])
    plain, _, _ = norms.norm_class_statistics(attn, value_norm, classes)
    np.testing.assert_allclose(plain[0, 0, 0], (1 + 1 / 3 + 1 / 14) / 3)


def test_accumulator_halves_merge_to_whole(tiny_model):
    lm = tiny_model
    f = lm.facts
    inputs = read_corpus(str(CLASSROOM_SINGLE), 8)
    whole, first, second = (norms.NormShareStats(f.n_layers, f.n_heads) for _ in range(3))
    accumulate(lm, inputs, [whole], batch_size=3)
    accumulate(lm, inputs[:5], [first], batch_size=3)
    accumulate(lm, inputs[5:], [second], batch_size=3)
    merged = first.merge(second).result()
    assert merged.n_inputs == whole.result().n_inputs == 8
    for key in norms.NORM_KEYS:
        # the halves run in other batches (other padding and BLAS blocking): float32 rounding, FORWARD_RTOL
        np.testing.assert_allclose(merged.heads[key], whole.result().heads[key], rtol=FORWARD_RTOL, atol=FORWARD_RTOL)
    shares = sum(merged.heads[key] for key in ("cls", "sep", "punct", "other"))
    np.testing.assert_allclose(shares, 1.0, atol=1e-5)


def test_default_runs_capture_nothing(tiny_model):
    r = run(tiny_model, "A dog barked.", capture_qk=False)
    assert r.values is None and r.layer_inputs is None and r.norm_weights is None
    with pytest.raises(ValueError, match="capture_norms"):
        norms.norm_maps(r)


def test_norms_cli_equals_library(tiny_model_dir, tiny_model):
    data = cli_json("norms", "--text", "The cat sat.", "--pair", "It purred.", "--model", str(tiny_model_dir), "--json")
    maps = norms.norm_maps(run(tiny_model, "The cat sat.", "It purred.", capture_norms=True))
    n, f = len(maps.tokens), tiny_model.facts
    assert data["tokens"] == maps.tokens
    assert np.array(data["value_norm"]).shape == (f.n_layers, f.n_heads, n)
    assert np.array(data["weighted_norm"]).shape == (f.n_layers, f.n_heads, n, n)
    for key in ("value_norm", "weighted_norm", "layer_norm", "residual_ln", "attention_rollout", "residual_ln_rollout"):
        np.testing.assert_allclose(np.array(data[key]), getattr(maps, key), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.array(data["residual_ln"]).sum(-1), 1.0)  # not row-normalised


def test_special_norms_cli_and_result_file(tiny_model_dir, tiny_model, tmp_path):
    out = tmp_path / "special.json"
    args = ["special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "6", "--norms", "--model", str(tiny_model_dir)]
    data = cli_json(*args, "--out", str(out), "--json")
    f = tiny_model.facts
    stats = norms.NormShareStats(f.n_layers, f.n_heads)
    accumulate(tiny_model, read_corpus(str(CLASSROOM_SINGLE), 6), [stats])
    expected = stats.result()
    assert len(data["norm_layers"]) == f.n_layers and set(data["norm_layers"][0]) == set(norms.NORM_KEYS)
    for key in norms.NORM_KEYS:
        np.testing.assert_allclose(np.array(data["norm_heads"][key]), expected.heads[key], rtol=1e-6)
        np.testing.assert_allclose([row[key] for row in data["norm_layers"]], expected.layers[key], rtol=1e-6)
    loaded = special_norms_from_json(read_result_file(out.read_bytes(), "special").result)
    np.testing.assert_allclose(loaded.heads["value_sep"], expected.heads["value_sep"], rtol=1e-6)
    ran = run_cli(*[a for a in args if a != "--norms"] + ["--json"])
    assert ran.code == 0, ran.err
    assert special_norms_from_json(ran.json) is None  # files without norms stay valid


def test_figures_plot_the_layer_means():
    from attnlib.views.norms import (
        agreement_figure,
        measure_center_of_mass_figure,
        value_norm_figure,
        weights_vs_norms_figure,
    )

    rng = np.random.default_rng(0)
    per_head = {key: rng.random((3, 2)) for key in norms.NORM_KEYS}
    fig = weights_vs_norms_figure(per_head, {key: v / 2 for key, v in per_head.items()})
    assert len(fig.data) == 8
    np.testing.assert_allclose(fig.data[0].y, per_head["cls"].mean(1))
    np.testing.assert_allclose(fig.data[4].y, per_head["cls"].mean(1) / 2)
    fig = value_norm_figure(per_head)
    np.testing.assert_allclose(fig.data[1].y, per_head["value_cls"].mean(1))
    layers = {m: rng.random(3) for m in norms.MEASURES}
    assert len(agreement_figure(layers, layers).data) == 2 * len(norms.MEASURES)
    fig = measure_center_of_mass_figure({**layers, "attribution": np.zeros(3)})
    assert [t.name for t in fig.data][-1] == "layer-output attribution"


# ---------- slow tests


@pytest.mark.slow
def test_decomposition_rebuilds_the_block_output_on_minilm(minilm, one_thread):
    captured = []
    hooks = [
        s.norm.register_forward_hook(lambda _m, _i, o: captured.append(o[0].detach()))
        for s in layout(minilm.encoder).sites
    ]
    try:
        r = run(minilm, "Colourless green ideas sleep furiously, they say.", capture_norms=True)
    finally:
        for hook in hooks:
            hook.remove()
    w = r.norm_weights
    vectors = norms.head_vectors(r.values, w.out_weight)
    np.testing.assert_allclose(vectors, _reference_vectors(minilm, r), rtol=1e-4, atol=1e-5)
    maps = norms.norm_maps(r)
    weighted = np.linalg.norm(r.attentions[..., None] * vectors[:, :, None], axis=-1)  # ||A_ij f_h(x_j)||
    np.testing.assert_allclose(maps.weighted_norm, weighted, rtol=1e-5, atol=1e-6)
    for l in range(minilm.facts.n_layers):
        parts = norms.layer_norm_parts(
            r.attentions[l], vectors[l], r.layer_inputs[l], w.out_bias[l], w.gamma[l], w.beta[l], float(w.eps[l])
        )
        np.testing.assert_allclose(parts.output(), captured[l].numpy(), atol=1e-5)
    for rolled in (maps.attention_rollout, maps.residual_ln_rollout):
        np.testing.assert_allclose(rolled.sum(-1), 1.0, atol=1e-5)
        assert (rolled >= 0).all()
