"""METHODS §20's statistics as functions of arrays: the probe's ids, the induction, duplicate-token and previous-token
scores against loops written from the definitions, the in-context gain, TransformerLens's detection on a hand-worked
5-token map (both measures, both exclusions) and the copying score against the eigenvalues of the full vocabulary x
vocabulary matrix."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.stats.roles import (
    control_draws,
    copying_scores,
    detection_patterns,
    detection_score,
    duplicate_score,
    eigen_copying,
    heads_at,
    in_context_gain,
    induction_score,
    previous_score,
    probe_ids,
    probe_scores,
    top_heads,
)
from attnlib.stats.special import first_token_share
from support.roles import looped_previous_score, looped_repeat_score

ORDINARY = np.arange(3, 103)  # ids 0-2 stand for special tokens


def random_maps(rng: np.random.Generator, inputs: int, n: int, causal: bool = True) -> np.ndarray:
    """Row-stochastic maps [inputs, 2 layers, 3 heads, n, n] (lower-triangular where causal)."""
    a = rng.random((inputs, 2, 3, n, n))
    if causal:
        a = np.tril(a)
    return a / a.sum(-1, keepdims=True)


def test_probe_ids_follow_the_definition():
    probe = probe_ids(ORDINARY, sequences=3, repeat_length=7, repeats=3, seed=5, bos=1, max_length=64)
    assert probe.ids.shape == (3, 1 + 3 * 7) and probe.b == 1 and not probe.shortened
    for r, row in enumerate(probe.ids):
        drawn = np.random.default_rng(5 + r).choice(ORDINARY, size=7, replace=False)
        assert row[0] == 1 and list(row[1:]) == list(drawn) * 3
        assert len(set(row[1:8])) == 7 and set(row[1:]) <= set(ORDINARY)
    assert probe.position(2, 1) == 8 and probe.position(3, 7) == 21
    no_bos = probe_ids(ORDINARY, sequences=1, repeat_length=7, repeats=2, seed=5, bos=None, max_length=64)
    assert no_bos.b == 0 and list(no_bos.ids[0]) == list(probe.ids[0, 1:15])


def test_probe_shortens_s_to_the_models_length():
    probe = probe_ids(ORDINARY, sequences=2, repeat_length=50, repeats=2, seed=0, bos=1, max_length=64)
    assert probe.repeat_length == (64 - 1) // 2 == 31 and probe.shortened and probe.ids.shape == (2, 63)
    assert probe_ids(ORDINARY, sequences=1, repeat_length=50, repeats=2, seed=0, bos=None,
                     max_length=64).repeat_length == 32  # fmt: skip
    with pytest.raises(ValueError, match="at most 2 tokens"):
        probe_ids(ORDINARY, sequences=1, repeat_length=5, repeats=3, seed=0, bos=1, max_length=2)
    with pytest.raises(ValueError, match="fewer than s = 20"):
        probe_ids(ORDINARY[:10], sequences=1, repeat_length=20, repeats=2, seed=0, bos=None, max_length=64)


@pytest.mark.parametrize(("b", "s", "r", "causal"), [(1, 4, 2, True), (0, 3, 3, True), (1, 5, 4, False)])
def test_probe_scores_equal_loops_over_the_definition(b, s, r, causal):
    rng = np.random.default_rng(0)
    maps = random_maps(rng, 3, b + r * s, causal)
    # a few float64 sums of values <= 1 in another order: rounding of ~1e-16 each
    np.testing.assert_allclose(induction_score(maps, b, s, r), looped_repeat_score(maps, b, s, r, 1), atol=1e-12)
    np.testing.assert_allclose(duplicate_score(maps, b, s, r), looped_repeat_score(maps, b, s, r, 0), atol=1e-12)
    np.testing.assert_allclose(previous_score(maps, b), looped_previous_score(maps, b), atol=1e-12)


def test_an_ideal_induction_head_scores_one_and_a_previous_token_head_zero():
    """A map that attends from each token of the second repeat to the token after its first occurrence (and elsewhere
    to the previous token)."""
    b, s, r = 1, 4, 2
    n = b + r * s
    induction, previous = np.zeros((n, n)), np.zeros((n, n))
    induction[0, 0] = previous[0, 0] = 1
    for i in range(1, n):
        previous[i, i - 1] = 1
        induction[i, i - s + 1 if i >= b + s else i - 1] = 1
    maps = np.stack([induction, previous])[None, :, None]  # [1 input, 2 layers, 1 head, n, n]
    assert induction_score(maps, b, s, r)[:, 0].tolist() == [1.0, 0.0]
    assert duplicate_score(maps, b, s, r)[:, 0].tolist() == [0.0, 0.0]
    assert previous_score(maps, b)[:, 0].tolist() == [(s - 1) / (n - 2), 1.0]  # rows p(2, 1) and on look back s - 1
    probe = probe_ids(ORDINARY, sequences=1, repeat_length=s, repeats=r, seed=0, bos=1, max_length=64)
    scores = probe_scores(maps, probe)
    np.testing.assert_array_equal(scores["first_share"], first_token_share(maps[0]))


def test_in_context_gain_is_the_first_repeats_loss_less_the_seconds():
    b, s = 1, 4
    losses = np.arange(2 * (b + 2 * s - 1), dtype=float).reshape(2, -1)  # [2 inputs, n - 1]
    first = losses[:, b : b + s - 1].mean()  # positions p(1, 1..s-1)
    second = losses[:, b + s : b + 2 * s - 1].mean()  # positions p(2, 1..s-1)
    assert in_context_gain(losses, b, s) == pytest.approx(first - second) and first - second == -s
    with pytest.raises(ValueError, match="two tokens"):
        in_context_gain(losses, b, 1)


def test_top_heads_rank_by_score_then_layer_then_head():
    scores = np.array([[0.5, 0.9, np.nan], [0.9, 0.1, 0.5]])
    assert top_heads(scores, 3) == [(0, 1), (1, 0), (0, 0)]
    assert top_heads(scores, 10)[-1] == (0, 2)  # NaN last
    assert heads_at(scores, 0.5) == [(0, 0), (0, 1), (1, 0), (1, 2)]


def test_control_draws_avoid_the_role_and_are_seeded():
    draws = control_draws(3, 4, [(0, 0), (2, 3)], 3, seed=1)
    assert len(draws) == 5 and all(len(d) == 3 == len(set(d)) for d in draws)
    assert not {(0, 0), (2, 3)} & {h for d in draws for h in d}
    assert draws == control_draws(3, 4, [(0, 0), (2, 3)], 3, seed=1) != control_draws(3, 4, [], 3, seed=2)


# hand-worked: x = a b a b c; rows sum to 1, lower-triangular, sum(A) = 5, diagonal 2.2, column 0 2.2
TOKENS = [5, 6, 5, 6, 7]
A = np.array(
    [
        [1, 0, 0, 0, 0],
        [0.5, 0.5, 0, 0, 0],
        [0.25, 0.5, 0.25, 0, 0],
        [0.25, 0.25, 0.25, 0.25, 0],
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ]
)
# (exclude first, exclude current) -> pattern -> score. mul: sum(A'P) / sum(A'); on the pattern's entries A sums to
# previous 1.45 (0.5 + 0.5 + 0.25 + 0.2), duplicate 0.5 (A[2,0] + A[3,1]), induction 0.75 (A[2,1] + A[3,2]);
# sum(A') = 5, 2.8 (less column 0), 2.8 (less the diagonal), 1.6 (less both: 2.2 + 1.2)
MUL = {
    (False, False): {"previous": 1.45 / 5, "duplicate": 0.5 / 5, "induction": 0.75 / 5},
    (True, False): {"previous": 0.95 / 2.8, "duplicate": 0.25 / 2.8, "induction": 0.75 / 2.8},
    (False, True): {"previous": 1.45 / 2.8, "duplicate": 0.5 / 2.8, "induction": 0.75 / 2.8},
    (True, True): {"previous": 0.95 / 1.6, "duplicate": 0.25 / 1.6, "induction": 0.75 / 1.6},
}
# abs: 1 - round(sum|A - P| / 5, 3); sum|A - P| = previous 6.1, duplicate 6.0, induction 5.5; column 0 of |A - P|:
# 2.2, 2.7 (|0.25 - 1| at [2,0]), 2.2; the diagonal 2.2 (P is 0 there), 1.2 of it outside column 0
ABS = {
    (False, False): {"previous": 1 - 1.22, "duplicate": 1 - 1.2, "induction": 1 - 1.1},
    (True, False): {"previous": 1 - 0.78, "duplicate": 1 - 0.66, "induction": 1 - 0.66},
    (False, True): {"previous": 1 - 0.78, "duplicate": 1 - 0.76, "induction": 1 - 0.66},
    (True, True): {"previous": 1 - 0.54, "duplicate": 1 - 0.42, "induction": 1 - 0.42},
}


def test_detection_patterns_of_a_hand_worked_input():
    patterns = detection_patterns(TOKENS)
    assert np.argwhere(patterns["previous"]).tolist() == [[1, 0], [2, 1], [3, 2], [4, 3]]
    assert np.argwhere(patterns["duplicate"]).tolist() == [[2, 0], [3, 1]]
    assert np.argwhere(patterns["induction"]).tolist() == [[2, 1], [3, 2]]


@pytest.mark.parametrize("exclusions", list(MUL))
def test_detection_scores_of_a_hand_worked_map(exclusions):
    patterns = detection_patterns(TOKENS)
    for measure, expected in (("mul", MUL), ("abs", ABS)):
        for name, pattern in patterns.items():
            got = detection_score(A, pattern, measure, *exclusions)  # type: ignore[arg-type]
            assert got == pytest.approx(expected[exclusions][name], abs=1e-12), (measure, name)


def test_copying_score_is_that_of_the_full_vocabulary_matrix():
    """The d_h x d_h matrix W_O W_U W_E W_V has the non-zero eigenvalues of the V x V matrix W_E W_V W_O W_U."""
    rng = np.random.default_rng(0)
    V, d, d_h = 40, 12, 4
    embed, unembed = rng.normal(size=(V, d)), rng.normal(size=(d, V))
    values, outputs = rng.normal(size=(2, 3, d, d_h)), rng.normal(size=(2, 3, d_h, d))
    got = copying_scores(unembed @ embed, values, outputs)
    for l in range(2):
        for h in range(3):
            full = np.linalg.eigvals(embed @ values[l, h] @ outputs[l, h] @ unembed)
            # W_O (W_U W_E) in float32 (d = 12 products per entry: ~sqrt(12) eps32 of each), the rest float64
            assert got[l, h] == pytest.approx(full.real.sum() / np.abs(full).sum(), abs=np.sqrt(d) * 1.2e-7)
    assert got.min() >= -1 and got.max() <= 1
    assert eigen_copying(np.eye(3)) == 1 and eigen_copying(-np.eye(3)) == -1
