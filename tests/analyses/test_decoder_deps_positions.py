"""Dependency heads and relative positions of a decoder (METHODS §18): each relation's ceiling per direction and the
causal predictions on hand-made maps, histograms over offsets k <= 0 worked by hand, and the `deps` and `positions`
commands on tiny decoders, with encoders' JSON keys as before."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from attnlib.analyses.deps import DependencyCounts, DepsResult, dependency_counts_from_json, dependency_counts_to_json
from attnlib.analyses.positions import PositionAccumulator, PositionsResult
from attnlib.core.corpus import Sentence
from attnlib.core.model import load_model
from attnlib.core.runner import RunResult, run
from attnlib.results.files import json_ready
from support.cli import run_cli
from support.models import save_tiny

# Sentence A, "w1 w2 w3 w4": w1 -det-> w2 (right), w2 root, w3 -det-> w4 (right), w4 -obj-> w2 (left).
# Sentence B, "v1 v2 v3": v1 root, v2 -det-> v1 (left), v3 -obj-> v1 (left).
A = Sentence(["w1", "w2", "w3", "w4"], None, 0, heads=[2, 0, 4, 2], deprels=["det", "root", "det", "obj"])
B = Sentence(["v1", "v2", "v3"], None, 1, heads=[0, 1, 1], deprels=["root", "det", "obj"])
# Ceilings by hand: det has 3 dependents, 1 with its head on the left and 2 on the right; obj 2, both left;
# all 7 words: 3 heads on the left (A w4, B v2, B v3), 2 on the right (A w1, A w3), the 2 roots neither.
CEILINGS = {"det": (1 / 3, 2 / 3), "obj": (1.0, 0.0), "all": (3 / 7, 2 / 7)}

# One head's causal map over [BOS, w1..w4] (a decoder with a BOS and no end token), rows sum to 1.
A_MAP = np.array(
    [
        [1.0, 0, 0, 0, 0],
        [0.6, 0.4, 0, 0, 0],
        [0.2, 0.7, 0.1, 0, 0],
        [0.1, 0.2, 0.6, 0.1, 0],
        [0.1, 0.1, 0.5, 0.2, 0.1],
    ]
)
# dep->head (argmax over earlier words): w1 none, w2 -> 1, w3 -> 2, w4 -> 2 (its head: a hit, obj).
# head<-dep (argmax over later words' rows of its column): w1 -> 2 (hit, det), w2 -> 3, w3 -> 4 (hit, det), w4 none.
A_PREDICTED = [[-1, 1, 2, 2], [2, 3, 4, -1]]
# B's map: every token gives everything to BOS, so every word-level entry is 0 and ties go to the first candidate:
# dep->head v1 none, v2 -> 1 (hit, det), v3 -> 1 (hit, obj); head<-dep v1 -> 2, v2 -> 3 (misses), v3 none.
B_MAP = np.array([[1.0, 0, 0, 0]] * 4)
# Accuracy (one head): det dep->head 1/3, head<-dep 2/3; obj 2/2 and 0/2; all: dep->head A w4, B v2, v3 = 3/7,
# head<-dep A w1, w3 = 2/7. Every one of them reaches its ceiling, none passes it.
ACCURACY = {"det": (1 / 3, 2 / 3), "obj": (1.0, 0.0), "all": (3 / 7, 2 / 7)}


def _result(word_ids, attention, words) -> RunResult:
    """A RunResult with one layer and one head of hand-made attention."""
    n = len(word_ids)
    special = np.array([w is None for w in word_ids])
    return RunResult(
        input_ids=list(range(n)),
        token_type_ids=None,
        tokens=[f"t{i}" for i in range(n)],
        segments=np.zeros(n, np.int8),
        word_ids=list(word_ids),
        words=list(words),
        cls_mask=special,
        sep_mask=np.zeros(n, bool),
        special_mask=special,
        truncated=False,
        n_tokens_full=n,
        attentions=attention[None, None].astype(np.float32),
    )


def _counts(causal: bool) -> DependencyCounts:
    counts = DependencyCounts(1, 1, causal=causal)
    counts.add(_result([None, 0, 1, 2, 3], A_MAP, A.words), A)
    counts.add(_result([None, 0, 1, 2], B_MAP, B.words), B)
    return counts


def test_causal_predictions_on_a_hand_made_map():
    from attnlib.analyses.deps import predict_heads, sentence_word_map

    word_map, _ = sentence_word_map(_result([None, 0, 1, 2, 3], A_MAP, A.words), A.words)
    assert predict_heads(word_map[0, 0], causal=True).tolist() == A_PREDICTED


def test_ceilings_and_accuracies_by_hand():
    table = _counts(causal=True).table(min_count=1)
    rows = {r.relation: r for r in table.rows}
    assert set(rows) == {"all", "det", "obj"}  # root is never a row
    for relation, (left, right) in CEILINGS.items():
        assert rows[relation].ceiling == pytest.approx({"dep->head": left, "head<-dep": right}), relation
    counts = _counts(causal=True)
    for relation, (dep_head, head_dep) in ACCURACY.items():
        assert counts.accuracy_grid(relation)[0, 0].tolist() == pytest.approx([dep_head, head_dep]), relation
    assert rows["det"].direction == "head<-dep" and rows["det"].accuracy == pytest.approx(2 / 3)


def test_ceiling_bounds_every_head_on_random_causal_maps():
    rng = np.random.default_rng(5)
    counts = DependencyCounts(1, 3, causal=True)
    for sentence in (A, B) * 3:
        n = len(sentence.words) + 1
        maps = np.tril(rng.random((3, n, n)))
        maps /= maps.sum(-1, keepdims=True)
        result = _result([None, *range(n - 1)], maps[0], sentence.words)
        counts.add(replace(result, attentions=maps[None].astype(np.float32)), sentence)
    for row in counts.table(min_count=1).rows:
        grid = counts.accuracy_grid(row.relation)[0]  # [heads, 2]
        ceiling = np.array([row.ceiling["dep->head"], row.ceiling["head<-dep"]])
        assert (grid <= ceiling + 1e-12).all(), row.relation


def test_ceilings_in_json_for_a_decoder_only_and_read_back():
    decoder, encoder = _counts(causal=True), _counts(causal=False)
    decoder_rows = decoder.table(min_count=1).as_json()["rows"]
    assert all(set(r["ceiling"]) == {"dep->head", "head<-dep"} for r in decoder_rows)
    encoder_keys = {
        "relation",
        "count",
        "layer",
        "head",
        "direction",
        "accuracy",
        "baseline_offset",
        "baseline_accuracy",
    }
    assert all(set(r) == encoder_keys for r in encoder.table(min_count=1).as_json()["rows"])
    assert "visible" not in dependency_counts_to_json(encoder)
    state = json.loads(json.dumps(json_ready(dependency_counts_to_json(decoder))))
    back = dependency_counts_from_json(state)
    assert back.table(min_count=1).as_json() == decoder.table(min_count=1).as_json()
    result = DepsResult(back, back.table(min_count=1))
    assert DepsResult.from_json(result.to_json(), state).table.rows[0].ceiling == pytest.approx(
        {"dep->head": 3 / 7, "head<-dep": 2 / 7}
    )


def test_ceiling_of_a_merge_and_of_half_b():
    a, b = DependencyCounts(1, 1, causal=True), DependencyCounts(1, 1, causal=True)
    a.add(_result([None, 0, 1, 2, 3], A_MAP, A.words), A)
    b.add(_result([None, 0, 1, 2], B_MAP, B.words), B)
    merged = {r.relation: r.ceiling for r in a.merge(b).table(min_count=1).rows}
    assert merged["det"] == pytest.approx({"dep->head": 1 / 3, "head<-dep": 2 / 3})


# Two causal inputs of one head, by hand: offsets k <= 0 and the (input, i) pairs with i + k >= 0.
P3 = np.array([[1.0, 0, 0], [0.4, 0.6, 0], [0.1, 0.3, 0.6]])
P2 = np.array([[1.0, 0], [0.8, 0.2]])
# k = 0: 3 + 2 pairs, (1 + 0.6 + 0.6 + 1 + 0.2) / 5 = 0.68; k = -1: 2 + 1 pairs, (0.4 + 0.3 + 0.8) / 3 = 0.5;
# k = -2: 1 pair, 0.1. Centre of mass (-2 * 0.1 - 0.5) / (0.1 + 0.5 + 0.68) = -0.7 / 1.28.
HAND = {"offsets": [-2, -1, 0], "counts": [1, 3, 5], "attention": [0.1, 0.5, 0.68], "com": -0.7 / 1.28}


def _fake(attention):
    n = attention.shape[-1]
    first = np.zeros(n, bool)
    first[0] = True
    return SimpleNamespace(
        attentions=attention[None, None], cls_mask=first, sep_mask=np.zeros(n, bool), n=n, truncated=False
    )


def test_causal_histogram_keeps_offsets_up_to_zero_by_hand():
    acc = PositionAccumulator(1, 1, head_dim=8, causal=True, attribution_note="no attribution here")
    acc.add(_fake(P3), None)
    acc.add(_fake(P2), None)
    r = acc.result()
    assert r.offsets.tolist() == HAND["offsets"] and r.offset_counts.tolist() == HAND["counts"]
    np.testing.assert_allclose(r.attention_histograms[0, 0], HAND["attention"])
    assert r.attention_head_com[0, 0] == pytest.approx(HAND["com"])
    data = json.loads(json.dumps(r.to_json(), allow_nan=False))
    assert data["kind"] == "decoder" and data["attribution_unavailable"] == "no attribution here"
    assert set(data["histograms"]) == {"offsets", "counts", "attention"}
    assert not {"attribution_center_of_mass", "correlation", "median_correlation"} & set(data)
    back = PositionsResult.from_json(data)
    assert back.causal and back.attribution_note == "no attribution here"
    np.testing.assert_allclose(back.attention_histograms, r.attention_histograms)
    assert np.isnan(back.attribution_histograms).all() and back.attribution_histograms.shape == (1, 1, 3)


def test_causal_accumulators_merge_and_refuse_other_kinds():
    a = PositionAccumulator(1, 1, head_dim=8, causal=True, attribution_note="none")
    b = PositionAccumulator(1, 1, head_dim=8, causal=True, attribution_note="none")
    a.add(_fake(P3), None)
    b.add(_fake(P2), None)
    np.testing.assert_allclose(a.merge(b).result().attention_histograms[0, 0], HAND["attention"])
    with pytest.raises(ValueError):
        a.merge(PositionAccumulator(1, 1, head_dim=8))


# ------------------------------------------------------------------------------------ the commands on tiny models

CONLLU = """# text = a
1\tw1\t_\t_\t_\t_\t2\tdet\t_\t_
2\tw2\t_\t_\t_\t_\t0\troot\t_\t_
3\tw3\t_\t_\t_\t_\t4\tdet\t_\t_
4\tw4\t_\t_\t_\t_\t2\tobj\t_\t_

# text = b
1\tv1\t_\t_\t_\t_\t0\troot\t_\t_
2\tv2\t_\t_\t_\t_\t1\tdet\t_\t_
3\tv3\t_\t_\t_\t_\t1\tobj\t_\t_

"""
ENCODER_POSITION_KEYS = {
    "model",
    "n_inputs",
    "n_skipped_longer_than_head_dim",
    "n_longer_than_head_dim",
    "head_dim",
    "n_truncated",
    "options",
    "attention_center_of_mass",
    "attribution_center_of_mass",
    "attention_head_center_of_mass",
    "attribution_head_center_of_mass",
    "histograms",
    "correlation",
    "median_correlation",
}


@pytest.fixture(scope="module", params=["gpt2", "llama", "bert"])
def kind_dir(request, tmp_path_factory):
    return request.param, save_tiny(request.param, tmp_path_factory.mktemp(f"{request.param}-depspos"))


@pytest.mark.slow
def test_deps_command_carries_ceilings_for_decoders_only(kind_dir, tmp_path):
    kind, folder = kind_dir
    treebank = tmp_path / "hand.conllu"
    treebank.write_text(CONLLU)
    ran = run_cli("deps", "--conllu", str(treebank), "--min-count", "1", "--model", str(folder), "--json")
    assert ran.code == 0, ran.err
    rows = {r["relation"]: r for r in ran.json["rows"]}
    assert ran.json["n_sentences"] == 2 and set(rows) == {"all", "det", "obj"}
    if kind == "bert":
        assert all("ceiling" not in r for r in rows.values())
        return
    for relation, (left, right) in CEILINGS.items():
        assert rows[relation]["ceiling"] == pytest.approx({"dep->head": left, "head<-dep": right}), relation
        assert rows[relation]["accuracy"] <= rows[relation]["ceiling"][rows[relation]["direction"]] + 1e-12


@pytest.mark.slow
def test_positions_command_on_a_decoder_and_an_encoder(kind_dir, tmp_path):
    kind, folder = kind_dir
    texts = ["The cat sat on the mat.", "A dog barked twice."]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n")
    ran = run_cli("positions", "--corpus", str(corpus), "--model", str(folder), "--json")
    assert ran.code == 0, ran.err
    if kind == "bert":
        assert set(ran.json) == ENCODER_POSITION_KEYS
        return
    assert ran.json["kind"] == "decoder" and "attribution_unavailable" not in ran.json
    assert set(ran.json) == ENCODER_POSITION_KEYS | {"kind"}  # attribution too (METHODS §9 with causal rows)
    # independently: the runner's causal maps, summed along each diagonal k <= 0, over the rows that have it
    lm = load_model(str(folder))
    maps = [run(lm, t).attentions.astype(np.float64) for t in texts]
    widest = max(m.shape[-1] for m in maps)
    offsets = np.arange(-(widest - 1), 1)
    counts = np.array([sum(max(m.shape[-1] + k, 0) for m in maps) for k in offsets])
    sums = np.stack(
        [sum(np.diagonal(m, k, -2, -1).sum(-1) for m in maps if m.shape[-1] > -k) for k in offsets], axis=-1
    )
    h = ran.json["histograms"]
    assert h["offsets"] == offsets.tolist() and h["counts"] == counts.tolist()
    np.testing.assert_allclose(np.array(h["attention"]), sums / counts, rtol=1e-6, atol=1e-9)
    # every attribution row sums to 1 (float32, within n eps) over tokens i <= j (causal): offsets k <= 0 hold it all
    rows = sum(m.shape[-1] for m in maps)
    np.testing.assert_allclose((np.array(h["attribution"]) * counts).sum(-1), rows, rtol=1e-5)


@pytest.mark.slow
def test_probe_command_runs_on_a_decoder_with_causal_single_heads(kind_dir, tmp_path):
    """METHODS §18: the probe reads causal maps as they are; its best single head predicts from the visible side, so
    on the hand-made treebank (no punctuation) it cannot pass the pooled ceiling, 3/7."""
    from attnlib.analyses.probe import extract_maps

    kind, folder = kind_dir
    treebank = tmp_path / "hand.conllu"
    treebank.write_text(CONLLU)
    ran = run_cli("probe", "--train", str(treebank), "--test", str(treebank), "--model", str(folder), "--json")
    assert ran.code == 0, ran.err
    assert ran.json["n_words"] == 7 and 0 <= ran.json["uas"] <= 1
    counts = extract_maps(load_model(str(folder)), [A, B]).counts
    assert counts is not None and counts.causal == (kind != "bert")
    if kind != "bert":
        assert ran.json["best_head_accuracy"] <= 3 / 7 + 1e-12
