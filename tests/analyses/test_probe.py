"""Clark's attention probe (METHODS section 14) on hand-made maps, tiny models, and the probe command on EWT."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlib.analyses.deps import best_offset_baseline, predict_heads, sentence_word_map
from attnlib.analyses.probe import (
    AttentionProbe,
    ProbeCorpus,
    ProbeOptions,
    ProbeResult,
    WordsProbe,
    extract_maps,
    run_probe,
    score_probe,
    train_probe,
)
from attnlib.core.corpus import Sentence, read_conllu
from attnlib.core.runner import RunResult
from attnlib.results.shipped import EWT_DEV, EWT_TEST
from support.cli import cli_json, run_cli

# ---------------------------------------------------------------------------------------------------------------
# Hand-made sentences: one piece per word, so the token maps given to the runner result are the word-level maps.


def _result(maps: np.ndarray, words: list[str], truncated: bool = False) -> RunResult:
    """A RunResult whose attention [L, H, m+2, m+2] is over [CLS], one piece per word, [SEP]."""
    n = maps.shape[-1]
    word_ids: list[int | None] = [None, *range(n - 2), None]
    special = np.array([w is None for w in word_ids])
    cls = np.zeros(n, bool)
    cls[0] = True
    return RunResult(
        input_ids=[100 + i for i in range(n)],
        token_type_ids=None,
        tokens=["[CLS]", *words, "[SEP]"],
        segments=np.zeros(n, np.int8),
        word_ids=word_ids,
        words=list(words),
        cls_mask=cls,
        sep_mask=special & ~cls,
        special_mask=special,
        truncated=truncated,
        n_tokens_full=n,
        attentions=maps.astype(np.float32),
    )


def _random_tree(rng: np.random.Generator, m: int) -> list[int]:
    """1-based heads of a random tree: words attach, in a random order, to a word already placed (the first: root)."""
    order = rng.permutation(m)
    heads = [0] * m
    for k, word in enumerate(order[1:], start=1):
        heads[word] = int(order[rng.integers(0, k)]) + 1
    return heads


def _tree_maps(heads: list[int], rng: np.random.Generator) -> np.ndarray:
    """[1 layer, 3 heads, m+2, m+2]: head 0 is the gold tree (root word to [CLS]), head 1 uniform, head 2 the word
    before (a strong fixed offset), every row summing to 1."""
    m = len(heads)
    maps = np.zeros((1, 3, m + 2, m + 2))
    for i, h in enumerate(heads, start=1):
        maps[0, 0, i, h] = 1.0  # h = 0 is [CLS]
        maps[0, 2, i, i - 1] = 1.0
    maps[0, 0, 0, 0] = maps[0, 0, -1, -1] = maps[0, 2, 0, 0] = maps[0, 2, -1, -2] = 1.0
    maps[0, 1] = 1.0 / (m + 2)
    return maps


def _tree_corpus(n: int, seed: int, punct_every: int = 0) -> tuple[ProbeCorpus, list[RunResult], list[Sentence]]:
    rng = np.random.default_rng(seed)
    corpus = ProbeCorpus(1, 3)
    results, sentences = [], []
    for s in range(n):
        m = int(rng.integers(3, 12))
        heads = _random_tree(rng, m)
        deprels = [
            "root" if h == 0 else ("punct" if punct_every and i % punct_every == 0 else "dep")
            for i, h in enumerate(heads)
        ]
        sentence = Sentence([f"w{i}" for i in range(m)], None, s + 1, heads=heads, deprels=deprels, sent_id=f"s{s}")
        result = _result(_tree_maps(heads, rng), sentence.words)
        corpus.add(result, sentence)
        results.append(result)
        sentences.append(sentence)
    return corpus, results, sentences


def test_probe_learns_a_head_whose_map_is_the_gold_tree(one_thread):
    train, _, _ = _tree_corpus(30, seed=1)
    test, _, _ = _tree_corpus(20, seed=2, punct_every=4)
    probe = train_probe(train, epochs=10)
    result = score_probe(probe, train, test, epochs=10)
    assert result.uas == 1.0
    # the gold-tree head gets the largest dep->head weight; the probe beats every single head, which never finds ROOT
    assert result.largest_weights(1)[0][:3] == (0, 0, "dep->head")
    n_roots = result.uas_by_relation["root"]["count"]
    assert result.best_head_accuracy == pytest.approx(1 - n_roots / result.n_words)
    assert result.uas_by_relation["root"] == dict(count=20, uas=1.0, best_head_accuracy=0.0, baseline_accuracy=0.0)
    assert "punct" not in result.uas_by_relation
    assert result.n_words == sum(r != "punct" for s in test.sentences for r in s.deprels)


def test_words_probe_learns_the_gold_tree_too(one_thread):
    train, _, _ = _tree_corpus(30, seed=1)
    test, _, _ = _tree_corpus(20, seed=2)
    rng = np.random.default_rng(5)
    for part in (train, test):
        # w_k(i, j) = [e_i; e_j] . V_k has no constant term: a direction all embeddings share stands in for one
        part.embeddings = [
            np.column_stack([np.ones(len(s.words)), 0.1 * rng.standard_normal((len(s.words), 7))]).astype(np.float32)
            for s in part.sentences
        ]
    probe = train_probe(train, "words", epochs=10)
    result = score_probe(probe, train, test, "words", epochs=10)
    assert result.uas == 1.0 and result.weights is None


# ---------------------------------------------------------------------------------------------------------------
# Scores against the definition, written with plain loops


def _direct_scores(maps, w, u, a, b):
    """s(i, j) and s(i, 0) of METHODS 14 with loops; maps [K, m+2, m+2], w/u callables (k, i, j) -> weight."""
    k_maps, m = maps.shape[0], maps.shape[-1] - 2
    sep = m + 1
    out = np.full((m, m + 1), -np.inf)
    for i in range(1, m + 1):
        out[i - 1, 0] = sum(
            w(k, i, 0) * (a * maps[k, i, 0] + b * maps[k, i, sep])
            + u(k, i, 0) * (a * maps[k, 0, i] + b * maps[k, sep, i])
            for k in range(k_maps)
        )
        for j in range(1, m + 1):
            if j != i:
                out[i - 1, j] = sum(w(k, i, j) * maps[k, i, j] + u(k, i, j) * maps[k, j, i] for k in range(k_maps))
    return out


def test_attention_scores_and_root_column_match_the_definition():
    rng = np.random.default_rng(0)
    maps = rng.random((3, 6, 6)).astype(np.float32)  # K = 3 maps, m = 4 words
    probe = AttentionProbe(3)
    with torch.no_grad():
        for p in probe.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32)))
    w, u = probe.w.detach().numpy(), probe.u.detach().numpy()
    expected = _direct_scores(
        maps.astype(np.float64), lambda k, i, j: w[k], lambda k, i, j: u[k], probe.a.item(), probe.b.item()
    )
    with torch.no_grad():
        got = probe(torch.from_numpy(maps)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.isneginf(np.diag(got[:, 1:])).all()


def test_words_scores_match_the_definition_with_zero_root_embedding():
    rng = np.random.default_rng(1)
    maps = rng.random((2, 5, 5)).astype(np.float32)  # K = 2, m = 3
    e = rng.standard_normal((3, 4)).astype(np.float32)  # hidden 4
    probe = WordsProbe(2, 4)
    with torch.no_grad():
        for p in probe.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32)))
    v, uu = probe.v.detach().numpy().astype(np.float64), probe.u.detach().numpy().astype(np.float64)

    def pair(i, j):  # [e_i; e_j], ROOT (j = 0) a zero vector
        return np.concatenate([e[i - 1], e[j - 1] if j else np.zeros(4)])

    expected = _direct_scores(
        maps.astype(np.float64),
        lambda k, i, j: pair(i, j) @ v[k],
        lambda k, i, j: pair(i, j) @ uu[k],
        probe.a.item(),
        probe.b.item(),
    )
    with torch.no_grad():
        got = probe(torch.from_numpy(maps), torch.from_numpy(e)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_starting_point_zero_weights_and_root_from_cls_and_sep():
    maps = np.zeros((1, 5, 5), np.float32)
    maps[0, 2, 0], maps[0, 2, 4] = 0.25, 0.5  # word 2 to [CLS] and [SEP]
    probe = AttentionProbe(1)
    with torch.no_grad():
        probe.w.fill_(2.0)
        probe.a.fill_(3.0)
        probe.b.fill_(-1.0)
        scores = probe(torch.from_numpy(maps)).numpy()
    assert scores[1, 0] == pytest.approx(2.0 * (3.0 * 0.25 - 1.0 * 0.5))  # w (a W[i, CLS] + b W[i, SEP])
    fresh = AttentionProbe(4)
    assert fresh.w.abs().sum() == fresh.u.abs().sum() == 0 and fresh.a.item() == fresh.b.item() == 1.0


# ---------------------------------------------------------------------------------------------------------------
# Training, best head and baseline, bookkeeping


def test_training_is_deterministic_for_a_fixed_seed(one_thread):
    train, _, _ = _tree_corpus(12, seed=3)
    first = train_probe(train, epochs=2, seed=7).state_dict()
    second = train_probe(train, epochs=2, seed=7).state_dict()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert float(first["w"].abs().sum()) > 0  # it moved


def test_one_adam_step_by_hand():
    """After one sentence, Adam moves each parameter by lr g / (|g| + eps): about lr against the gradient's sign."""
    train, _, _ = _tree_corpus(1, seed=4)
    probe = AttentionProbe(3)
    scores = probe(torch.from_numpy(train.maps[0]))
    loss = torch.nn.functional.cross_entropy(scores, torch.tensor(train.sentences[0].heads), reduction="sum")
    loss.backward()
    grads = {name: p.grad.clone() for name, p in probe.named_parameters()}
    trained = dict(train_probe(train).named_parameters())
    for name, grad in grads.items():
        start = 1.0 if name in ("a", "b") else 0.0
        expected = start - 0.002 * grad / (grad.abs() + 1e-8)  # first step: the moments are g and g^2
        torch.testing.assert_close(trained[name].detach(), expected, rtol=1e-4, atol=1e-6)


def test_best_head_and_baseline_on_the_same_non_punct_words():
    rng = np.random.default_rng(8)
    probe_corpus = ProbeCorpus(2, 2)
    sentences = []
    for s in range(15):
        m = int(rng.integers(2, 9))
        heads = _random_tree(rng, m)
        deprels = [str(rng.choice(["punct", "det", "nsubj"])) if h else "root" for h in heads]
        sentence = Sentence([f"w{i}" for i in range(m)], None, s, heads=heads, deprels=deprels)
        maps = rng.random((2, 2, m + 2, m + 2))
        probe_corpus.add(_result(maps / maps.sum(-1, keepdims=True), sentence.words), sentence)
        sentences.append(sentence)
    result = score_probe(AttentionProbe(4), probe_corpus, probe_corpus)
    # independent: predictions of every head on every non-punct word, pooled
    hits = np.zeros((2, 2, 2))
    n_words = 0
    for sentence, maps in zip(sentences, probe_corpus.maps):
        keep = np.array([r != "punct" for r in sentence.deprels])
        predicted = predict_heads(maps.reshape(2, 2, *maps.shape[-2:]).astype(np.float64))  # [2, L, H, m]
        hits += (predicted == np.array(sentence.heads))[..., keep].sum(-1).transpose(1, 2, 0)
        n_words += int(keep.sum())
    assert result.n_words == n_words
    assert result.best_head_accuracy == pytest.approx(hits.max() / n_words)
    offsets = (-3, -2, -1, 1, 2, 3)
    offset_hits = [
        sum(
            1 <= i + 1 + k <= len(s.heads) and s.heads[i] == i + 1 + k
            for s in sentences
            for i, r in enumerate(s.deprels)
            if r != "punct"
        )
        for k in offsets
    ]  # a prediction outside 1..m is wrong (word 1 - 1 = 0 would otherwise "find" the root)
    assert result.baseline_accuracy == pytest.approx(max(offset_hits) / n_words)
    assert result.baseline_offset == offsets[int(np.argmax(offset_hits))]
    det = best_offset_baseline([s.heads for s in sentences], [s.deprels for s in sentences], relation="det")
    assert result.uas_by_relation["det"]["baseline_accuracy"] == pytest.approx(det.accuracy)
    # untrained probe (all weights 0, a = b = 1): every candidate ties but ROOT, so every word predicts ROOT
    assert result.uas == pytest.approx(result.uas_by_relation["root"]["count"] / n_words)


def test_skipped_and_merged_in_file_order():
    corpus, results, sentences = _tree_corpus(4, seed=6)
    long = Sentence(["x"] * 3, None, 99, heads=[0, 1, 1], deprels=["root", "dep", "dep"])
    corpus.add(_result(np.zeros((1, 3, 5, 5)), long.words, truncated=True), long)
    assert (len(corpus), corpus.n_skipped, corpus.counts.n_skipped) == (4, 1, 1)
    back, front = ProbeCorpus(1, 3), ProbeCorpus(1, 3)
    for r, s in list(zip(results, sentences))[2:]:
        back.add(r, s)
    for r, s in list(zip(results, sentences))[:2]:
        front.add(r, s)
    merged = back.merge(front)
    assert [s.sent_id for s in merged.sentences] == [s.sent_id for s in sentences]
    assert all(np.array_equal(a, b) for a, b in zip(merged.maps, corpus.maps))


def test_result_json_round_trip():
    train, _, _ = _tree_corpus(5, seed=9)
    result = score_probe(train_probe(train), train, train)
    data = json.loads(json.dumps(result.to_json()))
    assert set(data) >= {
        "n_train", "n_test", "n_words", "uas", "best_head_accuracy", "baseline_accuracy",
        "uas_by_relation", "weights", "n_skipped", "sentences",
    }  # fmt: skip
    assert ProbeResult.from_json(data) == result
    assert np.shape(data["weights"]["dep_to_head"]) == (1, 3)
    data["sentences"][0]["predicted"].append(1)
    with pytest.raises(ValueError):
        ProbeResult.from_json(data)


# ---------------------------------------------------------------------------------------------------------------
# Real tokenizers and models


def test_tiny_models_maps_skips_and_embeddings(tiny_model, one_thread):
    lm = tiny_model
    words = ["the", "cat", "sat", "on", "the", "mat"]
    sentences = [
        Sentence(words, None, 1, heads=[2, 3, 0, 6, 6, 3], deprels=["det", "nsubj", "root", "case", "det", "obl"]),
        Sentence(["cat"] * 80, None, 2, heads=[0] + [1] * 79, deprels=["root"] + ["dep"] * 79),  # > 64 tokens
        Sentence(words[:3], None, 3, heads=[2, 3, 0], deprels=["det", "nsubj", "root"]),
    ]
    corpus = extract_maps(lm, sentences, with_embeddings=True)
    assert (len(corpus), corpus.n_skipped) == (2, 1)
    k = lm.facts.n_layers * lm.facts.n_heads
    from attnlib.core.runner import run

    for sentence, maps, vectors in zip([sentences[0], sentences[2]], corpus.maps, corpus.embeddings):
        m = len(sentence.words)
        assert maps.shape == (k, m + 2, m + 2) and maps.dtype == np.float32
        single = run(lm, sentence.words, capture_qk=False)
        expected, _ = sentence_word_map(single, sentence.words)
        np.testing.assert_allclose(maps, expected.reshape(k, m + 2, m + 2), atol=1e-5)
        np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
        table = lm.encoder.get_input_embeddings().weight.detach().numpy()
        first_ids = [single.input_ids[single.word_ids.index(w)] for w in range(m)]
        np.testing.assert_array_equal(vectors, table[first_ids])
    result = score_probe(train_probe(corpus, "words"), corpus, corpus, "words")
    assert result.n_skipped == 2 and result.n_words == 9
    calls: list[tuple[int, int]] = []
    words = ProbeOptions(variant="words", epochs=2)
    again = run_probe(lm, sentences, sentences, words, progress=lambda d, t: calls.append((d, t)))
    assert again.to_json() == score_probe(train_probe(corpus, "words", 2), corpus, corpus, "words", 2).to_json()
    done = [d for d, _ in calls]
    assert done == sorted(done) and calls[-1] == (3 + 3 + 2 * 3, 12) and {t for _, t in calls} == {12}


@pytest.mark.parametrize("bad", [["--epochs", "0"], ["--limit", "0"]])
def test_cli_refuses_zero_epochs_and_limit(bad):
    assert run_cli("probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), *bad, "--json").error


# ---------------------------------------------------------------------------------------------------------------
# Figures


def test_figures_show_the_weights_relations_and_a_sentence():
    from attnlib.views.deps import HIT, MISS
    from attnlib.views.probe import probe_sentence, relation_bars, weight_heatmaps

    train, _, _ = _tree_corpus(6, seed=10)
    test, _, _ = _tree_corpus(3, seed=11, punct_every=3)
    result = score_probe(train_probe(train), train, test)
    grid = result.weight_grid()
    heat = weight_heatmaps(grid)
    assert [t.type for t in heat.data] == ["heatmap", "heatmap"]
    np.testing.assert_array_equal(np.array(heat.data[1].z), grid[:, :, 1])
    assert heat.data[0].zmin == -heat.data[0].zmax == -np.abs(grid).max()

    bars = relation_bars(result.uas_by_relation)
    assert [t.name for t in bars.data] == ["probe", "best single head", "best fixed offset"]
    assert list(bars.data[0].y) == [100 * v["uas"] for v in result.uas_by_relation.values()]
    assert bars.data[2].x[0].startswith(next(iter(result.uas_by_relation)))

    # a sentence with one right and one wrong ROOT prediction, and a punctuation word left unscored
    words, heads, deprels = ["a", "b", "c", "."], [2, 0, 2, 2], ["det", "root", "obj", "punct"]
    fig = probe_sentence(words, heads, deprels, predicted=[0, 0, 1, 0])
    roots = [a for a in fig.layout.annotations if a.y < 0]
    assert [(a.x, a.arrowcolor) for a in roots] == [(fig.data[-1].x[0], MISS), (fig.data[-1].x[1], HIT)]
    names = {t.name: t for t in fig.data if t.name}
    assert names["predicted: miss"].showlegend and not names["predicted: hit"].showlegend  # c -> a wrong, no arc hit
    assert names["gold arc (scored word)"].showlegend


# ---------------------------------------------------------------------------------------------------------------
# The page's "All heads together" section


# ---------- slow tests


@pytest.mark.slow
def test_cli_on_ewt_agrees_with_the_library(minilm, tmp_path):
    from attnlib.results.files import read_result_file

    out_file = tmp_path / "probe.json"
    args = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "6", "--json", "--out", str(out_file)]
    out = cli_json(*args)
    train, test = read_conllu(EWT_DEV)[:6], read_conllu(EWT_TEST)[:6]
    expected = run_probe(minilm, train, test).to_json()
    assert out == json.loads(json.dumps(expected))
    assert (out["n_train"], out["n_test"], out["n_skipped"]) == (6, 6, 0)
    assert out["n_words"] == sum(r != "punct" for s in test for r in s.deprels)
    assert [len(s["predicted"]) for s in out["sentences"]] == [len(s.words) for s in test]
    record = read_result_file(out_file.read_text(), "probe")
    assert ProbeResult.from_json(record.result).to_json() == out
    assert record.options == {"variant": "attention", "epochs": 1, "seed": 0}
    assert (record.corpus["train"]["path"], record.corpus["train"]["n_inputs"]) == (str(EWT_DEV), 6)
