"""AppTest of the live page: typing, layer and head, the views, the pair filter, the level switch, the URL, the finder."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.shipped import ROOT


def open_live(**params: str) -> AppTest:
    """The app at its default page (live), opened with the given URL parameters."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def view_data(at: AppTest) -> dict:
    """The JSON embedded in the page's view iframe."""
    frames = at.get("iframe")
    assert len(frames) == 1
    html = frames[0].proto.srcdoc
    match = re.search(r"<script type='application/json' id='data'>(.*?)</script>", html, re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception
    return at


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


def test_head_finder_ranks_heads_and_opens_one_in_the_head_view():
    at = open_live(view="finder")
    buttons = [b for b in at.button if b.key and b.key.startswith("pick_")]
    assert len(buttons) == 8 * 3
    assert at.dataframe[0].value.shape[0] == 24
    prev_best = next(b for b in buttons if b.key == "pick_prev_1")
    label = prev_best.label.split(" ")[0]  # "layer-head", 1-based
    prev_best.click()
    rerun(at)
    layer, head = (int(x) for x in label.split("-"))
    data = view_data(at)
    assert data["layer"] == layer and data["heads"] == [head]
    assert at.query_params["view"] == "head" and at.query_params["heads"] == str(head)


def test_downloads_are_offered_in_the_neuron_view():
    at = open_live(view="neuron")
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download attention (CSV)", "Download attention (JSON)", "Download figure (HTML)"]
