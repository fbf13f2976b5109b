"""Word-level attention (METHODS section 6) on hand-made arrays."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.words import unit_labels, word_groups, word_level_attention

# Tokens: [CLS] straw ##berries are [SEP]  -> units: [CLS], strawberries, are, [SEP]
WORD_IDS = [None, 0, 0, 1, None]
A = np.array(
    [
        [0.1, 0.2, 0.3, 0.2, 0.2],
        [0.0, 0.5, 0.1, 0.2, 0.2],
        [0.4, 0.1, 0.1, 0.2, 0.2],
        [0.2, 0.2, 0.2, 0.2, 0.2],
        [0.3, 0.1, 0.1, 0.1, 0.4],
    ]
)


def test_groups_keep_special_tokens_alone():
    assert word_groups(WORD_IDS) == [[0], [1, 2], [3], [4]]
    assert unit_labels(["[CLS]", "straw", "##berries", "are", "[SEP]"], ["strawberries", "are"], WORD_IDS) == [
        "[CLS]",
        "strawberries",
        "are",
        "[SEP]",
    ]


def test_mean_rule_by_hand():
    w = word_level_attention(A, WORD_IDS, "mean")
    # columns merged first: row 1 -> [0.0, 0.6, 0.2, 0.2], row 2 -> [0.4, 0.2, 0.2, 0.2]; mean of both rows:
    np.testing.assert_allclose(w[1], [0.2, 0.4, 0.2, 0.2])
    np.testing.assert_allclose(w[0], [0.1, 0.5, 0.2, 0.2])
    np.testing.assert_allclose(w[3], [0.3, 0.2, 0.1, 0.4])
    np.testing.assert_allclose(w.sum(-1), 1.0)


def test_first_rule_takes_first_piece():
    np.testing.assert_allclose(word_level_attention(A, WORD_IDS, "first")[1], [0.0, 0.6, 0.2, 0.2])


def test_max_rule_renormalizes():
    # elementwise max of [0.0, 0.6, 0.2, 0.2] and [0.4, 0.2, 0.2, 0.2] = [0.4, 0.6, 0.2, 0.2], sum 1.4
    np.testing.assert_allclose(word_level_attention(A, WORD_IDS, "max")[1], np.array([0.4, 0.6, 0.2, 0.2]) / 1.4)


def test_leading_axes_are_kept():
    stacked = np.stack([A, A[::-1, ::-1]])[None]  # [1, 2, 5, 5]
    w = word_level_attention(stacked, WORD_IDS, "mean")
    assert w.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(w[0, 0], word_level_attention(A, WORD_IDS, "mean"))


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="row rule"):
        word_level_attention(A, WORD_IDS, "median")
