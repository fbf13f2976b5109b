"""The Tour's causal-picture sentence (present.tour.circuit_notice) on arrays made by hand: the two largest noising
scores named with their roles and errors (layers and heads from 1), and K-composition said to rise only when it rises
apart from Q and V."""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlib.present.tour import circuit_notice

NOISING = np.array([[0.1, 0.0, 0.86], [0.74, 0.5, 0.2]])
SE = np.array([[0.01, 0.01, 0.043], [0.031, 0.02, 0.02]])
ROLES = {"previous": [[0, 2]], "induction": [[1, 0], [1, 1]]}


def table(k_last: float, q_last: float) -> pd.DataFrame:
    return pd.DataFrame({"step": [0, 500], "q": [0.12, q_last], "k": [0.12, k_last], "v": [0.13, 0.09],
                         "baseline": [0.125, 0.125]})  # fmt: skip


def test_the_two_largest_heads_and_k_rising():
    sentence = circuit_notice(NOISING, SE, 40, ROLES, table(0.21, 0.13), "m")
    assert "On the 40 shipped pairs" in sentence
    assert "head 1-3, the previous-token head (0.86 ± 0.04) and head 2-1, an induction head (0.74 ± 0.03)" in sentence
    assert "two steps of the induction circuit" in sentence
    assert "into the induction heads 2-1, 2-2 goes from 0.12 at step 0 to 0.21 at step 500" in sentence
    assert "Q from 0.12 to 0.13 and V from 0.13 to 0.09: K rises while Q and V do not" in sentence


def test_k_not_rising_apart_from_q():
    sentence = circuit_notice(NOISING, SE, 40, ROLES, table(0.21, 0.2), "m")
    assert sentence.endswith("K does not rise apart from Q and V.")
    other = circuit_notice(NOISING, SE, 40, {"previous": [], "induction": [[1, 1]]}, table(0.21, 0.13), "m")
    assert "two steps" not in other and "head 1-3 (0.86 ± 0.04)" in other
