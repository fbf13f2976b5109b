"""The Predictions page's Patching tab on the trained decoder (METHODS §22): what it draws is `attnlib patch`'s JSON
(every head, attribution and its r, the residual grid, a pair file's means and standard errors), the prompts and
options live in the URL, the corrupt button gives the library's corrupted prompt, and bad input is said in one sentence
with nothing typed lost."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import attnlib
from attnlib.analyses.circuit import INDUCTION_PAIRS, corrupted_prompt
from attnlib.core.model import TRAINED_MODEL, load_model
from attnlib.results.shipped import ROOT
from support.apptest import figures, plotly_values

pytestmark = pytest.mark.slow
PAGE = "app_pages/predictions/page.py"
CLEAN, CORRUPTED = INDUCTION_PAIRS.read_text(encoding="utf-8").splitlines()[1].split("\t")[:2]
TOLERANCE = 1e-5  # float32 scores as the figure's JSON carries them, against a second run of the same computation


@pytest.fixture(scope="module")
def decoder():
    return load_model(TRAINED_MODEL)


def patching_tab(**params: str) -> AppTest:
    """The app on the Predictions page's Patching tab for the trained decoder, every quick computation asked for."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=TRAINED_MODEL, tab="patching", **params)
    at.run()
    at.switch_page(PAGE).run()
    for button in [b for b in at.button if b.label.startswith("Compute (")]:  # work not measured as quick yet
        button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def drawn(at: AppTest) -> dict[str, dict]:
    return {f.key: json.loads(f.spec) for f in figures(at)}


def test_drawn_values_are_the_librarys_and_the_options_are_in_the_url(decoder):
    at = patching_tab(clean=CLEAN, corrupted=CORRUPTED, direction="noise")
    shown = drawn(at)
    one = attnlib.patch(decoder, clean=CLEAN, corrupted=CORRUPTED, direction="noise", attribution=True).to_json()
    np.testing.assert_allclose(plotly_values(shown["patch_heads_0"]["data"][0]["z"]), one["heads"], atol=TOLERANCE)
    np.testing.assert_allclose(plotly_values(shown["patch_attribution_0"]["data"][0]["z"]), one["attribution"],
                               atol=TOLERANCE)  # fmt: skip
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Pearson r (attribution against exact)"] == f"{one['attribution_r']:.3f}"
    assert metrics["Clean metric z(w) − z(w')"] == f"{one['clean_metric']:.3f}"
    assert metrics["Corrupted metric z(w) − z(w')"] == f"{one['corrupted_metric']:.3f}"
    residual = attnlib.patch(decoder, clean=CLEAN, corrupted=CORRUPTED, direction="noise", grid="residual").to_json()
    np.testing.assert_allclose(plotly_values(shown["patch_residual_0"]["data"][0]["z"]), residual["residual"],
                               atol=TOLERANCE)  # fmt: skip
    grid = attnlib.patch(decoder, clean=CLEAN, corrupted=CORRUPTED, direction="noise", grid="heads-positions")
    expected = np.asarray(grid.to_json()["heads_positions"])
    z = plotly_values(shown["patch_heads_positions_0"]["data"][0]["z"])
    np.testing.assert_allclose(z, expected.reshape(-1, expected.shape[-1]), atol=TOLERANCE)
    pairs = attnlib.patch(decoder, pairs=str(INDUCTION_PAIRS), direction="noise").to_json()
    bars = shown["patch_pairs_1"]["data"][0]
    np.testing.assert_allclose(plotly_values(bars["y"]), np.ravel(pairs["heads"]), atol=TOLERANCE)
    np.testing.assert_allclose(plotly_values(bars["error_y"]["array"]), np.ravel(pairs["heads_se"]), atol=TOLERANCE)
    assert (at.query_params["clean"], at.query_params["corrupted"]) == (CLEAN, CORRUPTED)
    assert at.query_params["direction"] == "noise" and at.radio(key="patch_direction").value == "noise"
    keys = {b.key for b in at.get("download_button")}
    for table in ("heads_head", "heads_positions", "residual", "pairs_head"):  # every table: CSV; every result: JSON
        assert f"patch_{table}_csv" in keys, sorted(keys)
    assert {"patch_heads_json", "patch_heads_positions_json", "patch_residual_json", "patch_pairs_json"} <= keys
    assert {"patch_heads_0_dl", "patch_scatter_dl", "patch_residual_0_dl", "patch_pairs_1_dl"} <= keys  # figures


def test_the_corrupt_button_gives_the_librarys_prompt(decoder):
    at = patching_tab(clean=CLEAN, corrupted=CORRUPTED)
    at.button(key="patch_corrupt").click().run()
    made = at.text_area(key="patch_corrupted").value
    assert made == corrupted_prompt(decoder, CLEAN, seed=0) and made != CORRUPTED
    assert at.query_params["corrupted"] == made and not at.error


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"patch_corrupted": CORRUPTED + " and more"}, "must have as many tokens"),
        ({"patch_answer": " unbelievably long"}, "not one"),
        ({"patch_corrupted": CLEAN}, "does not differ"),
        ({"patch_corrupted": "x y z"}, "must have as many tokens"),
    ],
)
def test_bad_input_is_one_sentence_and_nothing_typed_is_lost(change, said):
    at = patching_tab(clean=CLEAN, corrupted=CORRUPTED)
    for key, value in change.items():
        (at.text_input if "answer" in key else at.text_area)(key=key).set_value(value)
    at.run()
    assert not at.exception and len(at.error) == 1 and said in at.error[0].value, [e.value for e in at.error]
    assert at.error[0].value.count(". ") <= 1  # one sentence
    for key, value in change.items():
        assert (at.text_input if "answer" in key else at.text_area)(key=key).value == value


def test_a_malformed_pair_file_is_named_with_its_line():
    at = patching_tab(clean=CLEAN, corrupted=CORRUPTED)
    at.radio(key="patch_pairs_source").set_value("Upload a pair file").run()
    at.file_uploader(key="patch_pairs_upload").set_value(("mine.tsv", b"a b\tc d\nonly one field\n", "text/plain"))
    at.run()
    assert not at.exception
    assert any(e.value.startswith("mine.tsv line 2:") for e in at.error), [e.value for e in at.error]


def test_a_model_without_an_lm_head_says_why_in_words():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(tab="patching")  # the default model: a sentence encoder without its masked-LM head
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception and not at.error and not figures(at)
    assert any("is not defined for it" in i.value for i in at.info), [i.value for i in at.info]


def test_an_empty_prompt_asks_for_one():
    at = patching_tab(clean=CLEAN, corrupted=CORRUPTED)
    at.text_area(key="patch_corrupted").set_value("").run()
    assert not at.exception and not at.error and not figures(at)
    assert any("Type a clean and a corrupted prompt" in i.value for i in at.info)
    assert at.text_area(key="patch_clean").value == CLEAN and "corrupted" not in at.query_params
