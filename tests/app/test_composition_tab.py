"""The Head roles page's Composition tab on the trained decoder (METHODS §22): the heatmap is `attnlib compose`'s kind
from the URL with the role map's heads named on its axes, and the lines over training are `attnlib compose` into the
induction heads at each checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import attnlib
from attnlib.core.model import TRAINED_MODEL, checkpoints_of
from attnlib.results.shipped import ROOT
from support.apptest import figures, plotly_values

pytestmark = pytest.mark.slow
PAGE = "app_pages/roles/page.py"
TOLERANCE = 1e-9  # the same float64 scores, through JSON


def composition_tab(**params: str) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=TRAINED_MODEL, tab="composition", **params)
    at.run()
    at.switch_page(PAGE).run()
    assert not [b for b in at.button if b.key == f"compute:roles:{TRAINED_MODEL}"]  # the decoder's roles ship
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_heatmap_and_the_lines_are_compose_s():
    at = composition_tab(kind="q")
    shown = {f.key: json.loads(f.spec) for f in figures(at)}
    scores = np.asarray(attnlib.compose(TRAINED_MODEL).to_json()["q"])
    L, H = scores.shape[:2]
    heatmap = shown["roles_compose_q"]
    np.testing.assert_allclose(plotly_values(heatmap["data"][0]["z"]), scores.reshape(L * H, L * H), atol=TOLERANCE)
    roles = attnlib.roles(TRAINED_MODEL).to_json()["roles"]
    ticks = heatmap["layout"]["yaxis"]["ticktext"]
    for layer, head in roles["previous"]:
        assert ticks[layer * H + head] == f"{layer + 1}-{head + 1} previous-token"
    for layer, head in roles["induction"]:
        assert "induction" in ticks[layer * H + head]
    lines = {t["name"]: plotly_values(t["y"]) for t in shown["roles_compose_training"]["data"]}
    names = checkpoints_of(TRAINED_MODEL)
    for index in (0, len(names) - 1):
        found = attnlib.compose(names[index]).to_json()
        for kind in "qkv":
            into = [np.asarray(found[kind])[:l, :, l, h].ravel() for l, h in roles["induction"]]
            assert lines[f"{kind.upper()}-composition"][index] == pytest.approx(np.mean(np.concatenate(into)), abs=1e-9)
    hidden = attnlib.load_model(TRAINED_MODEL).facts.hidden_size
    assert lines["1/√d (random matrices)"] == pytest.approx(np.full(len(names), hidden**-0.5))
    assert at.query_params["kind"] == "q"
