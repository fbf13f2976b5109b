"""Property-based tests (hypothesis) of the statistics: shares in [0, 1], word-level rows summing to 1,
accumulators that merge associatively and in any order, and corpus results that do not depend on the batch size.

Inputs are small fake runs: random row-stochastic attention arrays with tokens, words, segments and special-token
masks built to match, so no model is needed except for the batch-size properties (tiny random models)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlib.analyses.deps import DependencyCounts
from attnlib.analyses.positions import (
    PositionAccumulator,
    PositionOptions,
    RelativePositionHistogram,
    accumulate_positions,
)
from attnlib.core.batches import accumulate
from attnlib.core.corpus import CorpusInput, Sentence, read_text_corpus
from attnlib.core.runner import RunResult
from attnlib.core.words import ROW_RULES, word_groups, word_level_attention
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE
from attnlib.stats.head_distances import HeadDistances
from attnlib.stats.hta import Attribution
from attnlib.stats.patterns import PATTERNS, PatternAccumulator, input_scores
from attnlib.stats.special import (
    CLASS_KEYS,
    SpecialTokenStats,
    class_share,
    input_statistics,
    offset_share,
    punct_mask,
    row_entropy,
    rows_to_mask,
)
from support.properties import HEADS, LAYERS, WORDS, concentrations, fake_run, runs, seeds, sentences, stochastic

EPS = 2e-6  # float32 rows sum to 1 within a few ulps
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------- fake runs ----------------------------------------------------------------------------------------------


# ---------- comparing accumulators ---------------------------------------------------------------------------------


# ---------- shares between 0 and 1 ---------------------------------------------------------------------------------


@FAST
@given(runs(), st.booleans())
def test_special_shares_are_between_0_and_1(r, all_punct):
    punct = punct_mask(r.tokens, r.special_mask, all_punct)
    stats = input_statistics(r.attentions, r.cls_mask, r.sep_mask, punct)
    for key in CLASS_KEYS + ("prev", "self", "next", "sep_to_sep", "rest_to_sep"):
        value = stats[key]
        assert np.all((value >= -EPS) & (value <= 1 + EPS)), key
    np.testing.assert_allclose(sum(stats[k] for k in CLASS_KEYS), 1.0, atol=EPS)  # every token is in one class
    assert np.all(stats["prev"] + stats["self"] + stats["next"] <= 1 + EPS)
    # the building blocks on their own, with any mask
    for mask in (r.cls_mask, r.sep_mask, punct, ~r.special_mask, np.zeros(r.n, bool), np.ones(r.n, bool)):
        share = class_share(r.attentions, mask)
        assert np.all((share >= -EPS) & (share <= 1 + EPS))
        to_mask = rows_to_mask(r.attentions, ~mask, mask)
        assert np.all(np.isnan(to_mask)) if mask.all() else np.all((to_mask >= -EPS) & (to_mask <= 1 + EPS))
    np.testing.assert_allclose(class_share(r.attentions, np.ones(r.n, bool)), 1.0, atol=EPS)
    for offset in range(-r.n, r.n + 1):
        share = offset_share(r.attentions, offset)
        assert np.all((share >= 0) & (share <= 1 + EPS))


@FAST
@given(runs())
def test_entropy_between_0_and_log_n(r):
    entropy = row_entropy(r.attentions)
    assert np.all(entropy >= -EPS) and np.all(entropy <= math.log(r.n) + 1e-4)


@FAST
@given(runs())
def test_pattern_scores_are_between_0_and_1(r):
    scores = input_scores(r)
    assert scores.shape == (len(PATTERNS), LAYERS, HEADS)
    scored = scores[~np.isnan(scores)]
    assert np.all((scored >= -EPS) & (scored <= 1 + EPS))
    assert not np.isnan(scores[:6]).any()  # only the same-word patterns may lack rows to score


# ---------- word level ---------------------------------------------------------------------------------------------


@FAST
@given(runs(), st.sampled_from(ROW_RULES))
def test_word_level_rows_sum_to_1(r, rule):
    units = word_level_attention(r.attentions, r.word_ids, rule)
    groups = word_groups(r.word_ids)
    assert units.shape == (LAYERS, HEADS, len(groups), len(groups))
    assert np.all(units >= 0)
    np.testing.assert_allclose(units.sum(-1), 1.0, atol=EPS)
    # attention to a word is the sum of its pieces' columns (first rule: row of the first piece)
    first = word_level_attention(r.attentions, r.word_ids, "first")
    for u, g in enumerate(groups):
        np.testing.assert_allclose(
            first[..., u], r.attentions[..., [h[0] for h in groups], :][..., g].sum(-1), atol=EPS
        )


@FAST
@given(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), seeds, concentrations, st.sampled_from(ROW_RULES))
def test_word_level_is_identity_when_every_word_is_one_piece(words, seed, concentration, rule):
    r = fake_run(words, [1] * len(words), None, None, seed, concentration)
    np.testing.assert_allclose(word_level_attention(r.attentions, r.word_ids, rule), r.attentions, atol=EPS)


# ---------- merging accumulators -----------------------------------------------------------------------------------


def _input_items(draw_runs):
    return [(r, CorpusInput("x")) for r in draw_runs]


# ---------- batch size ---------------------------------------------------------------------------------------------


# ---------- slow tests


RELATIONS = ["det", "nsubj", "root", "punct", "obj", "case"]


@st.composite
def treebank_items(draw):
    """(fake run, Sentence with random heads and labels) of one sentence, some words possibly without pieces."""
    words, pieces = draw(sentences(min_words=2, allow_dropped=True))
    m = len(words)
    heads = [draw(st.integers(0, m)) for _ in range(m)]
    deprels = [draw(st.sampled_from(RELATIONS)) for _ in range(m)]
    item = Sentence(words, None, 1, heads=heads, deprels=deprels)
    return fake_run(words, pieces, None, None, draw(seeds), draw(concentrations)), item


def state(acc) -> dict:
    """What an accumulator holds, comparable across merge orders (relations keyed by name, buffers flushed)."""
    if isinstance(acc, HeadDistances):
        return {"result": acc.result(), "n_inputs": acc.n_inputs, "n_rows": acc.n_rows}
    if isinstance(acc, DependencyCounts):
        per_relation = {
            r: (acc.totals[:, i], acc.head_hits[:, i], acc.offset_hits[:, i]) for i, r in enumerate(acc.relations)
        }
        return {
            "relations": per_relation,
            "n_sentences": acc.n_sentences,
            "n_words": acc.n_words,
            "n_skipped": acc.n_skipped,
        }
    if isinstance(acc, RelativePositionHistogram):  # equal histograms may differ in padding width
        return {
            "histograms": acc.histograms()[..., acc.counts > 0],
            "offsets": acc.offsets[acc.counts > 0],
            "counts": acc.counts[acc.counts > 0],
            "sums": acc.sums[..., acc.counts > 0],
        }
    return {
        f.name: state(getattr(acc, f.name))
        if dataclasses.is_dataclass(getattr(acc, f.name)) and not isinstance(getattr(acc, f.name), PositionOptions)
        else getattr(acc, f.name)
        for f in dataclasses.fields(acc)
    }


def assert_same(a, b, path: str = "", rtol: float = 1e-6, atol: float = 1e-7) -> None:
    """Equal structure, equal integers and labels, floats equal within rtol/atol (by default: up to summation order)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}", rtol, atol)
    elif isinstance(a, (tuple, list)) and not isinstance(a, str):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]", rtol, atol)
    elif isinstance(a, (np.ndarray, float)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, path
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=path)
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=path)
    else:
        assert a == b, path


def snapshot(acc):
    """A deep copy of an accumulator's state, to check that merge changes neither operand."""
    import copy

    return state(copy.deepcopy(acc))


def _special(all_punct: bool):
    def build(items):
        acc = SpecialTokenStats(LAYERS, HEADS, all_punct=all_punct)
        for r, item in items:
            acc.add(r, item)
        return acc

    return build


def _patterns(items):
    acc = PatternAccumulator(LAYERS, HEADS)
    for r, item in items:
        acc.add(r, item)
    return acc


def _distances(items):
    acc = HeadDistances(LAYERS, HEADS, buffer_columns=64)  # a small buffer: some inputs go straight to the sums
    for r, item in items:
        acc.add(r, item)
    return acc


def _deps(rule):
    def build(items):
        acc = DependencyCounts(LAYERS, HEADS, rule)
        for r, item in items:
            acc.add(r, item)
        return acc

    return build


def _fake_attribution(r: RunResult) -> Attribution:
    rng = np.random.default_rng(r.n)
    return Attribution(
        r.tokens, stochastic(rng, r.attentions.shape, 1.0), stochastic(rng, r.attentions.shape, 0.3), "estimate", 4
    )


def _positions(options: PositionOptions):
    def build(items):
        acc = PositionAccumulator(LAYERS, HEADS, head_dim=8, options=options)
        for r, _ in items:
            if acc.wants(r.n):
                acc.add(r, _fake_attribution(r))
            else:
                acc.skip()
        return acc

    return build


def _histogram(items):
    acc = RelativePositionHistogram(LAYERS, HEADS)
    for r, _ in items:
        acc.add_maps(r.attentions)
    return acc


BUILDERS = {
    "special": (_special(False), False),
    "special all punct": (_special(True), False),
    "patterns": (_patterns, False),
    "head distances": (_distances, False),
    "deps mean": (_deps("mean"), True),
    "deps max": (_deps("max"), True),
    "positions": (_positions(PositionOptions()), False),
    "positions no special, identifiable only": (
        _positions(PositionOptions(drop_special=True, identifiable_only=True)),
        False,
    ),
    "relative-position histogram": (_histogram, False),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILDERS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_merge_is_associative_and_order_independent(name, data):
    build, treebank = BUILDERS[name]
    items = data.draw(
        st.lists(treebank_items() if treebank else runs().map(lambda r: (r, CorpusInput("x"))), min_size=3, max_size=9)
    )
    cut1 = data.draw(st.integers(0, len(items)))
    cut2 = data.draw(st.integers(cut1, len(items)))
    a, b, c = build(items[:cut1]), build(items[cut1:cut2]), build(items[cut2:])
    before = [snapshot(x) for x in (a, b, c)]
    whole = state(build(items))
    shuffled = state(build(data.draw(st.permutations(items))))
    assert_same(state(a.merge(b).merge(c)), whole)
    assert_same(state(a.merge(b.merge(c))), whole)
    assert_same(state(c.merge(a).merge(b)), whole)
    assert_same(state(b.merge(c).merge(a)), whole)
    assert_same(shuffled, whole)
    for x, saved in zip((a, b, c), before):  # merge changes neither operand
        assert_same(state(x), saved)
    empty = build([])
    assert_same(state(empty.merge(a)), state(a))


def _corpus_items() -> list[CorpusInput]:
    return read_text_corpus(CLASSROOM_SINGLE)[:10] + read_text_corpus(CLASSROOM_PAIRS)[:6]


def _treebank_items() -> list[Sentence]:
    out = []
    for k, item in enumerate(read_text_corpus(CLASSROOM_SINGLE)[:12]):
        words = item.text_a.split()
        heads = [0] + [(i + k) % len(words) for i in range(1, len(words))]  # any heads in 0..m will do for counting
        out.append(
            Sentence(words, None, item.line, heads=heads, deprels=[RELATIONS[(i + k) % 6] for i in range(len(words))])
        )
    return out


def _run_all(lm, batch_size: int, inputs, sentences_) -> dict:
    f = lm.facts
    special, patterns = SpecialTokenStats(f.n_layers, f.n_heads), PatternAccumulator(f.n_layers, f.n_heads)
    deps = DependencyCounts(f.n_layers, f.n_heads)
    assert accumulate(lm, inputs, [special, patterns], batch_size=batch_size) == len(inputs)
    accumulate(lm, sentences_, [deps], batch_size=batch_size)
    out = {"special": state(special), "patterns": state(patterns), "deps": state(deps)}
    if f.model_type == "bert":  # attribution is slow (about 1 s an input) and runs input by input anyway
        shortest = sorted(inputs, key=lambda i: len(i.text_a) + len(i.text_b or ""))[:2]
        out["positions"] = state(accumulate_positions(lm, shortest, PositionOptions(probes=1), batch_size=batch_size))
    return out


@pytest.fixture(scope="module")
def batch_one(tiny_model):
    """Every corpus result with one input per forward pass: the reference."""
    return _run_all(tiny_model, 1, _corpus_items(), _treebank_items())


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@pytest.mark.slow
@given(batch_size=st.integers(2, 40))
def test_results_unchanged_by_batch_size(tiny_model, batch_one, batch_size):
    # floats only within the runner's batching tolerance (padding changes summation order)
    assert_same(_run_all(tiny_model, batch_size, _corpus_items(), _treebank_items()), batch_one, rtol=1e-4, atol=1e-4)
