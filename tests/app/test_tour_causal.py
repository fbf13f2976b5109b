"""The Tour's induction step (8) on the trained decoder gains the causal picture: the two heads with the largest mean
noising score over the shipped pairs (`attnlib patch --pairs`), and K-composition into the induction heads at the first
and last checkpoint (`attnlib compose`), in the sentence with the numbers the library gives."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import attnlib
from attnlib.analyses.circuit import INDUCTION_PAIRS
from attnlib.core.model import TRAINED_MODEL, checkpoints_of
from attnlib.results.shipped import ROOT

pytestmark = pytest.mark.slow


def test_the_induction_step_states_the_causal_picture():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=TRAINED_MODEL, step="8")
    at.run()
    at.switch_page("app_pages/tour/page.py").run()
    assert not at.exception, [e.value for e in at.exception]
    sentence = next(s.value for s in at.success if "shipped pairs" in s.value)
    pairs = attnlib.patch(TRAINED_MODEL, pairs=str(INDUCTION_PAIRS), direction="noise").to_json()
    means, se = np.asarray(pairs["heads"]), np.asarray(pairs["heads_se"])
    for i in np.argsort(means.ravel())[::-1][:2]:
        layer, head = divmod(int(i), means.shape[1])
        assert (
            f"head {layer + 1}-{head + 1}" in sentence
            and f"({means[layer, head]:.2f} ± {se[layer, head]:.2f})" in sentence
        )
    assert "the previous-token head" in sentence and "an induction head" in sentence
    induction = attnlib.roles(TRAINED_MODEL).to_json()["roles"]["induction"]
    names = checkpoints_of(TRAINED_MODEL)
    k = [np.mean([np.asarray(attnlib.compose(n).to_json()["k"])[:l, :, l, h] for l, h in induction]) for n in
         (names[0], names[-1])]  # fmt: skip
    assert f"goes from {k[0]:.2f} at step 0 to {k[1]:.2f} at step 1150" in sentence
    assert "K rises while Q and V do not" in sentence
