"""Property-based tests (hypothesis) of the statistics: shares in [0, 1], word-level rows summing to 1,
accumulators that merge associatively and in any order, and corpus results that do not depend on the batch size.

Inputs are small fake runs: random row-stochastic attention arrays with tokens, words, segments and special-token
masks built to match, so no model is needed except for the batch-size properties (tiny random models)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlib.core.corpus import CorpusInput
from attnlib.core.words import ROW_RULES, word_groups, word_level_attention
from attnlib.stats.patterns import PATTERNS, input_scores
from attnlib.stats.shares import (
    CLASS_KEYS,
    class_share,
    input_statistics,
    offset_share,
    punct_mask,
    row_entropy,
    rows_to_mask,
)
from support.properties import HEADS, LAYERS, WORDS, concentrations, fake_run, runs, seeds

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
