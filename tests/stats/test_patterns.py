"""Head finder scores on hand-made attention, the accumulator's merge, ranking, and one run on the packaged model."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.batches import accumulate
from attnlib.core.corpus import CorpusInput, read_text_corpus
from attnlib.core.runner import RunResult, run
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE
from attnlib.stats.patterns import PATTERNS, PatternAccumulator, input_scores, rank_heads, same_word_mask
from support.results import fake_result

P = {name: i for i, name in enumerate(PATTERNS)}


def make_result(tokens, word_ids, words, segments, attentions) -> RunResult:
    """A RunResult built by hand: [CLS]/[SEP] by name, attention [layers, heads, n, n]."""
    return fake_result(attentions, tokens, segments=segments, word_ids=word_ids, words=words)


# [CLS] the cat saw the cat [SEP] : words 0..4, "the" and "cat" each occur twice
TOKENS = ["[CLS]", "the", "cat", "saw", "the", "cat", "[SEP]"]
WORD_IDS = [None, 0, 1, 2, 3, 4, None]
WORDS = ["The", "cat", "saw", "the", "cat"]


def shifted(n: int, k: int) -> np.ndarray:
    """Every row puts all its weight on key i+k, clipped to the ends."""
    a = np.zeros((n, n))
    for i in range(n):
        a[i, min(max(i + k, 0), n - 1)] = 1
    return a


def test_same_word_mask_by_hand():
    r = make_result(TOKENS, WORD_IDS, WORDS, [0] * 7, np.zeros((1, 1, 7, 7)))
    mask = same_word_mask(r)
    expected = np.zeros((7, 7), bool)
    expected[1, 4] = expected[4, 1] = True  # "The" and "the" (case-folded)
    expected[2, 5] = expected[5, 2] = True
    np.testing.assert_array_equal(mask, expected)


def test_same_word_mask_other_sentence_and_pieces():
    # [CLS] store ##s . [SEP] the store [SEP]: "stores" is one word of two pieces; "." has no letter
    tokens = ["[CLS]", "store", "##s", ".", "[SEP]", "the", "store", "[SEP]"]
    word_ids = [None, 0, 0, 1, None, 2, 3, None]
    words = ["store", ".", "the", "store"]
    r = make_result(tokens, word_ids, words, [0, 0, 0, 0, 0, 1, 1, 1], np.zeros((1, 1, 8, 8)))
    both = same_word_mask(r)
    assert both[1, 6] and both[2, 6] and both[6, 1] and both[6, 2]
    assert not both[1, 2] and not both[3].any()  # pieces of one word are not "another occurrence"
    other = same_word_mask(r, other_sentence=True)
    np.testing.assert_array_equal(other, both)  # every repeat here crosses the sentences
    single = make_result(TOKENS, WORD_IDS, WORDS, [0] * 7, np.zeros((1, 1, 7, 7)))
    assert not same_word_mask(single, other_sentence=True).any()


def test_input_scores_by_hand():
    n = 7
    heads = np.stack([shifted(n, 1), shifted(n, -1), np.eye(n), np.full((n, n), 1 / n)])
    heads = np.concatenate([heads, np.zeros((1, n, n))])
    heads[4][:, 0] = 0.5
    heads[4][:, 6] = 0.5  # half to [CLS], half to [SEP]
    r = make_result(TOKENS, WORD_IDS, WORDS, [0] * n, heads[None])
    s = input_scores(r)[:, 0]
    # next: rows 0..5 put 1 on i+1, the last row (clipped to itself) adds nothing -> 6/7
    # the uniform head gives 1/7 to each of the 6 next keys; the [CLS]/[SEP] head reaches i+1 only from row 5
    assert s[P["next"]] == pytest.approx([6 / 7, 0, 0, 6 / 49, 0.5 / 7])
    assert s[P["prev"]] == pytest.approx([0, 6 / 7, 0, 6 / 49, 0.5 / 7])
    assert s[P["self"]] == pytest.approx([1 / 7, 1 / 7, 1, 1 / 7, 1 / 7])
    assert s[P["cls"]] == pytest.approx([0, 2 / 7, 1 / 7, 1 / 7, 0.5])  # prev head: rows 0 and 1 land on [CLS]
    assert s[P["sep"]] == pytest.approx([2 / 7, 0, 1 / 7, 1 / 7, 0.5])
    # uniform rows: entropy of the smoothed row is ln 7, so the normalised score is 1
    assert s[P["broad"]][3] == pytest.approx(1.0)
    p = 0.9999 * 0.5 + 0.0001 / n
    q = 0.0001 / n
    assert s[P["broad"]][4] == pytest.approx(-(2 * p * np.log(p) + 5 * q * np.log(q)) / np.log(n))
    # same word: rows 1, 2, 4, 5 have one repeat each; only the uniform head puts weight (1/7) on it
    assert s[P["same_word"]] == pytest.approx([0, 0, 0, 1 / 7, 0])
    assert np.isnan(s[P["same_word_other"]]).all()  # a single sentence has no other sentence


def test_same_word_score_counts_mass_on_other_occurrences():
    n = 7
    a = np.zeros((n, n))
    a[:, 0] = 1
    a[1] = [0, 0, 0, 0, 0.75, 0, 0.25]  # "The" -> "the" 0.75
    a[5] = [0, 0, 0.5, 0, 0, 0.5, 0]  # "cat" -> "cat" 0.5
    r = make_result(TOKENS, WORD_IDS, WORDS, [0] * n, a[None, None])
    # eligible rows 1, 2, 4, 5 -> (0.75 + 0 + 0 + 0.5) / 4
    assert input_scores(r)[P["same_word"], 0, 0] == pytest.approx(1.25 / 4)


def random_results(count: int, seed: int) -> list[RunResult]:
    """Hand-built inputs with random row-stochastic attention, some of them pairs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        a = rng.random((2, 3, 7, 7))
        a /= a.sum(-1, keepdims=True)
        segments = [0, 0, 0, 0, 1, 1, 1] if i % 2 else [0] * 7
        out.append(make_result(TOKENS, WORD_IDS, WORDS, segments, a))
    return out


def test_accumulator_merge_equals_the_whole_and_means_are_over_inputs():
    results = random_results(6, seed=3)
    whole, first, second = (PatternAccumulator(2, 3) for _ in range(3))
    for r in results:
        whole.add(r, CorpusInput("x"))
    for r in results[:2]:
        first.add(r, CorpusInput("x"))
    for r in results[2:]:
        second.add(r, CorpusInput("x"))
    merged = first.merge(second)
    np.testing.assert_allclose(merged.scores(), whole.scores())
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert first.counts[P["self"]] == 2  # merge left its operands alone
    per_input = np.stack([input_scores(r) for r in results])
    np.testing.assert_allclose(whole.scores()[P["next"]], per_input[:, P["next"]].mean(0))
    other = per_input[:, P["same_word_other"]]
    assert whole.counts[P["same_word_other"]] == 3  # the three pairs
    np.testing.assert_allclose(whole.scores()[P["same_word_other"]], np.nanmean(other, axis=0))


def test_rank_heads_orders_by_score_and_breaks_ties_by_position():
    scores = np.full((len(PATTERNS), 2, 3), np.nan)
    scores[P["cls"]] = [[0.1, 0.9, 0.5], [0.9, 0.2, 0.3]]
    picks = [p for p in rank_heads(scores, top=3) if p.pattern == "cls"]
    assert [(p.layer, p.head) for p in picks] == [(0, 1), (1, 0), (0, 2)]
    assert picks[0].label == "1-2" and picks[0].rank == 1 and picks[0].score == pytest.approx(0.9)
    assert {p.pattern for p in rank_heads(scores)} == {"cls"}  # unscored patterns are skipped


def test_head_finder_on_the_packaged_model_agrees_with_a_direct_computation(minilm):
    inputs = read_text_corpus(CLASSROOM_SINGLE)[:4] + read_text_corpus(CLASSROOM_PAIRS)[:4]
    acc = PatternAccumulator(minilm.facts.n_layers, minilm.facts.n_heads)
    assert accumulate(minilm, inputs, [acc], batch_size=4) == 8
    prev = []
    for item in inputs:
        a = run(minilm, item.text_a, item.text_b, capture_qk=False).attentions
        n = a.shape[-1]
        prev.append(sum(a[:, :, i, i - 1] for i in range(1, n)) / n)
    np.testing.assert_allclose(acc.scores()[P["prev"]], np.mean(prev, axis=0), atol=1e-5)
    assert acc.counts[P["same_word_other"]] >= 1
    best = rank_heads(acc.scores(), top=1)
    assert len(best) == len(PATTERNS)
