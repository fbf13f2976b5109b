"""The Head roles page (METHODS §20): what it draws is the library's `roles` result (a heatmap's z, a table's cells, the
causal check's bars), a picked head opens on the probe and in the Live page's head view, an encoder is told what the
probe means for it; and the Live page's head finder scores the role patterns on the current text."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest
from transformers import AutoModelForCausalLM

import attnlib.analyses.roles as roles_module
from attnlib.analyses.registry import analyse
from attnlib.analyses.roles import LINK_REPEAT, NO_ROLE, RolesOptions, main_roles, probe_text, role_thresholds
from attnlib.core.corpus import read_corpus
from attnlib.core.model import DEFAULT_MODEL, TRAINED_MODEL, checkpoints_of, load_model
from attnlib.core.runner import run
from attnlib.results.precomputed import shipped_result
from attnlib.results.shipped import CLASSROOM_SINGLE, ROOT, file_sha1
from support.apptest import downloads_on_click, figures, open_tab, plotly_values, tables
from support.cli import run_cli
from support.models import move_off_initial, save_tiny
from support.pages import view_datas
from support.views import unpack
from ui.sources.live_inputs import pretty_token
from ui.widgets.page_tabs import HEAD_ROLES

pytestmark = pytest.mark.slow
PAGE = "app_pages/roles/page.py"
LIMIT = 4
TOLERANCE = 1e-6  # float32 maps summed over a few hundred entries, and the figure's JSON rounding


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-roles"))


@pytest.fixture(scope="module")
def library(gpt2_dir):
    """The library's roles of the tiny GPT-2 on the page's default corpus (the first inputs of the classroom set)."""
    return analyse("roles", str(gpt2_dir), corpus=read_corpus(CLASSROOM_SINGLE, limit=LIMIT)).result


def roles_page(model: str, **params: str) -> AppTest:
    """The app on the Head roles page for `model`, its computation asked for."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update({"model": model, "limit": str(LIMIT), **params})
    at.run()
    at.switch_page(PAGE).run()
    asks = [b for b in at.button if str(b.key).startswith("compute:roles:")]  # the roles, where none ships
    if asks:
        asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_draws_the_librarys_scores(gpt2_dir, library):
    at = roles_page(str(gpt2_dir))
    drawn = {f.key: json.loads(f.spec) for f in figures(at)}
    assert {"roles_map", "roles_induction", "roles_duplicate", "roles_previous", "roles_copying"} <= set(drawn)
    for score in ("induction", "duplicate", "previous", "copying", "first_share"):
        z = plotly_values(drawn[f"roles_{score}"]["data"][0]["z"])
        np.testing.assert_allclose(z, library.scores.of(score), rtol=0, atol=TOLERANCE, err_msg=score)

    table = tables(open_tab(at, "roles_tab", HEAD_ROLES["tables"]))[0]
    assert len(table) == library.scores.induction.size
    for (layer, head), value in np.ndenumerate(library.scores.induction):
        row = table[(table["layer"] == layer + 1) & (table["head"] == head + 1)].iloc[0]
        assert (
            abs(row["induction"] - value) <= TOLERANCE
            and abs(row["copying"] - library.scores.copying[layer, head]) <= TOLERANCE
        )
        held = [role for role, heads in library.roles.items() if (layer, head) in heads]
        assert (row["role"] == "none") == (not held)  # the map colours a head by a role the library gives it

    causal = open_tab(at, "roles_tab", HEAD_ROLES["causal"])
    (bars,) = [json.loads(f.spec) for f in figures(causal) if f.key == "roles_causal"]
    ablated, control = (plotly_values(trace["y"]) for trace in bars["data"][:2])
    roles = list(library.causal)
    np.testing.assert_allclose(ablated, [library.causal[r].gain_ablated for r in roles], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(control, [library.causal[r].control_gain for r in roles], rtol=0, atol=TOLERANCE)


def test_a_threshold_recolours_the_map_without_recomputing(gpt2_dir, library, monkeypatch):
    """A role threshold only colours: changing it draws the map the library's main_roles gives with it, with no new
    probe made (make_probe counted) and no button to press again."""
    probes = []
    made = roles_module.make_probe
    monkeypatch.setattr(roles_module, "make_probe", lambda lm, options: probes.append(options) or made(lm, options))
    at = roles_page(str(gpt2_dir))
    before = {f.key: f.spec for f in figures(at)}
    computed = len(probes)
    scores = library.scores.grids()
    threshold = 0.05  # low enough that heads below the default 0.4 take a role
    thresholds = role_thresholds({**library.thresholds, "previous": threshold, "duplicate": threshold,
                                  "induction": threshold})  # fmt: skip
    expected = main_roles(scores, thresholds) == NO_ROLE
    assert (expected != (library.main_roles() == NO_ROLE)).any()  # the change shows on the map

    at.number_input(key="roles_threshold").set_value(threshold).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(probes) == computed and not [b for b in at.button if str(b.key).startswith("compute:")]
    after = {f.key: f.spec for f in figures(at)}
    assert after["roles_map"] != before["roles_map"] and after["roles_induction"] == before["roles_induction"]
    table = tables(open_tab(at, "roles_tab", HEAD_ROLES["tables"]))[0]
    for (layer, head), none in np.ndenumerate(expected):
        row = table[(table["layer"] == layer + 1) & (table["head"] == head + 1)].iloc[0]
        assert (row["role"] == "none") == none, (layer, head)
    assert len(probes) == computed


def shipped_roles(model: str, checkpoints: tuple[str, ...] = ()) -> dict:
    """The shipped roles file's result for the page's default corpus (the first 20 classroom sentences)."""
    found = shipped_result("roles", model, file_sha1(CLASSROOM_SINGLE), 20, RolesOptions(checkpoints=checkpoints))
    assert found is not None, model
    return found.result


@pytest.mark.parametrize("model", [TRAINED_MODEL, DEFAULT_MODEL])
def test_head_roles_opens_drawn_from_the_shipped_file(model, monkeypatch):
    """The page opens drawn for the default model and the trained decoder, without a button and without a probe made
    (make_probe counted): its scores are the shipped file's; the decoder's Over training tab draws the file's
    checkpoints."""
    probes = []
    monkeypatch.setattr(roles_module, "make_probe", lambda *a: probes.append(a))  # a computation would fail here
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=model)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not [b for b in at.button if str(b.key).startswith("compute:")] and not probes
    assert any("precomputed, shipped" in c.value for c in at.caption)
    drawn = {f.key: json.loads(f.spec) for f in figures(at)}
    shipped = shipped_roles(model)["scores"]
    for score in ("induction", "previous", "first_share"):
        z = plotly_values(drawn[f"roles_{score}"]["data"][0]["z"])
        np.testing.assert_allclose(z, np.array(shipped[score], float), rtol=0, atol=TOLERANCE, err_msg=score)
    if model == TRAINED_MODEL:
        steps = tuple(checkpoints_of(model))
        training = open_tab(at, "roles_tab", HEAD_ROLES["training"])
        assert not training.exception and not [b for b in training.button if str(b.key).startswith("compute:")]
        (lines,) = [json.loads(f.spec) for f in figures(training) if f.key.startswith("roles_training")]
        (induction,) = [t for t in lines["data"] if t["name"] == "largest induction score"]
        expected = [
            np.max(np.array(p["scores"]["induction"], float)) for p in shipped_roles(model, steps)["checkpoints"]
        ]
        np.testing.assert_allclose(plotly_values(induction["y"]), expected, rtol=0, atol=TOLERANCE)
    assert not probes


def test_the_tours_induction_step_opens_from_the_shipped_checkpoints(monkeypatch):
    """The Tour's step 8 draws the trained decoder's lines from the shipped file, no probe made."""
    probes = []
    monkeypatch.setattr(roles_module, "make_probe", lambda *a: probes.append(a))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(step="8")
    at.run()
    at.switch_page("app_pages/tour/page.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not probes and any("precomputed, shipped" in c.value for c in at.caption)
    (lines,) = [json.loads(f.spec) for f in figures(at) if "induction" in f.key]
    steps = tuple(checkpoints_of(TRAINED_MODEL))
    expected = [
        np.max(np.array(p["scores"]["induction"], float)) for p in shipped_roles(TRAINED_MODEL, steps)["checkpoints"]
    ]
    np.testing.assert_allclose(plotly_values(lines["data"][0]["y"]), expected, rtol=0, atol=TOLERANCE)


def test_a_picked_head_opens_on_the_probe_and_in_the_live_page(gpt2_dir):
    at = roles_page(str(gpt2_dir), pick="2-3")
    probe = probe_text(load_model(str(gpt2_dir)), LINK_REPEAT)
    assert probe.exact and len(probe.words) == LINK_REPEAT  # one token per word: the stripe lies at 1 - s
    (view,) = view_datas(at)
    own = run(load_model(str(gpt2_dir)), probe.text)
    assert view["layer"] == 2 and view["heads"] == [3] and view["left"] == [pretty_token(t) for t in own.tokens]
    (link,) = [b.proto.url for b in at.get("link_button")]
    params = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    assert params == {"model": str(gpt2_dir), "a": probe.text, "view": "head", "layer": "2", "head": "3", "heads": "3"}

    live = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)  # the link's state opens the Live page
    live.query_params.update(params)
    live.run()
    assert not live.exception, [e.value for e in live.exception]
    (data,) = view_datas(live)
    assert data["layer"] == 2 and data["heads"] == [3] and data["left"] == view["left"]


def test_an_encoder_is_told_what_the_probe_means_for_it_beside_a_decoder(minilm, gpt2_dir, library):
    at = roles_page("all-MiniLM-L6-v2", cmp=str(gpt2_dir))
    asks = [b for b in at.button if str(b.key).startswith("compute:")]  # the second model's, asked for in turn
    if asks:
        asks[0].click().run()
    assert any("bidirectional" in i.value for i in at.info)
    drawn = {f.key: json.loads(f.spec) for f in figures(at)}
    assert {"roles_map_1", "roles_map_2", "roles_copying_2"} <= set(drawn) and "roles_copying_1" not in drawn
    z = plotly_values(drawn["roles_induction_2"]["data"][0]["z"])  # the decoder's, beside the encoder's
    np.testing.assert_allclose(z, library.scores.induction, rtol=0, atol=TOLERANCE)
    copying_note = [c.value for c in at.caption if "no copying score" in c.value]
    assert copying_note and "unembedding" in copying_note[0]
    causal = open_tab(at, "roles_tab", HEAD_ROLES["causal"])
    assert [f.key for f in figures(causal)] == ["roles_causal_2"]  # the decoder's bars only
    assert any("no causal check" in i.value and "does not predict the next token" in i.value for i in causal.info)


@pytest.fixture(scope="module")
def checkpoints_dir(tmp_path_factory):
    """A folder of two checkpoints of a tiny GPT-2, step0/ and step100/ (biases and norms moved), as training saves."""
    folder = tmp_path_factory.mktemp("checkpoints")
    save_tiny("gpt2", folder / "step0")
    later = save_tiny("gpt2", folder / "step100")
    model = AutoModelForCausalLM.from_pretrained(later)
    move_off_initial(model, seed=3).save_pretrained(later)
    return folder


def test_the_lines_over_training_are_the_librarys_checkpoints(checkpoints_dir):
    at = roles_page(str(checkpoints_dir / "step100"), tab="training")
    asks = [b for b in at.button if str(b.key).startswith("compute:")]  # the checkpoints, asked for in the tab
    asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    (lines,) = [json.loads(f.spec) for f in figures(at) if f.key == "roles_training"]
    steps = [str(checkpoints_dir / "step0"), str(checkpoints_dir / "step100")]
    own = analyse("roles", steps[1], checkpoints=tuple(steps)).result.checkpoints
    (induction,) = [t for t in lines["data"] if t["name"] == "largest induction score"]
    assert list(plotly_values(induction["x"])) == [0, 100]
    expected = [float(np.max(p.scores.induction)) for p in own]
    np.testing.assert_allclose(plotly_values(induction["y"]), expected, rtol=0, atol=TOLERANCE)
    (gain,) = [t for t in lines["data"] if t["name"].startswith("in-context gain")]
    np.testing.assert_allclose(plotly_values(gain["y"]), [p.in_context_gain for p in own], rtol=0, atol=TOLERANCE)


def test_the_trained_decoders_induction_head_shows_its_stripe_in_the_live_page():
    """The shipped trained decoder: its best induction head opens first on the probe, and the Live page that the
    link opens draws, from most rows of the second repeat, the strongest line to the word after the first occurrence
    (offset 1 - s)."""
    at = roles_page(TRAINED_MODEL)
    (link,) = [b.proto.url for b in at.get("link_button")]
    params = {k: v[0] for k, v in parse_qs(urlsplit(link).query).items()}
    found = analyse("roles", TRAINED_MODEL).result.scores.induction
    best = np.unravel_index(int(np.argmax(found)), found.shape)
    assert (params["layer"], params["head"]) == (str(best[0] + 1), str(best[1] + 1)) and found[best] >= 0.4
    live = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    live.query_params.update(params)
    live.run()
    (data,) = view_datas(live)
    probe = probe_text(load_model(TRAINED_MODEL), LINK_REPEAT)
    s, first = len(probe.words), len(data["left"]) - 2 * len(probe.words)  # first: the BOS, where it has one
    lines = unpack(data["lines"])
    strongest = {}
    for (_, row, key), weight in lines.items():
        if weight > strongest.get(row, (0, -1))[1]:
            strongest[row] = (key, weight)
    second = range(first + s + 1, first + 2 * s)  # a query of the second repeat whose next word was seen before
    on_stripe = [strongest[i][0] == i - s + 1 for i in second if i in strongest]
    assert len(on_stripe) == len(second) and sum(on_stripe) >= 0.5 * len(second), on_stripe


def induction_by_hand(maps: np.ndarray, ids: list[int]) -> np.ndarray:
    """TransformerLens's induction "mul" score of every head, from its definition: the share of each map on keys j
    whose previous token equals the query's token (j - 1 < i)."""
    n = len(ids)
    pattern = np.zeros((n, n))
    for i in range(n):
        for j in range(1, i + 1):
            pattern[i, j] = ids[j - 1] == ids[i]
    a = maps.astype(np.float64)
    return (a * pattern).sum((-2, -1)) / a.sum((-2, -1))


def test_the_live_head_finder_scores_the_role_patterns_on_the_current_text(minilm):
    text = "the red fox saw the red fox"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(view="finder", a=text)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    own = run(minilm, text)
    expected = induction_by_hand(own.attentions, own.input_ids)
    best = np.unravel_index(int(np.argmax(expected)), expected.shape)
    button = at.button(key="role_pick_induction_1")
    assert button.label == f"{best[0] + 1}-{best[1] + 1} · {expected[best]:.3f}"
    at.button(key="role_probe").click().run()
    assert at.text_area(key="text_a").value == probe_text(minilm).text


@pytest.mark.parametrize("limit", [LIMIT, 20])
def test_the_retrieval_tabs_haystack_is_the_pages_corpus_and_its_json_the_commands(limit, monkeypatch):
    """The trained decoder's needle test on the page (the default options): on the page's corpus where it is long
    enough (the first 20 classroom sentences: 361 tokens, the haystack 216), else on EWT dev, said; its JSON download
    is, byte for byte, what `attnlib retrieval --json` prints on that haystack."""
    at = roles_page(TRAINED_MODEL, tab="retrieval", limit=str(limit))
    (run_test,) = [b for b in at.button if str(b.key) == f"compute:retrieval:{TRAINED_MODEL}"]
    with downloads_on_click() as drawn:
        run_test.click().run()
    assert not at.exception, [e.value for e in at.exception]
    (said,) = [c.value for c in at.caption if c.value.startswith("Haystack:")]
    own = limit >= 20
    assert ("the page's corpus" in said) == own and ("too short" in said and "EWT dev" in said) == (not own)
    monkeypatch.chdir(ROOT)
    corpus = ["--corpus", "data/classroom_single.txt", "--limit", str(limit)] if own else []
    ran = run_cli("retrieval", "--model", TRAINED_MODEL, *corpus, "--json")
    assert ran.code == 0, ran.err
    assert drawn["retrieval.json"]() + b"\n" == ran.out.encode()
