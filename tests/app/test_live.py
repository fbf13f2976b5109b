"""AppTest of the live page: typing, layer and head, the views, the pair filter, the level switch, the URL, the finder,
the corpus search (METHODS §16), and every family's views."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.core.corpus import read_corpus
from attnlib.core.runner import run
from attnlib.core.words import word_level_attention
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.search.by_example import search_corpus
from support.apptest import figures, plotly_values, tables
from support.pages import TEXT_A, TEXT_B, open_live, rerun, view_data, view_datas
from support.reference import independent_norms


@pytest.fixture(scope="module")
def live() -> AppTest:
    return open_live()


def test_head_view_by_default_with_every_head_and_a_one_based_note(live):
    data = view_data(live)
    assert data["layer"] == 1 and data["heads"] == list(range(1, 13))
    assert data["left"][:3] == ["[CLS]", "i", "went"] and "##berries" in data["right"]
    assert any("numbered from 1" in c.value for c in live.caption)
    assert live.query_params["view"] == "head" and live.query_params["layer"] == "1"


def test_typing_changing_layer_and_heads(live):
    live.text_area(key="text_a").input("The cat sat on the mat.")
    live.text_area(key="text_b").input("")
    rerun(live)
    live.slider(key="live_layer").set_value(4)
    live.pills(key="live_heads").set_value([2, 7])
    rerun(live)
    data = view_data(live)
    assert data["left"] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", ".", "[SEP]"]
    assert data["layer"] == 4 and data["heads"] == [2, 7]
    assert live.query_params["a"] == "The cat sat on the mat." and "b" not in live.query_params
    assert live.query_params["layer"] == "4" and live.query_params["heads"] == "2,7"
    assert "live_filter" not in [r.key for r in live.radio]  # the pair filter is for pairs only
    live.selectbox(key="live_token").set_value(3)
    rerun(live)
    data = view_data(live)
    assert data["selected"] == 2 and len(data["selRows"]) == 2  # 1-based token 3 is row 2; one row per head
    assert live.query_params["token"] == "3"


def test_switching_views_keeps_layer_and_head():
    at = open_live(layer="3")
    at.radio(key="live_view").set_value("model")
    rerun(at)
    at.selectbox(key="live_head").set_value(5)
    rerun(at)
    data = view_data(at)
    assert data["L"] == 6 and data["H"] == 12 and data["sel"] == [2, 4] and data["mode"] == "lines"
    assert at.query_params["view"] == "model" and at.query_params["head"] == "5"
    at.radio(key="live_view").set_value("neuron")
    rerun(at)
    data = view_data(at)
    assert (data["layer"], data["head"], data["qi"], data["d"]) == (3, 5, 0, 32)
    assert data["diff"] < 1e-5
    at.selectbox(key="live_token").set_value(6)
    rerun(at)
    assert view_data(at)["qi"] == 5 and view_data(at)["labels"][5] == "store"
    at.radio(key="live_view").set_value("head")
    rerun(at)
    assert view_data(at)["layer"] == 3


def test_pair_filter_keeps_one_sentence_on_each_side():
    at = open_live()
    at.radio(key="live_filter").set_value("A→B")
    rerun(at)
    data = view_data(at)
    assert data["left"] == ["[CLS]", "i", "went", "to", "the", "store", ".", "[SEP]"]
    assert data["right"][0] == "at" and data["right"][-1] == "[SEP]" and "i" in data["right"]
    assert at.query_params["filter"] == "ab"
    at.radio(key="live_filter").set_value("B→A")
    rerun(at)
    assert view_data(at)["left"][0] == "at"


def test_level_switch_merges_word_pieces_and_the_row_rule_is_kept():
    at = open_live()
    at.radio(key="live_level").set_value("word")
    rerun(at)
    data = view_data(at)
    assert "strawberries" in data["left"] and "##berries" not in data["left"]
    assert len(data["left"]) == 18  # 19 tokens, "straw ##berries" merged
    at.selectbox(key="live_rule").set_value("max")
    rerun(at)
    assert at.query_params["level"] == "word" and at.query_params["rule"] == "max"
    assert "max" in view_data(at)["title"]


def test_a_link_reopens_the_same_view():
    first = open_live()
    first.radio(key="live_view").set_value("model")
    rerun(first)
    first.slider(key="live_layer").set_value(5)
    first.selectbox(key="live_head").set_value(9)
    first.radio(key="live_level").set_value("word")
    rerun(first)
    params = {k: first.query_params[k] for k in first.query_params}
    again = open_live(**params)
    for key in ("live_view", "live_layer", "live_head", "live_level", "live_rule"):
        assert again.session_state[key] == first.session_state[key], key
    assert view_data(again)["sel"] == [4, 8]


def test_bad_url_values_fall_back_to_defaults():
    at = open_live(view="nonsense", layer="99", head="x", token="1000", heads="0,3,40")
    assert at.session_state["live_view"] == "head"
    assert at.session_state["live_layer"] == 6  # clamped to the model's last layer
    assert at.session_state["live_token"] == 0
    assert view_data(at)["heads"] == [3]


def test_the_state_is_kept_inside_the_model_and_the_input():
    """LiveState.within: 6 layers, 12 heads and 19 units; one head shown in the head view is the chosen head."""
    from app_pages.live.live_state import LiveState

    chosen = LiveState(
        view="head", level="token", rule="mean", show="weights", layer=9, head=0, heads=None, token=20,
        pair_filter="All", off="", click=False, find=False,
    )  # fmt: skip
    kept = chosen.within(6, 12, 19)
    assert (kept.layer, kept.head, kept.heads, kept.token, kept.selected) == (6, 1, list(range(1, 13)), 0, None)
    one = replace(chosen, heads=[13, 4, 4, 0], token=19).within(6, 12, 19)
    assert (one.heads, one.selected, one.one_head_shown().head) == ([4], 18, 4)
    assert replace(one, view="model").one_head_shown().head == 1  # the other views keep their own head


def test_downloads_are_offered_in_the_neuron_view():
    at = open_live(view="neuron")
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download attention (CSV)", "Download attention (JSON)", "Download figure (HTML)"]


# ---------- weights / norms (issue 14) and two models side by side (issue 17) ----------------------------------------


@pytest.fixture(scope="module")
def norms_reference(minilm):
    return independent_norms(minilm, TEXT_A, TEXT_B)


def test_norms_switch_draws_rows_of_value_weighted_norms_and_is_kept_in_the_url(norms_reference):
    attn, _, rows = norms_reference
    at = open_live(layer="3", token="6")
    assert at.session_state["live_show"] == "weights"
    np.testing.assert_allclose(view_data(at)["selRows"], attn[2, :, 5], atol=6e-4)  # 12 heads, row of "store"
    at.radio(key="live_show").set_value("norms")
    rerun(at)
    data = view_data(at)
    assert at.query_params["show"] == "norms" and "norms" in data["title"] and "‖α f(x)‖" in data["quantity"]
    np.testing.assert_allclose(data["selRows"], rows[2, :, 5], atol=6e-4)
    assert np.abs(rows[2, :, 5] - attn[2, :, 5]).max() > 0.05  # the norms view draws something else than weights
    assert any("METHODS" in e.label and "§11" in e.label for e in at.expander)
    again = open_live(**{k: at.query_params[k] for k in at.query_params})  # the link reopens the norms view
    assert again.session_state["live_show"] == "norms"
    np.testing.assert_allclose(view_data(again)["selRows"], rows[2, :, 5], atol=6e-4)


def test_norms_at_word_level_aggregate_the_norm_rows_like_the_weights(minilm, norms_reference):
    _, _, rows = norms_reference
    at = open_live(show="norms", level="word", layer="5", token="16")
    data = view_data(at)
    words = word_level_attention(rows, run(minilm, TEXT_A, TEXT_B).word_ids, "mean")
    assert data["left"][15] == "strawberries" and len(data["left"]) == 18
    np.testing.assert_allclose(data["selRows"], words[4, :, 15], atol=6e-4)
    np.testing.assert_allclose(np.sum(data["selRows"], axis=-1), 1.0, atol=3e-3)


def test_model_view_switches_to_norms():
    at = open_live(view="model", show="norms")
    data = view_data(at)
    assert "norms" in data["title"] and "‖α f(x)‖" in data["quantity"] and data["mode"] == "lines"
    assert at.radio(key="live_show").value == "norms"


def test_value_norms_are_drawn_beside_the_neuron_view(norms_reference):
    _, vnorm, _ = norms_reference
    at = open_live(view="neuron", layer="2", head="3")
    assert at.radio(key="live_show").disabled
    charts = figures(at)
    assert len(charts) == 1
    bar = json.loads(charts[0].spec)["data"][0]
    np.testing.assert_allclose(plotly_values(bar["x"]), vnorm[1, 2], rtol=1e-4, atol=1e-4)
    assert bar["y"][:3] == ["1: [CLS]", "2: i", "3: went"]


# ---------- slow tests


@pytest.mark.slow
def test_head_finder_ranks_heads_and_opens_one_in_the_head_view():
    at = open_live(view="finder")
    buttons = [b for b in at.button if b.key and b.key.startswith("pick_")]
    assert len(buttons) == 8 * 3
    assert tables(at)[0].shape[0] == 24
    prev_best = next(b for b in buttons if b.key == "pick_prev_1")
    label = prev_best.label.split(" ")[0]  # "layer-head", 1-based
    prev_best.click()
    rerun(at)
    layer, head = (int(x) for x in label.split("-"))
    data = view_data(at)
    assert data["layer"] == layer and data["heads"] == [head]
    assert at.query_params["view"] == "head" and at.query_params["heads"] == str(head)


def differ_by_hand(lm_a, lm_b) -> str:
    """The largest per-layer difference of the shares (mean over heads), worked out with numpy on both runs."""
    shares = []
    for lm in (lm_a, lm_b):
        r = run(lm, TEXT_A, TEXT_B)
        a, n = r.attentions.astype(np.float64), r.n
        punct = np.isin(r.tokens, [".", ","])
        per = {
            "[CLS] share": a[..., r.cls_mask].sum(-1).mean(-1),
            "[SEP] share": a[..., r.sep_mask].sum(-1).mean(-1),
            "punctuation share": a[..., punct].sum(-1).mean(-1),
            "previous-token share": np.diagonal(a, -1, -2, -1).sum(-1) / n,
            "own-token share": np.diagonal(a, 0, -2, -1).sum(-1) / n,
            "next-token share": np.diagonal(a, 1, -2, -1).sum(-1) / n,
        }
        shares.append({k: v.mean(axis=1) for k, v in per.items()})
    depth = min(len(shares[0]["[CLS] share"]), len(shares[1]["[CLS] share"]))
    k, l = max(
        ((k, l) for k in shares[0] for l in range(depth)),
        key=lambda p: abs(shares[0][p[0]][p[1]] - shares[1][p[0]][p[1]]),
    )
    return f"{k} in layer {l + 1}, {shares[0][k][l]:.2f} vs {shares[1][k][l]:.2f}"


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_two_models_side_by_side_in_the_head_view(minilm, tiny_model_dir, tiny_model):
    at = open_live(cmp=str(tiny_model_dir), layer="4", heads="2,7", token="3")
    first, second = view_datas(at)
    assert (first["layer"], first["heads"]) == (4, [2, 7])
    assert (second["layer"], second["heads"]) == (2, [2])  # the tiny model has 2 layers and 4 heads
    assert tiny_model.facts.name in second["title"] and minilm.facts.name in first["title"]
    assert first["selected"] == second["selected"] == 2
    lines = [c.value for c in at.caption if "largest difference" in c.value]
    assert len(lines) == 1 and differ_by_hand(minilm, tiny_model) in lines[0]
    assert [b.label for b in at.get("download_button")][-2:] == [
        "Download figure (HTML)",
        f"Figure of {tiny_model.facts.name} (HTML)",
    ]
    at.radio(key="live_view").set_value("model")
    rerun(at)
    assert [(d["L"], d["H"], d["sel"]) for d in view_datas(at)] == [(6, 12, [3, 0]), (2, 4, [1, 0])]


@pytest.mark.usefixtures("one_thread")
def test_live_page_draws_every_view(family_dir, family_model):
    """The Live page with each family: head, model and neuron views without an exception; the neuron view's
    softmax equals the model's attention row."""
    from streamlit.testing.v1 import AppTest

    from attnlib.results.shipped import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["model"] = str(family_dir)
    at.query_params["view"] = "neuron"
    at.query_params["layer"] = str(family_model.facts.n_layers)  # ModernBERT's local layer
    at.query_params["token"] = "2"
    at.run()
    assert not at.exception, at.exception
    assert any("equals the model's attention row" in c.value for c in at.caption), [c.value for c in at.caption]
    for view in ("model", "head"):
        at.session_state["live_view"] = view
        at.run()
        assert not at.exception, (view, at.exception)
    if any(family_model.facts.windows):
        at.session_state["live_view"] = "model"
        at.run()
        assert any("Local attention" in c.value for c in at.caption)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.slow
def test_live_page_search_section(minilm):
    """Off by default (no corpus widgets drawn); on with a token: k matches, each its strip and an Open button that
    puts its sentence in the head view with its token selected; the state is in the URL."""
    from support.apptest import figures
    from support.pages import open_live, rerun

    at = open_live(a="The cat sat on the mat.", b="", layer="3", token="3")
    assert not at.toggle(key="live_find").value and "find" not in at.query_params
    assert not [s for s in at.subheader if s.value == "Corpus"]
    at.toggle(key="live_find").set_value(True)
    at.session_state["live_find_corpus"] = "Classroom set: single sentences"
    at.session_state["live_find_k"] = 5
    rerun(at)
    strips = [m for m in at.markdown if "attn-strip" in m.value]
    assert len(strips) == 5 and at.query_params["find"] == "1" and at.query_params["k"] == "5"
    assert at.query_params["corpus"] == "classroom-single"
    assert any("Key each head attends to most" in f.spec for f in figures(at))
    assert any("no gold UPOS" in c.value for c in at.caption)  # a text corpus: the class counts only
    expected = search_corpus(minilm, "The cat sat on the mat.", 2, CLASSROOM_SINGLE, layer=2, k=5)
    assert [m.input + 1 for m in expected.matches] == [int(s.value.split("· input ")[1].split(",")[0]) for s in strips]
    at.button(key="find0_open_1").click()
    rerun(at)
    first = read_corpus(CLASSROOM_SINGLE)[expected.matches[0].input]
    assert at.text_area(key="text_a").value == first.text_a
    assert at.query_params["token"] == str(expected.matches[0].position + 1)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_live_page_searches_both_models(tiny_model_dir):
    """With a second model under Compare with, the same query runs in both, each against its own index."""
    from support.pages import open_live

    at = open_live(
        a="The cat sat on the mat.", b="", layer="3", token="3", find="1", corpus="classroom-single", k="4",
        cmp=str(tiny_model_dir),
    )  # fmt: skip
    strips = [m for m in at.markdown if "attn-strip" in m.value]
    searched = [c.value for c in at.caption if c.value.startswith("Searched: ")]
    assert len(strips) == 8 and len(searched) == 2
    assert "layer 3 output" in searched[0] and "layer 2 output" in searched[1]  # the tiny model has 2 layers
    assert at.button(key="find1_open_1") is not None
