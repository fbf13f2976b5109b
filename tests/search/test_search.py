"""Corpus search by example (METHODS §16): top k against brute-force cosine (hand-made vectors, the model's own
vectors), heads mode against context vectors worked out from the weights, float16 against float32 within §16's bound,
summaries against counts made from the treebank and the model's own attention, and index files refused when they are
of another model, corpus or options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.core.corpus import CorpusInput, read_corpus
from attnlib.core.model import load_model
from attnlib.core.runner import encode, model_inputs, run
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV
from attnlib.search.by_example import (
    FLOAT16_SCORE_BOUND,
    CorpusIndex,
    IndexedInput,
    IndexFileError,
    IndexOptions,
    IndexRows,
    Query,
    SearchError,
    build_index,
    query_of,
    search_corpus,
    top_k,
)
from attnlib.search.scoring import candidate_scores
from attnlib.stats.special import CLASS_KEYS
from support.cli import run_cli
from support.json_keys import COMMAND_KEYS
from support.search import QUERY, check_top_k_equals_brute_force_cosine, ewt_dev_head, sentences

pytestmark = pytest.mark.usefixtures("one_thread")
FLOAT16_ROUNDING = 2.0**-11  # unit roundoff of float16: |x16 - x| <= u |x| per component


# ---------------------------------------------------------------------------------------- hand-made vectors


def _hand_input(line: int, vectors: np.ndarray, upos: list[str], argmax: np.ndarray | None = None) -> IndexedInput:
    """An input "[CLS] w0 .. wm-1 [SEP]" whose m words each hold one candidate vector (normalised here)."""
    m = len(vectors)
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    tokens = ["[CLS]", *[f"w{line}_{i}" for i in range(m)], "[SEP]"]
    classes = np.array([0] + [3] * m + [1], np.int8)
    return IndexedInput(
        line=line,
        text_a=" ".join(tokens[1:-1]),
        text_b="",
        tokens=tokens,
        classes=classes,
        word_ids=np.array([-1, *range(m), -1], np.int32),
        words=tokens[1:-1],
        upos=upos,
        deprels=[u.lower() for u in upos],
        positions=np.arange(1, m + 1, dtype=np.int32),
        vectors=vectors.astype(np.float32),
        head_norms=None,
        argmax=np.zeros((m, 2), np.int16) if argmax is None else argmax,
    )


def _hand_index(inputs: list[IndexedInput], n_heads: int = 2) -> CorpusIndex:
    meta = {"model": "hand", "model_fingerprint": "0", "n_layers": 1, "n_heads": n_heads,
            "corpus": {"name": "hand", "sha1": "abc", "n_inputs": len(inputs)},
            "options": {"layer": 0, "embeddings": False, "heads": "", "dtype": "float32", "all_punct": False}}  # fmt: skip
    rows = IndexRows()
    for row in inputs:
        rows.add(row)
    return CorpusIndex.from_rows(rows, meta)


def _query(vector) -> Query:
    v = np.asarray(vector, np.float32)
    return Query("q", None, 1, "q", ["[CLS]", "q", "[SEP]"], v / np.linalg.norm(v), None)


def test_top_k_of_hand_made_vectors_with_known_neighbours():
    """Vectors at known angles from the query: the order is by cosine, equal vectors tie by (input, position)."""
    angles = np.radians([80.0, 10.0, 45.0, 10.0, 170.0])  # two at 10 degrees, in input 0 and input 1
    vectors = np.stack([np.cos(angles), np.sin(angles), np.zeros(5)], axis=1)
    index = _hand_index(
        [
            _hand_input(1, vectors[:2], ["NOUN", "DET"]),
            _hand_input(2, vectors[2:], ["VERB", "DET", "ADP"]),
        ]
    )
    result = index.search(_query([1.0, 0.0, 0.0]), k=4)
    got = [(m.input, m.position) for m in result.matches]
    assert got == [(0, 2), (1, 2), (1, 1), (0, 1)]  # 10 (input 0 first), 10, 45, 80 degrees
    np.testing.assert_allclose([m.score for m in result.matches], np.cos(np.radians([10, 10, 45, 80])), atol=1e-6)
    assert [m.upos for m in result.matches] == ["DET", "DET", "VERB", "NOUN"]
    assert result.summary.upos == {"DET": 2, "NOUN": 1, "VERB": 1} and result.summary.deprel["det"] == 2
    assert index.search(_query([1.0, 0.0, 0.0]), k=50).summary.n == 5  # k larger than the corpus: every candidate


def test_top_k_ties_and_partition_boundary():
    """Equal scores across the k-th place keep the lowest rows; the order equals a full sort by (-score, row)."""
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 200).astype(np.float32)  # many ties
    for k in (1, 7, 50, 199, 200):
        expected = sorted(range(200), key=lambda r: (-scores[r], r))[:k]
        assert top_k(scores, k).tolist() == expected


def test_summaries_count_the_keys_each_head_attends_to_most():
    """Head 0 of every match attends to [CLS] (position 0), head 1 to the next word: classes and UPOS counted."""
    vectors = np.eye(3)[[0, 0, 1]]
    argmax = np.array([[0, 2], [0, 3], [0, 2]], np.int16)  # positions: 2 = word 1, 3 = word 2 (m = 3 words)
    index = _hand_index([_hand_input(1, vectors, ["DET", "NOUN", "VERB"], argmax)])
    result = index.search(_query([1.0, 0.0, 0.0]), k=2)
    assert [(m.position, m.upos) for m in result.matches] == [(1, "DET"), (2, "NOUN")]
    head0, head1 = result.summary.attends_to
    assert head0.head == 0 and head0.classes == {"cls": 2} and head0.upos == {"[CLS]": 2}
    assert head1.classes == {"other": 2} and head1.upos == {"NOUN": 1, "VERB": 1}


def test_merged_halves_are_the_corpus_in_order():
    """Ray merges shards of batches: IndexRows halves merge back into line order, whichever half comes first."""
    parts = [_hand_input(line, np.eye(2), ["X", "X"]) for line in (3, 8, 15, 20)]
    a, b = IndexRows(), IndexRows()
    for row in (parts[1], parts[3]):
        a.add(row)
    for row in (parts[0], parts[2]):
        b.add(row)
    assert [r.line for r in a.merge(b).inputs] == [3, 8, 15, 20] == [r.line for r in b.merge(a).inputs]


# ---------------------------------------------------------------------------------------- the model's own vectors


def test_top_k_equals_brute_force_cosine_on_the_models_vectors(family_model):
    """A layer's output (the embedding output: the slow test below) against a brute-force cosine."""
    check_top_k_equals_brute_force_cosine(family_model, 1)


def _contexts_from_weights(lm, items, layer: int) -> np.ndarray:
    """BERT's c[l, h, t] = sum_j A[l, h, t, j] (x_j W_V^h + b_V^h), x = hidden_states[l], from the value weights and
    the model's attention, concatenated over every head; non-special positions of every input, float64."""
    value = lm.encoder.encoder.layer[layer].attention.self.value
    w, b = value.weight.detach().double().numpy(), value.bias.detach().double().numpy()
    h, d = lm.facts.n_heads, lm.facts.head_dim
    rows = []
    for item in items:
        enc = encode(lm, item.text_a, item.text_b)
        with torch.no_grad():
            out = lm.encoder(**model_inputs(lm, [enc]), output_hidden_states=True, output_attentions=True)
        x = out.hidden_states[layer][0].double().numpy()
        a = out.attentions[layer][0].double().numpy()  # [heads, n, n]
        v = (x @ w.T + b).reshape(enc.n, h, d).transpose(1, 0, 2)  # [heads, n, d]
        c = np.einsum("hij,hjd->ihd", a, v).reshape(enc.n, h * d)
        rows += [c[t] for t in np.flatnonzero(~np.asarray(enc.special_mask))]
    return np.array(rows)


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_heads_mode_with_every_head_is_the_concatenated_context_vectors(tiny_model):
    lm = tiny_model
    items = sentences(lm, 4)
    index = build_index(lm, items, IndexOptions(layer=1, heads="all", dtype="float32"), batch_size=3)
    expected = _contexts_from_weights(lm, items, 1)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(index.vectors, expected, atol=2e-6)
    d = lm.facts.head_dim
    parts = np.linalg.norm(expected.reshape(len(expected), -1, d), axis=2)
    np.testing.assert_allclose(index.head_norms, parts, atol=2e-6)


def test_heads_mode_of_every_family_and_a_subset_of_heads(family_model):
    """For every family: the stored rows are the context vectors that runner's values and attention give
    (c = A v per head); a search over heads {1, 3} scores the cosine of those heads' blocks alone."""
    lm = family_model
    items = sentences(lm, 3)
    index = build_index(lm, items, IndexOptions(layer=0, heads="all", dtype="float32"), batch_size=2)
    rows = []
    for item in items:
        r = run(lm, item.text_a, capture_qk=False, capture_norms=True)
        c = np.einsum("hij,hjd->ihd", r.attentions[0], r.values[0]).reshape(r.n, -1).astype(np.float64)
        rows += [c[t] for t in np.flatnonzero(~r.special_mask)]
    full = np.array(rows)
    np.testing.assert_allclose(index.vectors, full / np.linalg.norm(full, axis=1, keepdims=True), atol=1e-5)
    query = query_of(lm, QUERY, None, 1, index.options)
    d = lm.facts.head_dim
    cols = np.r_[d : 2 * d, 3 * d : 4 * d]
    q = query.vector[cols]
    brute = full[:, cols] @ q / (np.linalg.norm(full[:, cols], axis=1) * np.linalg.norm(q))
    result = index.search(query, k=5, heads=[3, 1])
    assert result.heads == [1, 3] and [t.head for t in result.summary.attends_to] == [1, 3]
    np.testing.assert_allclose([m.score for m in result.matches], np.sort(brute)[::-1][:5], atol=1e-5)


def test_float16_scores_agree_with_float32_within_the_bound(minilm):
    """METHODS §16: float16 vectors give scores within 2e-3 of float32 (here within float16's unit roundoff, since
    the query stays float32 and |sum (x16 - x) q| <= u sum |x| |q| <= u), and the rankings differ only among
    candidates whose float32 scores are within that bound of each other."""
    items = read_corpus(CLASSROOM_SINGLE)[:30]
    options = IndexOptions(layer=3)
    half = build_index(minilm, items, options)
    full = build_index(minilm, items, IndexOptions(layer=3, dtype="float32"))
    assert half.options.dtype == "float16" and not np.array_equal(half.vectors, full.vectors)
    np.testing.assert_array_equal(half.vectors.astype(np.float16).astype(np.float32), half.vectors)  # float16 values
    query = query_of(minilm, QUERY, None, 2, options)
    s16, s32 = candidate_scores(half, query), candidate_scores(full, query)
    assert np.abs(s16 - s32).max() <= FLOAT16_ROUNDING * 1.01 < FLOAT16_SCORE_BOUND
    top16, top32 = half.search(query, k=20), full.search(query, k=20)
    for a, b in zip(top16.matches, top32.matches):
        if (a.input, a.position) != (b.input, b.position):
            row = np.flatnonzero((full.input == a.input) & (full.position == a.position))[0]
            assert abs(s32[row] - b.score) <= FLOAT16_SCORE_BOUND


def test_summaries_count_what_the_matches_are(minilm):
    """Each match's UPOS and DEPREL are its word's in the treebank; each head's key attended to most is the argmax
    of the model's own attention row of the match, recounted here by class and UPOS."""
    items = list(ewt_dev_head())
    result = search_corpus(minilm, QUERY, 1, items, layer=2, k=15)
    upos, deprel = {}, {}
    per_head: list[dict] = [{} for _ in range(minilm.facts.n_heads)]
    for m in result.matches:
        sentence = items[m.input]
        r = run(minilm, sentence.text_a, capture_qk=False)
        word = r.word_ids[m.position]
        assert r.tokens[m.position] == m.token and sentence.words[word] == m.word
        upos[sentence.upos[word]] = upos.get(sentence.upos[word], 0) + 1
        deprel[sentence.deprels[word]] = deprel.get(sentence.deprels[word], 0) + 1
        for h in range(minilm.facts.n_heads):
            key = int(np.argmax(r.attentions[2, h, m.position]))
            kind = "cls" if r.cls_mask[key] else "sep" if r.sep_mask[key] else None
            kind = kind or ("punct" if r.tokens[key] in (".", ",") else "other")
            label = r.tokens[key] if r.word_ids[key] is None else sentence.upos[r.word_ids[key]]
            per_head[h].setdefault("classes", {}).setdefault(kind, 0)
            per_head[h]["classes"][kind] += 1
            per_head[h].setdefault("upos", {}).setdefault(label, 0)
            per_head[h]["upos"][label] += 1
    assert result.summary.upos == dict(sorted(upos.items(), key=lambda kv: (-kv[1], kv[0])))
    assert result.summary.deprel == dict(sorted(deprel.items(), key=lambda kv: (-kv[1], kv[0])))
    for h, targets in enumerate(result.summary.attends_to):
        assert targets.head == h and set(targets.classes) <= set(CLASS_KEYS)
        assert targets.classes == per_head[h]["classes"] and targets.upos == per_head[h]["upos"]


def test_a_text_corpus_has_no_gold_summaries(tiny_model):
    result = search_corpus(tiny_model, QUERY, 1, [CorpusInput("A cat sat."), CorpusInput("Dogs run.")], layer=0, k=3)
    assert result.summary.upos is None and result.summary.deprel is None
    assert all(t.upos is None and sum(t.classes.values()) == 3 for t in result.summary.attends_to)
    assert len(result.matches) == 3 and all(m.upos is None for m in result.matches)


def test_the_embedding_output_has_no_attention_summary(tiny_model):
    result = search_corpus(tiny_model, QUERY, 1, ["A cat sat."], embeddings=True, k=2)
    assert result.summary.attends_to == [] and result.index["options"]["embeddings"] is True


# ---------------------------------------------------------------------------------------- files and refusals


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_an_index_file_is_refused_for_another_model_corpus_or_options(tiny_model, tmp_path, minilm):
    index = build_index(tiny_model, CLASSROOM_SINGLE, IndexOptions(layer=1, heads="0,2"), limit=5)
    path = tmp_path / "tiny.npz"
    index.save(path)
    back = CorpusIndex.load(path)
    np.testing.assert_array_equal(back.vectors, index.vectors)
    assert back.meta["corpus"]["sha1"] == index.meta["corpus"]["sha1"] and back.heads == (0, 2)
    back.check(tiny_model, index.meta["corpus"]["sha1"], IndexOptions(layer=1, heads="2"), heads=[2])
    with pytest.raises(IndexFileError, match=f"of the model {tiny_model.facts.name}, not of all-MiniLM-L6-v2"):
        back.check(minilm)
    with pytest.raises(IndexFileError, match="not of the corpus given"):
        back.check(tiny_model, "0" * 40)
    with pytest.raises(IndexFileError, match=r"layer 1 \(asked: 0"):
        back.check(tiny_model, options=IndexOptions(layer=0, heads="0"))
    with pytest.raises(IndexFileError, match=r"mode heads \(asked: hidden"):
        back.check(tiny_model, options=IndexOptions(layer=1))
    with pytest.raises(IndexFileError, match="head 1 is not among them"):
        back.check(heads=[1, 2])
    (tmp_path / "bad.npz").write_bytes(b"not an index")
    with pytest.raises(IndexFileError, match="not an index file"):
        CorpusIndex.load(tmp_path / "bad.npz")
    with pytest.raises(IndexFileError, match="no such index file"):
        CorpusIndex.load(tmp_path / "missing.npz")


def test_bad_layers_heads_and_positions_say_why(tiny_model):
    with pytest.raises(SearchError, match=r"layer 5 is not a layer of .*: it has 2 \(0-1\)"):
        build_index(tiny_model, ["A cat."], IndexOptions(layer=5))
    with pytest.raises(SearchError, match="head 9 is not a head"):
        build_index(tiny_model, ["A cat."], IndexOptions(layer=0, heads="1,9"))
    with pytest.raises(ValueError, match="token 40 is not a position of the query: it has"):
        query_of(tiny_model, QUERY, None, 40, IndexOptions())
    with pytest.raises(ValueError, match="heads must be 0-based head numbers"):
        IndexOptions(heads="1,x")
    with pytest.raises(ValueError, match="the embedding output has no heads"):
        IndexOptions(embeddings=True, heads="1")


def test_heads_mode_of_an_unknown_family_is_refused_in_words(tmp_path):
    from transformers import MegatronBertConfig, MegatronBertForMaskedLM

    from support.models import bert_tokenizer

    tokenizer = bert_tokenizer()
    config = MegatronBertConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    MegatronBertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    with pytest.raises(SearchError, match="search by heads is not available for 'megatron-bert' models"):
        build_index(lm, ["A cat."], IndexOptions(layer=0, heads="1"))
    assert len(search_corpus(lm, QUERY, 1, ["A cat sat."], layer=1, k=2).matches) == 2  # hidden state works


# ---------------------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_index_and_search_commands(tiny_model_dir, tmp_path):
    """`index --out` then `search --index` print the same matches as `search --conllu`; the file is refused for
    another corpus or layer, bad positions and layers are one `error:` line with exit 2."""
    import json

    model = ["--model", str(tiny_model_dir), "--json"]
    small = tmp_path / "ewt-12.conllu"  # the first 12 sentences: the commands read the file each time
    small.write_text("\n\n".join(EWT_DEV.read_text(encoding="utf-8").split("\n\n")[:12]) + "\n\n", encoding="utf-8")
    corpus = ["--conllu", str(small), "--dtype", "float32"]  # float32: the same order both ways
    query = ["--text", QUERY, "--token", "2", "--k", "4"]
    ran = run_cli("search", *corpus, *query, "--layer", "1", "--heads", "0,3", *model)
    assert ran.code == 0, ran.err
    direct = json.loads(ran.out)
    assert set(direct) == COMMAND_KEYS["search"]
    assert [sorted(m) for m in direct["matches"]] == [
        ["deprel", "input", "position", "score", "token", "upos", "word"]
    ] * 4
    assert direct["heads"] == [0, 3] and direct["summary"]["n"] == 4 and direct["query"]["piece"] == "cat"
    assert sum(direct["summary"]["upos"].values()) == 4 and len(direct["summary"]["attends_to"]) == 2
    path = tmp_path / "ewt.npz"
    ran = run_cli("index", *corpus, "--layer", "1", "--heads", "all", "--out", str(path), *model)
    assert ran.code == 0, ran.err
    written = json.loads(ran.out)
    assert set(written) == COMMAND_KEYS["index"]
    assert (
        written["n_inputs"] == 12
        and written["options"]["heads"] == "0,1,2,3"
        and written["bytes"] == path.stat().st_size
    )
    ran = run_cli("search", "--index", str(path), *query, "--layer", "1", "--heads", "3,0", *model)
    assert ran.code == 0, ran.err
    again = json.loads(ran.out)
    assert [(m["input"], m["position"]) for m in again["matches"]] == [
        (m["input"], m["position"]) for m in direct["matches"]
    ]
    np.testing.assert_allclose(
        [m["score"] for m in again["matches"]], [m["score"] for m in direct["matches"]], atol=1e-6
    )
    refusals = {
        ("--corpus", str(CLASSROOM_SINGLE), "--layer", "1"): "not of the corpus given",
        ("--layer", "0"): r"layer 1 (asked: 0)",
        ("--embeddings",): "embeddings False (asked: True)",
    }
    for extra, message in refusals.items():
        ran = run_cli("search", "--index", str(path), *query, *extra, *model)
        assert ran.code == 2 and ran.err.startswith("error: ") and message in ran.err and ran.err.count("\n") == 1, (
            ran.err
        )
    for args, message in [
        ((*corpus, "--text", QUERY, "--token", "99", "--layer", "0"), "token 99 is not a position of the query"),
        ((*corpus, *query, "--layer", "7"), "layer 7 is not a layer of"),
        ((*corpus, *query, "--layer", "0", "--heads", "8"), "head 8 is not a head of"),
        ((*corpus, *query, "--embeddings", "--heads", "1"), "the embedding output has no heads"),
        ((*query, "--layer", "0"), "give --corpus, --conllu or --index"),
        (("--index", str(tmp_path / "none.npz"), *query), "no such index file"),
    ]:
        ran = run_cli("search", *args, *model)
        assert ran.code == 2 and ran.err.startswith("error: ") and message in ran.err and ran.err.count("\n") == 1, (
            ran.err
        )
    ran = run_cli("index", *corpus, "--out", str(path), *model)
    assert ran.code == 2 and "one of the arguments --layer --embeddings is required" in ran.err


# ---------- slow tests


@pytest.mark.slow
def test_top_k_of_the_embedding_output_equals_brute_force_cosine(family_model):
    """The embedding output (a layer's output: test_search.py) against a brute-force cosine."""
    check_top_k_equals_brute_force_cosine(family_model, None)
