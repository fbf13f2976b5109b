"""A circuit study's helpers (attnlib.analyses.circuit): the longest repeat found by hand on small lists, the corrupted
prompt re-tokenized (as many tokens, the first occurrence's tokens all changed, every other token kept), refusals in
words, and the mean composition into receivers against the arrays summed by hand and against `attnlib.compose`."""

from __future__ import annotations

import numpy as np
import pytest

import attnlib
from attnlib.analyses.circuit import composition_over_checkpoints, corrupted_prompt, longest_repeat, receivers_mean
from attnlib.analyses.compose import CompositionResult
from attnlib.core.errors import InputError
from attnlib.core.model import TRAINED_MODEL, checkpoints_of, load_model
from attnlib.core.runner import encode
from support.models import save_tiny


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([1, 2, 3, 9, 1, 2, 3], (0, 4, 3)),
        ([5, 5, 5, 5], (0, 2, 2)),  # the two spans may not overlap: 5 5 | 5 5
        ([7, 8, 1, 7, 8, 2, 1], (0, 3, 2)),  # 7 8 is longer than 1
        ([4, 1, 2, 1, 2], (1, 3, 2)),
        ([1, 2, 3], (0, 0, 0)),
    ],
)
def test_longest_repeat_by_hand(ids, expected):
    first, later, length = longest_repeat(ids)
    assert (first, later, length)[2] == expected[2]
    if length:
        assert (first, later) == expected[:2]
        assert ids[first : first + length] == ids[later : later + length] and later >= first + length


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    return load_model(str(save_tiny("gpt2", tmp_path_factory.mktemp("circuit-gpt2"))))


def test_corrupted_prompt_replaces_the_first_occurrence_only(tiny_gpt2):
    clean = "the cat sat on the mat and the cat sat"
    corrupted = corrupted_prompt(tiny_gpt2, clean, seed=3)
    tok = tiny_gpt2.tokenizer
    a, b = (tok(t, add_special_tokens=False)["input_ids"] for t in (clean, corrupted))
    first, _, length = longest_repeat(a)
    assert length >= 2 and len(a) == len(b) and encode(tiny_gpt2, clean).n == encode(tiny_gpt2, corrupted).n
    inside = range(first, first + length)
    assert all(a[i] != b[i] for i in inside)
    assert all(a[i] == b[i] for i in range(len(a)) if i not in inside)
    assert corrupted_prompt(tiny_gpt2, clean, seed=3) == corrupted  # seeded
    assert corrupted_prompt(tiny_gpt2, clean, seed=4) != corrupted


@pytest.mark.parametrize(("text", "said"), [("the cat sat", "repeats no token"), ("  ", "empty")])
def test_corrupted_prompt_refused_in_words(tiny_gpt2, text, said):
    with pytest.raises(InputError, match=said):
        corrupted_prompt(tiny_gpt2, text)


def test_receivers_mean_by_hand():
    L, H = 3, 2
    q, k, v = (np.arange(L * H * L * H, dtype=float).reshape(L, H, L, H) * s for s in (1, 2, 3))
    found = receivers_mean(CompositionResult(q, k, v), [(1, 0), (2, 1)])
    senders = [q[0, 0, 1, 0], q[0, 1, 1, 0]] + [q[l, h, 2, 1] for l in range(2) for h in range(H)]
    assert found["q"] == pytest.approx(np.mean(senders))
    assert found["k"] == pytest.approx(2 * np.mean(senders)) and found["v"] == pytest.approx(3 * np.mean(senders))
    assert np.isnan(receivers_mean(CompositionResult(q, k, v), [(0, 1)])["k"])  # no earlier layer


def test_composition_over_checkpoints_against_compose():
    names = checkpoints_of(TRAINED_MODEL)[::9]  # step0 and the last
    table = composition_over_checkpoints(names, [(1, 0), (1, 1), (1, 2)])
    assert list(table["step"]) == [0, 1150]
    for row, name in zip(table.itertuples(), names, strict=True):
        scores = attnlib.compose(name).to_json()
        for kind in "qkv":
            assert getattr(row, kind) == pytest.approx(np.mean(np.array(scores[kind])[0, :, 1, :3]), abs=1e-9)
        assert row.baseline == pytest.approx(1 / np.sqrt(load_model(name).facts.hidden_size))
