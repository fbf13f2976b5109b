"""Queries and keys in one picture (METHODS §17): the translation and scaling change no attention weight, the collected
queries and keys are the ones the weights give (rotary families after rotation), PCA by hand and against numpy's SVD,
the fidelity numbers on constructed heads, the collector, the command line and its result files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.analyses.base import OptionError, run_analysis
from attnlib.analyses.qk import (
    PACK_BITS,
    QK,
    Fidelity,
    ProjectionUnavailable,
    QKOptions,
    QKResult,
    fidelity,
    joint_points,
    key_ranks,
    nearest_neighbours,
    optional_module,
    pack,
    pca_2d,
    pca_components,
    project,
    qk_accumulators,
    translated_keys,
    unpack,
)
from attnlib.core.corpus import CorpusInput
from attnlib.core.families import layout
from attnlib.core.runner import run
from attnlib.results.files import read_result_file
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV
from support.cli import cli_json, run_cli

pytestmark = pytest.mark.usefixtures("one_thread")
SENTENCES = [("The cat sat on the mat because it was warm.", "It slept."), ("A dog barked.", None), ("Why?", None)]


def _inputs() -> list[CorpusInput]:
    return [CorpusInput(a, b, line) for line, (a, b) in enumerate(SENTENCES, start=1)]


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ------------------------------------------------------------------- the queries and keys, and what §17 does to them


def _window_mask(lm, layer: int, n: int) -> np.ndarray:
    """True where a key lies outside the layer's local window (ModernBERT's local layers), else nowhere."""
    window = lm.facts.window(layer)
    distance = np.abs(np.arange(n)[:, None] - np.arange(n)[None])
    return distance > window if window is not None else np.zeros((n, n), bool)


def test_translation_and_scaling_change_no_attention_weight(family_model):
    """softmax(qk_scale (q s).(k'/s) + score_bias), recomputed from §17's points with the means and norms taken over
    the whole corpus, is every head's attention on every input (1e-5: float32 attention against float64 softmax)."""
    lm = family_model
    runs = [run(lm, a, b) for a, b in SENTENCES]
    if runs[0].queries is None:
        pytest.skip(f"{lm.facts.model_type}: no queries and keys")
    sizes = [r.n for r in runs]
    ends = np.cumsum(sizes)
    for layer in range(lm.facts.n_layers):
        for head in range(lm.facts.n_heads):
            q = np.concatenate([r.queries[layer, head] for r in runs])
            k = np.concatenate([r.keys[layer, head] for r in runs])
            points = joint_points(q, k)
            q2, k2 = points[: len(q)], points[len(q) :]
            assert not np.allclose(k2, k)  # the keys did move
            for r, end, n in zip(runs, ends, sizes):
                logits = r.qk_scale[layer] * q2[end - n : end] @ k2[end - n : end].T
                if r.score_bias is not None:
                    logits = logits + r.score_bias[layer, head]
                logits[_window_mask(lm, layer, n)] = -np.inf
                np.testing.assert_allclose(_softmax(logits), r.attentions[layer, head], atol=1e-5)


def test_translation_moves_keys_onto_the_queries_mean_and_scaling_balances_norms():
    rng = np.random.default_rng(0)
    q, k = rng.normal(2.0, 1.0, (50, 8)), rng.normal(-3.0, 4.0, (60, 8))
    moved = translated_keys(q, k)
    np.testing.assert_allclose(moved.mean(0), q.mean(0), atol=1e-12)
    np.testing.assert_allclose(moved - moved.mean(0), k - k.mean(0), atol=1e-12)
    points = joint_points(q, moved)  # keys already on the queries' mean: the translation is then the identity
    qs, ks = points[:50], points[50:]
    assert np.linalg.norm(qs, axis=1).mean() == pytest.approx(np.linalg.norm(ks, axis=1).mean(), rel=1e-12)
    np.testing.assert_allclose(qs @ ks.T, q @ moved.T, rtol=1e-12, atol=1e-12)


def _rotate_pairs(x: np.ndarray, theta: np.ndarray, interleaved: bool) -> np.ndarray:
    """Rotate [n, d] by angle theta [n, d/2]: pairs (x_2i, x_2i+1) (RoFormer) or (x_i, x_i+d/2) (ModernBERT)."""
    half = x.shape[-1] // 2
    a, b = (x[:, 0::2], x[:, 1::2]) if interleaved else (x[:, :half], x[:, half:])
    cos, sin = np.cos(theta), np.sin(theta)
    ra, rb = a * cos - b * sin, b * cos + a * sin
    out = np.empty_like(x)
    if interleaved:
        out[:, 0::2], out[:, 1::2] = ra, rb
    else:
        out[:, :half], out[:, half:] = ra, rb
    return out


def _linear(module, x: np.ndarray) -> np.ndarray:
    out = x @ module.weight.detach().double().numpy().T
    return out if module.bias is None else out + module.bias.detach().double().numpy()


def _layer_norm(module, x: np.ndarray) -> np.ndarray:
    if not isinstance(module, torch.nn.LayerNorm):
        return x  # ModernBERT's first layer reads its input as it is (Identity)
    centred = x - x.mean(-1, keepdims=True)
    scale = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + module.eps)
    weight = module.weight.detach().double().numpy()
    return scale * weight + (0 if module.bias is None else module.bias.detach().double().numpy())


def _queries_keys_from_weights(lm, x: np.ndarray, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """One layer's queries and keys [heads, n, d] worked out in float64 from its input x [n, hidden] and the weights:
    the projections (split as each family lays them out), DeBERTa's q_bias, rotary positions after the projection."""
    lay = layout(lm.encoder)
    site, config = lay.sites[layer], lm.encoder.config
    h, d, n = lay.n_heads, lay.head_dim, len(x)
    kind = config.model_type
    heads_input = _layer_norm(site.norm, x) if not lay.family.post_layer_norm else x

    def split(y: np.ndarray) -> np.ndarray:
        return y.reshape(n, h, d).transpose(1, 0, 2)

    if kind == "modernbert":
        qkv = _linear(site.projections[0], heads_input).reshape(n, 3, h, d)
        q, k = qkv[:, 0].transpose(1, 0, 2), qkv[:, 1].transpose(1, 0, 2)
    elif kind == "deberta":
        qkv = heads_input @ site.heads.in_proj.weight.detach().double().numpy().T
        q, k, _ = np.split(qkv.reshape(n, h, 3 * d).transpose(1, 0, 2), 3, axis=-1)
        q = q + site.heads.q_bias.detach().double().numpy().reshape(h, 1, d)
    else:
        q, k = split(_linear(site.projections[0], heads_input)), split(_linear(site.projections[1], heads_input))
    positions = np.arange(n)[:, None]
    if kind == "roformer":
        theta = positions / 10000 ** (np.arange(0, d, 2) / d)
        q, k = (np.stack([_rotate_pairs(m, theta, interleaved=True) for m in x_]) for x_ in (q, k))
    if kind == "modernbert":
        base = config.rope_parameters[config.layer_types[layer]]["rope_theta"]
        theta = positions / base ** (np.arange(0, d, 2) / d)
        q, k = (np.stack([_rotate_pairs(m, theta, interleaved=False) for m in x_]) for x_ in (q, k))
    return q, k


def test_collected_queries_and_keys_are_the_weights_own(family_model):
    """The collector's queries and keys of every head, from one padded batch, equal those worked out from each
    layer's input and the model's weights (rotary families after rotating them by hand); 1e-5 on values of O(1)."""
    lm = family_model
    options = QKOptions(all_heads=True)
    try:
        (collector,) = qk_accumulators(lm, options)
    except Exception as exc:  # a family the analysis refuses must say why, in words
        assert "not supported" in str(exc)
        pytest.skip(str(exc))
    filled = run_analysis(QK, lm, options, inputs={"corpus": _inputs()}).result
    assert filled.has_grid and len([p for p in filled.pictures.values() if p.method == "pca"]) == len(collector.heads)
    (collected,) = QK.make_fill(options)(lm, _inputs(), [collector], 8, None)
    for index, (a, b) in enumerate(SENTENCES):
        r = run(lm, a, b, capture_qk=False, capture_norms=True)
        for layer in range(lm.facts.n_layers):
            q, k = _queries_keys_from_weights(lm, r.layer_inputs[layer].astype(np.float64), layer)
            for head in range(lm.facts.n_heads):
                at = collected.heads.index((layer, head))
                np.testing.assert_allclose(collected.queries[index][at], q[head], atol=1e-5)
                np.testing.assert_allclose(collected.keys[index][at], k[head], atol=1e-5)
                np.testing.assert_array_equal(collected.top_keys[index][at], r.attentions[layer, head].argmax(-1))


def test_unsupported_family_says_why(tmp_path):
    """A model attnlib has no layout for gets one error line from the command, naming why (exit 2)."""
    from transformers import MegatronBertConfig, MegatronBertForMaskedLM

    from support.models import bert_tokenizer

    tokenizer = bert_tokenizer()
    config = MegatronBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    MegatronBertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    ran = run_cli("qk", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--model", str(tmp_path))
    assert ran.code == 2, ran.err
    err = ran.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: qk is not supported for this model") and "megatron" in err[0]


# ------------------------------------------------------------------------------------------------------------ PCA


def test_pca_of_a_hand_worked_four_point_example():
    """Points +-2 u1 and +-1 u2 with u1 = (0.6, 0.8, 0), u2 = (-0.8, 0.6, 0): centred already; X^T X = 8 u1 u1^T +
    2 u2 u2^T, so the components are u1 and u2, u2's largest loading (-0.8) flipped positive: (0.8, -0.6, 0)."""
    u1, u2 = np.array([0.6, 0.8, 0.0]), np.array([-0.8, 0.6, 0.0])
    points = np.array([2 * u1, -2 * u1, u2, -u2])
    _, components = pca_components(points)
    np.testing.assert_allclose(components, [[0.6, 0.8, 0.0], [0.8, -0.6, 0.0]], atol=1e-12)
    np.testing.assert_allclose(pca_2d(points), [[2, 0], [-2, 0], [0, -1], [0, 1]], atol=1e-12)
    np.testing.assert_allclose(pca_2d(points + [5.0, -1.0, 3.0]), pca_2d(points), atol=1e-12)  # centred first


def test_pca_is_numpys_svd_with_the_fixed_sign():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(200, 6)) @ np.diag([5, 3, 1, 0.5, 0.2, 0.1]) @ np.linalg.qr(rng.normal(size=(6, 6)))[0]
    coords = pca_2d(points)
    centred = points - points.mean(0)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    for c in range(2):
        sign = np.sign(vt[c, np.abs(vt[c]).argmax()])
        np.testing.assert_allclose(coords[:, c], sign * u[:, c] * s[c], atol=1e-10)
    _, components = pca_components(points)
    assert all(row[np.abs(row).argmax()] > 0 for row in components)  # the sign rule
    flipped = pca_2d(-points)  # the rule makes the picture of mirrored data the same up to the fixed signs
    np.testing.assert_allclose(np.abs(flipped), np.abs(coords), atol=1e-10)


def test_pca_where_only_the_plane_is_defined():
    """Equal first and second singular values: any rotation within the plane is a PCA; distances are defined."""
    rng = np.random.default_rng(2)
    circle = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    plane = np.stack([np.cos(circle), np.sin(circle), np.zeros(12), np.zeros(12)], 1) * 3
    points = plane @ np.linalg.qr(rng.normal(size=(4, 4)))[0] + rng.normal(0, 1e-9, (12, 4))
    coords = pca_2d(points)
    distances = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    truth = np.linalg.norm(plane[:, None] - plane[None], axis=-1)
    np.testing.assert_allclose(distances, truth, atol=1e-6)


# ------------------------------------------------------------------------------------------------------- fidelity


def test_key_ranks_by_hand():
    q = np.array([[0.0, 0.0], [10.0, 0.0]])
    k = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0]])  # from q0: 1, 2, 1 (a tie); from q1: 9, ~10.2, 11
    np.testing.assert_array_equal(key_ranks(q, k), [[1, 3, 1], [1, 2, 3]])


def test_fidelity_of_a_hand_worked_picture():
    # one input of 3 tokens: queries then keys; top keys 2 (rank 1: tied nearest with key 0), 1 (rank 2), 2 (rank 3)
    q = [[0, 0], [10, 0], [10, 0]]
    k = [[1, 0], [0, 2], [-1, 0]]
    f = fidelity(np.array(q + k, float), [3], np.array([2, 1, 2]))
    assert f.mean_rank == pytest.approx(2.0) and f.top_is_nearest == pytest.approx(1 / 3)
    # a random key: ranks (1, 3, 1), (1, 2, 3), (1, 2, 3) -> means 5/3, 2, 2; nearest 2/3, 1/3, 1/3
    assert f.random_mean_rank == pytest.approx((5 / 3 + 2 + 2) / 3)
    assert f.random_top_is_nearest == pytest.approx((2 / 3 + 1 / 3 + 1 / 3) / 3)


def test_fidelity_of_a_head_whose_top_key_is_always_the_nearest():
    """A constructed head in 2-D: keys on a circle in antipodal pairs at random angles (their mean is 0, their
    distances from any query all differ), each query 10 times one key. The dot product's top key is that key, and
    after §17's translation, scaling and PCA it is the nearest key; the antipodal key is the farthest."""
    n_tokens, queries, keys, tops = [6, 8], [], [], []
    rng = np.random.default_rng(3)
    for n in n_tokens:
        half = rng.uniform(0, np.pi, n // 2)
        angles = np.concatenate([half, half + np.pi])  # key t + n/2 is antipodal to key t
        k = np.stack([np.cos(angles), np.sin(angles)], 1)
        target = rng.permutation(n)
        q = 10 * k[target]
        tops.append(_softmax(q @ k.T).argmax(1))
        np.testing.assert_array_equal(tops[-1], target)
        queries.append(q)
        keys.append(k)
    coords = project(joint_points(np.concatenate(queries), np.concatenate(keys)), "pca")
    f = fidelity(coords, n_tokens, np.concatenate(tops))
    assert (f.mean_rank, f.top_is_nearest) == (1.0, 1.0)
    assert f.random_mean_rank == pytest.approx((6 * 3.5 + 8 * 4.5) / 14)  # (n + 1) / 2 for each query
    assert f.random_top_is_nearest == pytest.approx((6 / 6 + 8 / 8) / 14)
    farthest = np.concatenate([(t + n // 2) % n for t, n in zip(tops, n_tokens)])
    backwards = fidelity(coords, n_tokens, farthest)
    assert backwards.mean_rank == pytest.approx((6 * 6 + 8 * 8) / 14) and backwards.top_is_nearest == 0.0


# ---------------------------------------------------------------------------------------------------- packing


@pytest.mark.parametrize("bits", [8, 16])
def test_pack_keeps_each_number_within_half_a_step(bits):
    values = np.random.default_rng(4).normal(0, 3, 1000)
    packed = pack(values, bits)
    step = (values.max() - values.min()) / (2**bits - 1)
    assert np.abs(unpack(packed) - values).max() <= step / 2 * (1 + 1e-6) + 1e-6
    assert len(unpack(pack(np.full(5, 2.5), bits))) == 5 and np.all(unpack(pack(np.full(5, 2.5), bits)) == 2.5)


# -------------------------------------------------------------------------------------------- the collector, the CLI


def test_halves_merge_to_the_whole_in_corpus_order(minilm):
    options = QKOptions(layer=2, head=5)
    inputs = _inputs()
    fill = QK.make_fill(options)
    (whole,) = fill(minilm, inputs, qk_accumulators(minilm, options), 8, None)
    (back,) = fill(minilm, inputs[2:], qk_accumulators(minilm, options), 8, None)
    (front,) = fill(minilm, inputs[:2], qk_accumulators(minilm, options), 8, None)
    merged = back.merge(front)  # Ray may hand the shards back in any order
    assert [i.line for i in merged.inputs] == [1, 2, 3]
    for a, b in zip(merged.queries + merged.keys + merged.top_keys, whole.queries + whole.keys + whole.top_keys):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_command_prints_the_issues_json(tmp_path):
    out = tmp_path / "qk.json"
    argv = ["qk", "--corpus", str(CLASSROOM_SINGLE), "--layer", "1", "--head", "3", "--limit", "6", "--all-heads"]
    data = cli_json(*argv, "--json", "--out", str(out))
    points = data["points"]
    assert set(points) >= {"kind", "input", "position", "token", "x", "y"}
    n = len(points["kind"]) // 2
    assert points["kind"] == ["query"] * n + ["key"] * n and points["token"][:n] == points["token"][n:]
    assert points["token"][0] == "[CLS]" and points["position"][0] == 0 and max(points["input"]) == 5
    assert set(data["fidelity"]) == {"mean_rank", "top_is_nearest", "random"}
    assert set(data["fidelity"]["random"]) == {"mean_rank", "top_is_nearest"}
    assert (data["layer"], data["head"], data["method"], len(data["grid"])) == (1, 3, "pca", 6 * 12 - 1)
    record = read_result_file(out.read_bytes(), "qk")
    result = QK.from_record(record)
    assert isinstance(result, QKResult) and record.options["all_heads"] is True
    asked = result.asked
    np.testing.assert_allclose(asked.x, points["x"], rtol=1e-6)
    grid_pca = result.picture(0, 0, "pca")
    assert grid_pca is not None and len(grid_pca.x) == 2 * n
    step = (grid_pca.x.max() - grid_pca.x.min()) / (2 ** PACK_BITS["pca"] - 1)
    direct = run_analysis(QK, "all-MiniLM-L6-v2", QKOptions(), inputs={"corpus": str(CLASSROOM_SINGLE)}, limit=6)
    np.testing.assert_allclose(grid_pca.x, direct.result.asked.x, atol=step / 2 + 1e-5)  # the packed grid's head 0-0
    assert QKResult.from_json(result.to_json()).to_json() == result.to_json()


def test_conllu_keeps_gold_upos_and_refuses_a_text_file():
    ran = run_cli("qk", "--conllu", str(EWT_DEV), "--limit", "3", "--json")
    assert ran.code == 0, ran.err
    data = ran.json
    upos = data["points"]["upos"]
    assert data["has_upos"] and upos[0] == "" and {"NOUN", "VERB", "PUNCT"} <= set(upos)
    special = [u == "" for u in upos]
    assert special == [t in ("[CLS]", "[SEP]") for t in data["points"]["token"]]
    assert "is not a .conllu file" in run_cli("qk", "--conllu", str(CLASSROOM_SINGLE)).error
    assert (
        "not allowed with argument" in run_cli("qk", "--conllu", str(EWT_DEV), "--corpus", str(CLASSROOM_SINGLE)).error
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--layer", "6"], "outside all-MiniLM-L6-v2 (layers 0-5"),
        (["--head", "12"], "heads 0-11"),
        (["--every-method"], "give --all-heads with it"),
        (["--method", "mds"], "invalid choice"),
    ],
)
def test_command_refuses_bad_options_in_one_line(flags, message):
    assert message in run_cli("qk", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", *flags).error


def test_a_missing_projection_library_is_named(monkeypatch):
    import importlib

    real = importlib.import_module

    def without_umap(name, *args):
        if name == "umap":
            raise ImportError("No module named 'umap'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_umap)
    with pytest.raises(ProjectionUnavailable, match="UMAP needs umap-learn, which is not installed: pip install"):
        optional_module("umap")
    with pytest.raises(OptionError):  # the command line's one error line
        optional_module("umap")


def test_fidelity_json_round_trip():
    f = Fidelity(2.5, 0.25, 7.0, 0.1)
    assert Fidelity.from_json(f.to_json()) == f


def test_shipped_grid_is_a_fresh_pca_within_its_packing_step():
    """The shipped check slice's grid (packed codes, which a code can differ by across CPUs) decodes to within half
    a packing step (plus float32 rounding) of every head's PCA computed now; its fidelity numbers agree."""
    from attnlib.results.precomputed import PRECOMPUTED, shipped_results

    entry = next(e for e in shipped_results() if e.command == "qk")
    assert entry.options["all_heads"] and entry.check_file is not None
    shipped = QK.from_record(read_result_file((PRECOMPUTED / entry.check_file).read_bytes(), "qk"))
    options, corpus = QKOptions(all_heads=True), {"corpus": str(CLASSROOM_SINGLE)}
    fresh = run_analysis(QK, "all-MiniLM-L6-v2", options, inputs=corpus, limit=len(shipped.inputs)).result
    assert [i.tokens for i in fresh.inputs] == [i.tokens for i in shipped.inputs]
    for (layer, head, method), picture in shipped.pictures.items():
        now = fresh.picture(layer, head, method)
        assert now is not None
        for a, b in ((picture.x, now.x), (picture.y, now.y)):
            step = (b.max() - b.min()) / (2 ** PACK_BITS[method] - 1)
            np.testing.assert_allclose(a, b, atol=step / 2 + 1e-4 * np.abs(b).max())
        assert picture.fidelity.top_is_nearest == pytest.approx(now.fidelity.top_is_nearest, abs=0.02)


def test_nearest_neighbours_are_exact_and_start_with_the_point_itself():
    # 0..3 on a line at 0, 1, 3, 7; points 4-6 are three copies of (0, 10): with k = 2 a copy's nearest is a copy
    points = np.array([[0, 0], [1, 0], [3, 0], [7, 0], [0, 10], [0, 10], [0, 10]], np.float32)
    indices, distances = nearest_neighbours(points, 2)
    np.testing.assert_array_equal(indices[:, 0], np.arange(7))
    np.testing.assert_array_equal(indices[:4, 1], [1, 0, 1, 2])
    np.testing.assert_allclose(distances[:4], [[0, 1], [0, 1], [0, 2], [0, 4]], atol=1e-6)
    for copy in (4, 5, 6):
        assert indices[copy, 1] in {4, 5, 6} - {copy} and distances[copy, 1] == pytest.approx(0, abs=1e-6)


# ---------- slow tests


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tsne", "umap"])
def test_tsne_and_umap_are_seeded_on_one_machine(method):
    rng = np.random.default_rng(5)
    points = np.concatenate([rng.normal(c, 0.3, (60, 8)) for c in (-2, 0, 2)])
    first, second = project(points, method), project(points, method)
    np.testing.assert_array_equal(first, second)
    labels = np.repeat([0, 1, 2], 60)  # three separated clusters stay separated: each point's nearest is its own
    distances = np.linalg.norm(first[:, None] - first[None], axis=-1) + np.eye(180) * 1e9
    assert (labels[distances.argmin(1)] == labels).mean() > 0.95
