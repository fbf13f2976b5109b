"""Dependency-head accuracy (METHODS section 7) on hand-built sentences and the deps command on EWT dev (the page:
app/test_deps_page.py)."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.analyses import deps
from attnlib.analyses.deps import CLARK_TABLE1, DependencyCounts, best_offset_baseline, predict_heads, sentence_word_map
from attnlib.analyses.registry import analyse
from attnlib.core.corpus import Sentence
from attnlib.core.runner import RunResult
from attnlib.results.shipped import CHECKOUT, EWT_DEV
from support.cli import cli_json, run_cli

# ---------------------------------------------------------------------------------------------------------------
# Sentence 1: "The strawberries ripen", with strawberries split into two pieces.
# Tokens [CLS] the straw ##berries ripen [SEP]; gold heads The->2 (det), strawberries->3 (nsubj), ripen->0 (root).
# Attention in sixteenths (exact in float32), one layer, two heads; rows are query tokens.
S1 = Sentence(
    ["The", "strawberries", "ripen"], None, 1, heads=[2, 3, 0], deprels=["det", "nsubj", "root"], sent_id="s1"
)
S1_WORD_IDS = [None, 0, 1, 1, 2, None]
S1_HEAD0 = (
    np.array(
        [
            [16, 0, 0, 0, 0, 0],  # [CLS]
            [2, 0, 3, 3, 5, 3],  # the: straw + ##berries = 6 beats ripen = 5 only once the columns are summed
            [2, 2, 3, 0, 8, 1],  # straw
            [2, 8, 0, 3, 2, 1],  # ##berries
            [4, 1, 4, 4, 2, 1],  # ripen
            [0, 0, 0, 0, 0, 16],  # [SEP]
        ]
    )
    / 16
)
S1_HEAD1 = (
    np.array(
        [  # each token attends to the token before it ([CLS] to itself)
            [16, 0, 0, 0, 0, 0],
            [16, 0, 0, 0, 0, 0],
            [0, 16, 0, 0, 0, 0],
            [0, 0, 16, 0, 0, 0],
            [0, 0, 0, 16, 0, 0],
            [0, 0, 0, 0, 16, 0],
        ]
    )
    / 16
)
# Word-level map of head 0 by hand (mean rule), units [CLS] The strawberries ripen [SEP]:
#   The row          = [2, 0, 3+3, 5, 3]                                   = [2, 0, 6, 5, 3]
#   strawberries row = mean([2, 2, 3+0, 8, 1], [2, 8, 0+3, 2, 1])           = [2, 5, 3, 5, 1]
#   ripen row        = [4, 1, 4+4, 2, 1]                                   = [4, 1, 8, 2, 1]
S1_HEAD0_WORDS = np.array([[16, 0, 0, 0, 0], [2, 0, 6, 5, 3], [2, 5, 3, 5, 1], [4, 1, 8, 2, 1], [0, 0, 0, 0, 16]]) / 16
# Predictions (1-based), words only, diagonal zeroed; ties go to the lowest index:
#   head 0 dep->head: The -> 2 (6 > 5); strawberries -> 1 (The 5 ties ripen 5: lowest wins); ripen -> 2.
#   head 0 head<-dep: column The [., 5, 1] -> 2; column strawberries [6, ., 8] -> 3; column ripen [5, 5, .] -> 1 (tie).
#   head 1 rows: The [0, 0, 0]; strawberries mean([1, 0, 0], [0, 1, 0]) = [8, 8, 0]/16; ripen [0, 16, 0]/16.
#   head 1 dep->head: The -> 1 (all zero); strawberries -> 1 (diagonal zeroed); ripen -> 2.
#   head 1 head<-dep: column The [., 8, 0] -> 2; column strawberries [0, ., 16] -> 3; column ripen [0, 0, .] -> 1.
S1_PREDICTIONS = {  # (head, direction) -> predicted heads
    (0, 0): [2, 1, 2],
    (0, 1): [2, 3, 1],
    (1, 0): [1, 1, 2],
    (1, 1): [2, 3, 1],
}

# Sentence 2: "a b c", one piece each, a->2 (amod), b->3 (amod), c root. Head 0: a looks at b, b and c look at a;
# head 1 looks only at [CLS]. Fixed offset +1 finds both amod arcs, no head finds more than one: the baseline wins.
S2 = Sentence(["a", "b", "c"], None, 9, heads=[2, 3, 0], deprels=["amod", "amod", "root"], sent_id="s2")
S2_WORD_IDS = [None, 0, 1, 2, None]
S2_HEAD0 = np.array([[1, 0, 0, 0, 0], [0, 0, 1, 0, 0], [0, 1, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 1]], float)
S2_HEAD1 = np.array([[1, 0, 0, 0, 0]] * 5, float)
# head 0 dep->head: a -> 2 (hit), b -> 1, c -> 1; head<-dep: column a [., 1, 1] -> 2 (hit), column b [1, ., 0] -> 1,
# column c [0, 0, .] -> 1. head 1: every word row is zero -> every prediction is word 1 (a miss for every word).


def _result(word_ids, heads_maps, words, truncated=False) -> RunResult:
    """A RunResult with hand-made attention [1 layer, heads, n, n]."""
    n = len(word_ids)
    special = np.array([w is None for w in word_ids])
    cls = np.zeros(n, bool)
    cls[0] = True
    return RunResult(
        input_ids=list(range(n)),
        token_type_ids=None,
        tokens=[f"t{i}" for i in range(n)],
        segments=np.zeros(n, np.int8),
        word_ids=list(word_ids),
        words=list(words),
        cls_mask=cls,
        sep_mask=special & ~cls,
        special_mask=special,
        truncated=truncated,
        n_tokens_full=n,
        attentions=np.stack(heads_maps)[None].astype(np.float32),
    )


R1 = _result(S1_WORD_IDS, [S1_HEAD0, S1_HEAD1], S1.words)
R2 = _result(S2_WORD_IDS, [S2_HEAD0, S2_HEAD1], S2.words)


def _counts(*pairs) -> DependencyCounts:
    counts = DependencyCounts(1, 2)
    for result, sentence in pairs:
        counts.add(result, sentence)
    return counts


def test_word_map_of_split_word_by_hand():
    word_map, present = sentence_word_map(R1, S1.words, "mean")
    assert word_map.shape == (1, 2, 5, 5) and present.all()
    np.testing.assert_allclose(word_map[0, 0], S1_HEAD0_WORDS, atol=1e-7)


def test_predictions_by_hand_with_ties_to_lowest_index():
    word_map, _ = sentence_word_map(R1, S1.words, "mean")
    predicted = predict_heads(word_map)  # [direction, layer, head, word]
    for (head, direction), expected in S1_PREDICTIONS.items():
        assert predicted[direction, 0, head].tolist() == expected, (head, direction)


def test_row_rule_first_uses_first_piece():
    # with "first", strawberries' row is straw's: [2, 2, 3, 8, 1] -> ripen (3), its gold head
    word_map, _ = sentence_word_map(R1, S1.words, "first")
    assert predict_heads(word_map)[0, 0, 0].tolist() == [2, 3, 2]


def test_predict_heads_tie_and_root_are_never_right():
    w = np.zeros((4, 4))  # [CLS] x y [SEP]: both words give everything to [CLS]
    w[:, 0] = 1
    assert predict_heads(w).tolist() == [[1, 1], [1, 1]]  # every row and column ties at 0: lowest index, word 1


def test_head_on_sentence_by_hand():
    from attnlib.analyses.deps import ALL, head_on_sentence

    # "The cat slept": The -det-> cat, cat -nsubj-> slept (root). One layer, two heads; word units 1..3.
    sentence = Sentence(text_a=["The", "cat", "slept"], heads=[2, 3, 0], deprels=["det", "nsubj", "root"])
    maps = np.zeros((1, 2, 5, 5))
    maps[0, 0, 1, 2] = maps[0, 0, 2, 3] = maps[0, 0, 3, 1] = 1.0  # head 0: The->cat, cat->slept, slept->The
    maps[0, 1, 1, 3] = maps[0, 1, 2, 1] = maps[0, 1, 3, 2] = 1.0  # head 1: The->slept, cat->The, slept->cat
    present = np.ones(3, dtype=bool)
    det = head_on_sentence(maps, present, sentence, "det", 0, 0, "dep->head")
    assert (
        det.predicted.tolist() == [2, 3, 1] and det.focus == [True, False, False] and (det.hits, det.n_arcs) == (1, 1)
    )
    every = head_on_sentence(maps, present, sentence, ALL, 0, 0, "dep->head")
    assert (every.hits, every.n_arcs) == (2, 3)  # the root's head (0) is never predicted
    # head<-dep: each word predicts the word whose row gives it most attention (the column maximum)
    column = head_on_sentence(maps, present, sentence, "nsubj", 0, 1, "head<-dep")
    assert column.predicted.tolist() == [2, 3, 1] and (column.hits, column.n_arcs) == (1, 1)
    missing = head_on_sentence(maps, np.array([True, False, True]), sentence, ALL, 0, 0, "dep->head")
    assert missing.predicted.tolist() == [2, -1, 1] and missing.hits == 1  # a word without pieces is never right


def test_table_by_hand():
    table = _counts((R1, S1), (R2, S2)).table(min_count=1)
    rows = {r.relation: r for r in table.rows}
    assert [r.relation for r in table.rows] == ["all", "amod", "det", "nsubj"]  # by frequency, then name; no root
    assert (table.n_sentences, table.n_words, table.n_skipped) == (2, 6, 0)
    # all: hits per (head, direction): S1 (0,0)=1 (0,1)=2 (1,0)=0 (1,1)=2; S2 (0,0)=1 (0,1)=1 -> (0,1) with 3 of 6
    assert (rows["all"].layer, rows["all"].head, rows["all"].direction) == (0, 0, "head<-dep")
    assert rows["all"].accuracy == pytest.approx(3 / 6)
    # offset +1 finds The->2, strawberries->3, a->2, b->3: 4 of 6
    assert (rows["all"].baseline_offset, rows["all"].baseline_accuracy) == (1, pytest.approx(4 / 6))
    # det: three (head, direction) pairs find it; the lowest head and then dep->head wins
    assert (rows["det"].head, rows["det"].direction, rows["det"].accuracy) == (0, "dep->head", 1.0)
    # nsubj: only the head<-dep direction finds strawberries -> ripen; head 0 before head 1
    assert (rows["nsubj"].head, rows["nsubj"].direction, rows["nsubj"].accuracy) == (0, "head<-dep", 1.0)
    # amod: the baseline wins, 2 of 2 against the best head's 1 of 2
    amod = rows["amod"]
    assert (amod.count, amod.head, amod.direction, amod.accuracy) == (2, 0, "dep->head", 0.5)
    assert (amod.baseline_offset, amod.baseline_accuracy, amod.margin) == (1, 1.0, -0.5)


def test_min_count_and_accuracy_grid():
    counts = _counts((R1, S1), (R2, S2))
    assert [r.relation for r in counts.table(min_count=2).rows] == ["all", "amod"]
    grid = counts.accuracy_grid("amod")
    np.testing.assert_allclose(grid[0], [[0.5, 0.5], [0.0, 0.0]])  # [head, direction]
    assert np.isnan(counts.accuracy_grid("det", half=1 - deps.sentence_half(S1))).all()


def test_best_offset_baseline_function():
    base = best_offset_baseline([S1.heads, S2.heads], [S1.deprels, S2.deprels], "amod")
    assert (base.offset, base.accuracy, base.count) == (1, 1.0, 2)
    # heads 3, 1, 2 of a three-word sentence: offsets -3..+3 find nothing, except +2 (1 -> 3) and -1 (2 -> 1, 3 -> 2)
    base = best_offset_baseline([[3, 1, 2]], [["x", "x", "x"]])
    assert (base.offset, base.accuracy) == (-1, pytest.approx(2 / 3))
    # a tie between offsets goes to the first of OFFSETS (-3 before +3)
    assert best_offset_baseline([[4, 0, 0, 1]], [["x"] * 4]).offset == -3


def test_merge_equals_whole_and_truncated_are_counted():
    whole = _counts((R1, S1), (R2, S2))
    merged = _counts((R1, S1)).merge(_counts((R2, S2)))
    assert merged.table(min_count=1) == whole.table(min_count=1)
    for name in ("totals", "head_hits", "offset_hits"):
        order = [merged.relations.index(r) for r in whole.relations]
        np.testing.assert_array_equal(getattr(merged, name)[:, order], getattr(whole, name))
    long = _result(S1_WORD_IDS, [S1_HEAD0, S1_HEAD1], S1.words, truncated=True)
    counts = _counts((long, S1), (R2, S2))
    table = counts.table(min_count=1)
    assert (table.n_sentences, table.n_words, table.n_skipped) == (1, 3, 1)
    assert counts.merge(whole).n_skipped == 1


def test_held_out_selects_on_half_a_and_reports_on_half_b(monkeypatch):
    monkeypatch.setattr(deps, "sentence_half", lambda item: 0 if item.sent_id == "s1" else 1)
    table = _counts((R1, S1), (R2, S2)).table(min_count=1, held_out=True)
    # chosen on S1: (head 0, head<-dep) for "all" (ties head 1, lower head wins), offset +1; scored on S2:
    # head 0 head<-dep finds a->2 only (1 of 3), offset +1 finds 2 of 3. amod is not in half A, det/nsubj not in B.
    assert [r.relation for r in table.rows] == ["all"]
    row = table.rows[0]
    assert (row.count, row.layer, row.head, row.direction) == (3, 0, 0, "head<-dep")
    assert (row.accuracy, row.baseline_offset, row.baseline_accuracy) == (pytest.approx(1 / 3), 1, pytest.approx(2 / 3))
    assert (table.n_select_sentences, table.n_report_sentences) == (1, 1)


def test_sentence_half_is_fixed_by_the_words():
    halves = [deps.sentence_half(Sentence([f"w{i}", "x"], heads=[0, 1], deprels=["root", "dep"])) for i in range(400)]
    assert 150 < sum(halves) < 250  # both halves are used
    assert deps.sentence_half(S1) == deps.sentence_half(Sentence(list(S1.words), None, 99))


def test_word_without_pieces_is_never_right():
    # "a <zero-width> b": the tokenizer gave the middle word no piece; its row and column are zero, its prediction -1
    sentence = Sentence(["a", "\u200b", "b"], None, 1, heads=[0, 1, 2], deprels=["root", "dep", "dep"])
    attn = np.array([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], float)
    result = _result([None, 0, 1, None], [attn, attn], ["a", "b"])
    word_map, present = sentence_word_map(result, sentence.words)
    assert present.tolist() == [True, False, True] and word_map.shape == (1, 2, 5, 5)
    np.testing.assert_allclose(word_map[0, 0, 2], 0)
    np.testing.assert_allclose(word_map[0, 0, :, 2], 0)
    counts = _counts((result, sentence))
    # b -> a (word 1) would be wrong anyway (gold 2); the missing word's head 1 must not be found
    assert counts.accuracy_grid("dep")[0, 0].tolist() == [0.0, 0.0]


def test_real_tokenizer_word_without_pieces(minilm):
    from attnlib.core.runner import run

    words = ["a", "\u200b", "b"]  # BERT's tokenizer gives the zero-width space no piece
    result = run(minilm, words, capture_qk=False)
    assert result.words == ["a", "b"]
    word_map, present = sentence_word_map(result, words)
    assert word_map.shape[-1] == 5 and present.tolist() == [True, False, True]


def test_tiny_models_word_maps_and_skips(tiny_model):
    from attnlib.core.runner import run

    words = ["The", "gardener", "watered", "the", "strawberries", "."]
    result = run(tiny_model, words, capture_qk=False)
    word_map, present = sentence_word_map(result, words)
    assert word_map.shape[-2:] == (len(words) + 2, len(words) + 2) and present.all()
    assert result.cls_mask[0] and result.sep_mask[-1]  # [CLS]/<s> first, [SEP]/</s> last
    np.testing.assert_allclose(word_map.sum(-1), 1.0, atol=1e-5)
    short = Sentence(words, None, 1, heads=[2, 3, 0, 5, 3, 3], deprels=["det", "nsubj", "root", "det", "obj", "punct"])
    long = Sentence(["word"] * 200, None, 2, heads=[0] + [1] * 199, deprels=["root"] + ["dep"] * 199)
    counts = analyse("deps", tiny_model, conllu=[short, long, short]).result.counts
    table = counts.table(min_count=1)
    assert (table.n_sentences, table.n_words, table.n_skipped) == (2, 12, 1)
    assert table.rows[0].relation == "all" and table.rows[0].count == 12


# ---------------------------------------------------------------------------------------------------------------
# The command line on EWT dev, against an independent computation: the conllu package reads the file, plain loops
# build word-level maps in float64 and pick heads; only the forward pass is shared (run_batches, as the engine runs it).


def test_cli_refuses_bad_input(tmp_path):

    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tword\n")
    ran = run_cli("deps", "--conllu", str(bad), "--json")
    assert ran.code == 2, ran.err
    assert "columns" in ran.err


# ---------------------------------------------------------------------------------------------------------------
# The page


# ---------- slow tests


def _independent_table(lm, path, limit, min_count):
    import conllu

    from attnlib.core.runner import run_batches

    sentences = []
    with open(path, encoding="utf-8") as f:
        for tokenlist in conllu.parse_incr(f):
            words = [t for t in tokenlist if isinstance(t["id"], int)]
            sentences.append(([t["form"] for t in words], [t["head"] for t in words], [t["deprel"] for t in words]))
            if len(sentences) == limit:
                break
    offsets = [-3, -2, -1, 1, 2, 3]
    L, H = lm.facts.n_layers, lm.facts.n_heads
    total, hits, base = {}, {}, {}
    results = run_batches(lm, ((words, None) for words, _, _ in sentences), batch_size=32)
    for (words, heads, rels), r in zip(sentences, results):
        m = len(words)
        units = [[p for p, w in enumerate(r.word_ids) if w == k] for k in range(m)]
        for rel in rels:
            for key in (rel, "all"):
                total[key] = total.get(key, 0) + 1
        for i, (rel, h) in enumerate(zip(rels, heads)):
            for k in offsets:
                if 1 <= i + 1 + k <= m and i + 1 + k == h:
                    for key in (rel, "all"):
                        base[key, k] = base.get((key, k), 0) + 1
        for layer in range(L):
            for head in range(H):
                a = r.attentions[layer, head].astype(np.float64)
                # word i -> word j: mean over i's pieces of the sum over j's pieces
                to_word = np.stack([a[:, pieces].sum(axis=1) for pieces in units], axis=1)
                w = np.stack([to_word[pieces].mean(axis=0) for pieces in units])
                np.fill_diagonal(w, 0.0)
                for d, grid in enumerate((w.tolist(), w.T.tolist())):
                    for i in range(m):
                        best = 0
                        for j in range(1, m):
                            if grid[i][j] > grid[i][best]:
                                best = j
                        if best + 1 == heads[i]:
                            for key in (rels[i], "all"):
                                hits[key, layer, head, d] = hits.get((key, layer, head, d), 0) + 1
    rows = {}
    for key, count in total.items():
        if key != "all" and (count < min_count or key in ("root", "punct")):
            continue
        score = max((hits.get((key, l, h, d), 0), -l, -h, -d) for l in range(L) for h in range(H) for d in (0, 1))
        k_best = max(offsets, key=lambda k: (base.get((key, k), 0), -offsets.index(k)))
        rows[key] = dict(
            relation=key,
            count=count,
            layer=-score[1],
            head=-score[2],
            direction=("dep->head", "head<-dep")[-score[3]],
            accuracy=score[0] / count,
            baseline_offset=k_best,
            baseline_accuracy=base.get((key, k_best), 0) / count,
        )
    return len(sentences), sum(len(s[0]) for s in sentences), rows


@pytest.mark.slow
def test_cli_on_ewt_dev_slice_matches_independent_computation(minilm):

    out = cli_json("deps", "--conllu", str(EWT_DEV), "--limit", "40", "--min-count", "15", "--json")
    n_sentences, n_words, expected = _independent_table(minilm, EWT_DEV, 40, 15)
    assert (out["n_sentences"], out["n_words"], out["n_skipped"]) == (n_sentences, n_words, 0)
    assert out["rows"][0]["relation"] == "all"
    assert sorted(r["relation"] for r in out["rows"]) == sorted(expected)
    counts = [r["count"] for r in out["rows"][1:]]
    assert counts == sorted(counts, reverse=True)
    for row in out["rows"]:
        want = expected[row["relation"]]
        assert row == pytest.approx(want), row["relation"]


def test_clark_table1_holds_what_the_repositorys_text_of_the_paper_says():
    """CLARK_TABLE1 (shown beside the user's model) against docs/papers/clark2019.md, the paper's text as the
    repository ships it (notes that quote it; Table 1's rows are not among them): the four relations it names with
    best heads over 75% accuracy, and the head it names for direct objects."""
    text = " ".join((CHECKOUT / "docs" / "papers" / "clark2019.md").read_text(encoding="utf-8").split())
    rows = {relation: (head, accuracy) for relation, _, head, accuracy, _, _ in CLARK_TABLE1}
    named = "direct objects of verbs, determiners of nouns, objects of prepositions, and objects of possessive pronouns"
    assert f"{named} with >75% accuracy" in text
    assert [rows[relation][1] > 75 for relation in ("dobj", "det", "pobj", "poss")] == [True] * 4
    assert "in head 8-10 direct objects attend to their verbs" in text and rows["dobj"][0] == "8-10"


def test_the_pages_table_is_the_rows_in_percent_heads_from_one():
    """DependencyTable.shown_frame (the Dependency heads page's table): heads 1-based, accuracies and the margin in
    percent, the offset signed; a decoder's ceilings (share of dependents whose head a causal map sees) last."""
    rows = [
        deps.DependencyRow("nsubj", 10, 0, 2, "dep->head", 0.5, -1, 0.25),
        deps.DependencyRow("obj", 4, 3, 0, "head<-dep", 0.75, 2, 0.5, {"dep->head": 0.25, "head<-dep": 1.0}),
    ]
    frame = deps.DependencyTable(rows, 2, 14, 0).shown_frame()
    assert (
        list(frame["best head"]) == ["1-3", "4-1"] and list(frame["layer"]) == [1, 4] and list(frame["head"]) == [3, 1]
    )
    assert list(frame["accuracy %"]) == [50.0, 75.0] and list(frame["baseline accuracy %"]) == [25.0, 50.0]
    assert list(frame["margin (points)"]) == [25.0, 25.0] and list(frame["baseline offset"]) == ["-1", "+2"]
    assert list(frame.columns[-2:]) == ["ceiling dep->head %", "ceiling head<-dep %"]
    assert np.isnan(frame["ceiling dep->head %"][0]) and list(frame.iloc[1, -2:]) == [25.0, 100.0]
