"""An encoder-decoder on the Live page: the source and target boxes, the switch between encoder, decoder and cross
attention kept in the URL, and the head and model views of the part chosen equal to the model's own attentions."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app_pages.live.encoder_decoder import cached_norm_rows
from attnlib.core.model import load_model
from attnlib.core.runner import run
from attnlib.core.seq2seq import TARGET_FROM_TEXT, run_seq2seq
from attnlib.present.tour import STEPS
from attnlib.results.shipped import ROOT
from support.models import save_tiny
from support.pages import PAGES, open_live, rerun, run_computing, view_datas
from support.seq2seq import own_values
from ui.sources.live_inputs import pretty_token

pytestmark = pytest.mark.slow
SOURCE, TARGET = "The cat sat on the mat.", "A dog ran."


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory):
    return save_tiny("bart", tmp_path_factory.mktemp("bart-pages"))


def _pretty(tokens: list[str]) -> list[str]:
    return [t.replace("Ġ", " ").replace("▁", " ") for t in tokens]


def test_live_page_switches_between_encoder_decoder_and_cross_attention(bart_dir):
    at = open_live(model=str(bart_dir), a=SOURCE, target=TARGET, part="cross", layer="2")
    maps = run_seq2seq(load_model(str(bart_dir)), SOURCE, TARGET)
    source, target = _pretty(maps.source.tokens), _pretty(maps.target.tokens)
    (data,) = view_datas(at)
    assert at.slider(key="live_layer").value == 2
    assert (data["left"], data["right"]) == (target, source)  # cross: the target's tokens on the left
    assert (at.query_params["part"], at.query_params["target"]) == ("cross", TARGET)
    at.radio(key="live_part").set_value("decoder")
    (data,) = view_datas(rerun(at))
    assert data["left"] == data["right"] == target
    assert at.query_params["part"] == "decoder"
    at.radio(key="live_view").set_value("model")
    at.radio(key="live_part").set_value("encoder")
    (data,) = view_datas(rerun(at))
    assert data["left"] == data["right"] == source
    at.radio(key="live_part").set_value("cross")
    at.selectbox(key="live_head").set_value(3)
    (data,) = view_datas(rerun(at))
    assert (data["left"], data["right"], data["L"], data["H"]) == (target, source, 2, 4)
    assert data["sel"] == [1, 2]  # layer 2, head 3, 0-based
    at.radio(key="live_view").set_value("neuron")
    (data,) = view_datas(rerun(at))
    stripped = [[pretty_token(t) for t in tokens] for tokens in (maps.target.tokens, maps.source.tokens)]
    assert [data["query_labels"], data["labels"]] == stripped  # cross: the target's tokens are the queries


def test_live_page_without_a_target_says_where_the_target_came_from(bart_dir):
    at = open_live(model=str(bart_dir), a=SOURCE)
    maps = run_seq2seq(load_model(str(bart_dir)), SOURCE)
    said = TARGET_FROM_TEXT[maps.target.source]
    assert any(said in i.value and maps.target.text in i.value for i in at.info), [i.value for i in at.info]
    (data,) = view_datas(at)
    assert data["left"] == data["right"] == _pretty(maps.source.tokens)  # the encoder, by default
    assert any("encoder-decoder" in c.value for c in at.sidebar.caption)
    at.radio(key="live_view").set_value("neuron")
    at.radio(key="live_part").set_value("cross")
    (data,) = view_datas(rerun(at))  # the cross-attention of the target made for the page, not another
    assert data["query_labels"] == [pretty_token(t) for t in maps.target.tokens] and data["diff"] < 1e-6


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    return save_tiny("t5", tmp_path_factory.mktemp("t5-pages"))


def test_every_page_and_tour_step_opens_with_an_encoder_decoder(t5_dir):
    """T5 (no [CLS]) on each page and at each Tour step: nothing raises, the Live page draws it, the Predictions page
    says that the prompt is its source and the route runs from its decoder's prediction, every other page says that its
    statistics are the encoder's (METHODS §18)."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["model"], at.query_params["limit"] = str(t5_dir), "4"
    run_computing(at, "start")
    for page in PAGES:
        at.switch_page(page)
        run_computing(at, page)
        assert at.title and not at.exception, page
        said = any("of its encoder's self-attention" in c.value for c in at.caption)
        assert said == (page not in ("app_pages/live/page.py", "app_pages/predictions/page.py")), page
        if page == "app_pages/predictions/page.py":
            assert any("The prompt is its source" in c.value for c in at.caption)
    for step in range(1, len(STEPS) + 1):
        at.switch_page("app_pages/tour/page.py")
        at.query_params["step"] = str(step)
        at.session_state["tour_step"] = step
        run_computing(at, f"tour step {step}")
        assert not at.exception, step


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_an_encoder_decoder_is_not_drawn_beside_another_model(bart_dir, tiny_model_dir):
    at = open_live(model=str(tiny_model_dir), cmp=str(bart_dir), a=SOURCE)
    assert len(view_datas(at)) == 1 and any("is an encoder-decoder: open it as the model" in i.value for i in at.info)
    at = open_live(model=str(bart_dir), cmp=str(tiny_model_dir), a=SOURCE)
    assert len(view_datas(at)) == 1 and any("not drawn beside an encoder-decoder" in c.value for c in at.caption)


@pytest.mark.parametrize("part", ["encoder", "decoder", "cross"])
def test_the_norms_switch_draws_each_parts_value_weighted_norms(bart_dir, part):
    """Shows: norms draws A[i,j] ||f_h(x_j)|| with each row normalised (METHODS §11) for every part, kept in the URL;
    the rows drawn are those of each part's own values (the decoder's and cross-attention's from the modules' own value
    and output projections, support.seq2seq; the encoder's from a run of the encoder stack alone)."""
    at = open_live(model=str(bart_dir), a=SOURCE, target=TARGET, part=part, layer="2")
    (weights,) = view_datas(at)
    at.radio(key="live_show").set_value("norms")
    (data,) = view_datas(rerun(at))
    assert at.query_params["show"] == "norms" and "norms" in data["title"] and "‖α f(x)‖" in data["quantity"]
    assert {k: v for k, v in data.items() if k not in ("title", "quantity")} != {
        k: v for k, v in weights.items() if k not in ("title", "quantity")
    }  # the norms, not the weights
    lm = load_model(str(bart_dir))
    maps = run_seq2seq(lm, SOURCE, TARGET)
    attentions = maps.part(part)[0].astype(np.float64)
    if part == "encoder":
        value_norms = run(lm, SOURCE, capture_norms=True).value_norm.astype(np.float64)
    else:
        own = own_values(lm, "bart", part, maps.source.input_ids, maps.target.input_ids)
        value_norms = np.linalg.norm(np.stack(own.vectors), axis=-1)
    weighted = attentions * value_norms[..., None, :]
    expected = weighted / weighted.sum(-1, keepdims=True)
    np.testing.assert_allclose(cached_norm_rows(str(bart_dir), SOURCE, TARGET, part), expected, atol=1e-5)
    if part == "decoder":
        assert not np.triu(cached_norm_rows(str(bart_dir), SOURCE, TARGET, part), 1).any()
