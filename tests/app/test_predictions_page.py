"""The Predictions page (METHODS §21) on the trained decoder: what it draws is the model's own softmax (the prediction),
`attnlib lens` (the attribution heatmap, a node's lens table, a head's readout) and `attnlib routes` (the route's edges,
a head's contribution map), the model's own attention (a head's attention map); bad input is said in one sentence;
the default model shows its routes, says why the rest needs an LM head and opens the trained decoder in one click; the
corpus's route frequency is `attnlib routes --corpus`'s."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from attnlib.analyses.registry import analyse
from attnlib.core.corpus import read_corpus
from attnlib.core.model import DEFAULT_MODEL, TRAINED_MODEL, load_model
from attnlib.core.runner import encode, run
from attnlib.results.shipped import CLASSROOM_SINGLE, ROOT
from support.apptest import figures, plotly_values, tables

pytestmark = pytest.mark.slow
PAGE = "app_pages/predictions/page.py"
PROMPT = "Great res ass pr own che are St As man Great res ass pr"
TOLERANCE = 1e-6  # float32 values as the figure's and the table's JSON carry them
LIMIT = 2


@pytest.fixture(scope="module")
def decoder():
    return load_model(TRAINED_MODEL)


def predictions_page(model: str = TRAINED_MODEL, **params: str) -> AppTest:
    """The app on the Predictions page for `model`, the URL's options given."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=model, **params)
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def drawn(at: AppTest) -> dict[str, dict]:
    return {f.key: json.loads(f.spec) for f in figures(at)}


def z_of(figure: dict, trace: int = 0) -> np.ndarray:
    return plotly_values(figure["data"][trace]["z"])


def test_the_prediction_is_the_models_own_softmax(decoder):
    at = predictions_page(text=PROMPT)
    prediction = next(t for t in tables(at) if "probability" in t.columns)
    ids = torch.tensor([encode(decoder, PROMPT).input_ids])
    with torch.inference_mode():
        own = decoder.causal_lm(input_ids=ids).logits[0, -1].float().softmax(-1)
    top = torch.topk(own, len(prediction))
    assert list(prediction["id"]) == top.indices.tolist()
    np.testing.assert_allclose(prediction["probability"], top.values.numpy(), rtol=0, atol=TOLERANCE)
    assert at.query_params["text"] == PROMPT  # the prompt is kept in the URL


def test_the_attribution_and_the_lens_are_the_librarys(decoder):
    at = predictions_page(text=PROMPT, pos="-1")
    lens = analyse("lens", decoder, text=PROMPT).result.to_json()
    figure = drawn(at)["pred_dla"]
    np.testing.assert_allclose(z_of(figure), np.asarray(lens["dla"]["heads"], float), rtol=0, atol=TOLERANCE)
    ffn = z_of(figure, 1)[:, 1]  # the feed-forward blocks beside the heads (after the attention biases)
    np.testing.assert_allclose(ffn, lens["dla"]["ffn"], rtol=0, atol=TOLERANCE)
    shown = tables(at)
    node = next(t for t in shown if "top token" in t.columns)  # the default node: the last layer's R at the position
    last = lens["nodes"][-1]
    assert last["kind"] == "R" and list(node["top logit"]) == pytest.approx([t["logit"] for t in last["top"]], abs=1e-6)
    readout = next(t for t in shown if "promoted" in t.columns)  # the head with the largest attribution
    heads = np.asarray(lens["dla"]["heads"], float)
    layer, head = np.unravel_index(int(np.argmax(np.abs(heads))), heads.shape)
    expected = lens["readouts"][layer][head]
    assert list(readout["promoted value"]) == pytest.approx([t["value"] for t in expected["promoted"]], abs=1e-6)


def test_the_route_and_a_heads_maps_are_the_librarys(decoder):
    at = predictions_page(text=PROMPT)
    routes = analyse("routes", decoder, text=PROMPT).result.to_json()
    nodes = {n["id"]: n for n in routes["nodes"]}
    t = routes["route"]["position"]
    route = [routes["edges"][e] for e in routes["route"]["edges"] if routes["edges"][e]["kind"] == "attention"]
    route.sort(key=lambda e: (nodes[e["target"]]["position"] != t, -e["weight"]))  # into the position first
    names = [f"{nodes[e['target']]['layer'] + 1}:{nodes[e['source']]['position']}>{nodes[e['target']]['position']}"
             for e in route]  # fmt: skip
    box = at.selectbox(key="pred_edge")
    assert box.value == names[0] and len(box.options) == len(names)  # the route's attention edges
    assert [o.rsplit(" ", 1)[1] for o in box.options] == [f"{e['weight']:.3f}" for e in route]
    edge = route[0]
    layer, key, query = (
        nodes[edge["target"]]["layer"],
        nodes[edge["source"]]["position"],
        nodes[edge["target"]]["position"],
    )
    head = int(np.argmax(edge["heads"]))  # the head with the largest share, opened first
    figures_now = drawn(at)
    contribution = z_of(figures_now["pred_contribution"])
    assert contribution[query, key] == pytest.approx(edge["heads"][head], abs=TOLERANCE)
    for e in routes["edges"]:  # the whole map: that head's share of every edge into that layer
        target = nodes[e["target"]]
        if e["kind"] == "attention" and target["layer"] == layer:
            assert contribution[target["position"], nodes[e["source"]]["position"]] == pytest.approx(
                e["heads"][head], abs=TOLERANCE
            )
    attention = run(decoder, PROMPT).attentions[layer, head]
    np.testing.assert_allclose(z_of(figures_now["pred_attention"]), attention, rtol=0, atol=TOLERANCE)


def test_an_edge_a_head_and_a_node_picked_in_the_url_open(decoder):
    routes = analyse("routes", decoder, text=PROMPT).result.to_json()
    nodes = {n["id"]: n for n in routes["nodes"]}
    edge = next(routes["edges"][e] for e in routes["route"]["edges"] if routes["edges"][e]["kind"] == "attention")
    target, source = nodes[edge["target"]], nodes[edge["source"]]
    name = f"{target['layer'] + 1}:{source['position']}>{target['position']}"
    at = predictions_page(text=PROMPT, edge=name, ehead=f"{target['layer'] + 1}-2", node=f"A1:{source['position']}")
    assert (
        at.selectbox(key="pred_edge").value == name
        and at.selectbox(key="pred_ehead").value == f"{target['layer'] + 1}-2"
    )
    contribution = z_of(drawn(at)["pred_contribution"])
    assert contribution[target["position"], source["position"]] == pytest.approx(edge["heads"][1], abs=TOLERANCE)
    if at.selectbox(key="pred_node").value == f"A1:{source['position']}":  # a node of the route: its lens
        lens = analyse("lens", decoder, text=PROMPT, position=source["position"]).result.to_json()
        (read,) = [n for n in lens["nodes"] if n["kind"] == "A" and n["layer"] == 0]
        table = next(t for t in tables(at) if "top token" in t.columns)
        assert list(table["top logit"]) == pytest.approx([t["logit"] for t in read["top"]], abs=1e-6)
    assert at.query_params["edge"] == name


@pytest.mark.parametrize(
    "params, said",
    [
        ({"text": ""}, "empty"),
        ({"text": PROMPT, "pos": "99"}, "outside the input"),
        ({"text": PROMPT, "thr": "1.5"}, "threshold"),
        ({"text": PROMPT, "tok": "Great res ass"}, "not one"),
    ],
)
def test_bad_input_is_said_in_one_sentence(params, said):
    at = predictions_page(**params)
    messages = [m.value for m in [*at.error, *at.warning, *at.info]]
    assert any(said in m for m in messages), messages
    assert at.query_params.get("text", "") == params["text"]  # nothing the visitor typed is lost


def test_the_default_model_shows_its_routes_and_opens_the_trained_decoder():
    at = predictions_page(DEFAULT_MODEL)
    assert "pred_graph" in drawn(at)  # the routes
    assert any("has none" in i.value and "language-model head" in i.value for i in at.info)
    assert "pred_dla" not in drawn(at)
    at.button(key="pred_open_decoder").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["model_name"] == TRAINED_MODEL and at.query_params["model"] == TRAINED_MODEL
    assert "pred_dla" in drawn(at)


def test_two_models_side_by_side():
    at = predictions_page(text=PROMPT, cmp=f"{TRAINED_MODEL}@step0")
    keys = set(drawn(at))
    assert {"pred_graph_1", "pred_graph_2", "pred_dla_1", "pred_dla_2"} <= keys


def test_the_route_frequency_is_the_corpus_commands(decoder):
    at = predictions_page(tab="corpus", limit=str(LIMIT))
    asks = [b for b in at.button if str(b.key).startswith("compute:")]
    if asks:
        asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    found = analyse("routes", decoder, corpus=read_corpus(CLASSROOM_SINGLE, limit=LIMIT)).result.to_json()
    np.testing.assert_allclose(
        z_of(drawn(at)["pred_frequency"]), np.asarray(found["frequency"], float), rtol=0, atol=TOLERANCE
    )
    table = next(t for t in tables(at) if "route_frequency" in t.columns)
    assert len(table) == np.asarray(found["frequency"]).size


SOURCE, TARGET = "The cat sat on the mat and the dog sat too.", "A dog sat."


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    from support.models import save_tiny

    return str(save_tiny("t5", tmp_path_factory.mktemp("predictions-t5")))


def test_an_encoder_decoders_cross_edge_opens_the_librarys_maps(t5_dir):
    """An encoder-decoder (the prompt its source, the target in the URL): the route graph is `attnlib routes`'s, a
    cross edge picked in the URL shows that cross head's share of every cross edge into its layer (the routes' JSON)
    beside the model's own cross-attention map, and a decoder node's lens is `attnlib lens`'s at that target position."""
    from attnlib.core.seq2seq import run_seq2seq

    lm = load_model(t5_dir)
    routes = analyse("routes", lm, text=SOURCE, target=TARGET).result.to_json()
    nodes = {n["id"]: n for n in routes["nodes"]}
    on_route = [routes["edges"][i] for i in routes["route"]["edges"]]
    cross = max((e for e in on_route if e["kind"] == "cross"), key=lambda e: e["weight"])  # into a node of the route
    target, source = nodes[cross["target"]], nodes[cross["source"]]
    layer, head = target["layer"], int(np.argmax(cross["heads"]))
    name = f"x{layer + 1}:{source['position']}>{target['position']}"
    at = predictions_page(t5_dir, text=SOURCE, target=TARGET, edge=name, ehead=f"{layer + 1}-{head + 1}",
                          node=f"dA{layer + 1}:{target['position']}")  # fmt: skip
    assert at.selectbox(key="pred_edge").value == name and at.query_params["target"] == TARGET
    figures_now = drawn(at)
    contribution = z_of(figures_now["pred_contribution"])
    assert contribution.shape == (len(routes["tokens"]), len(routes["source"]))
    for e in routes["edges"]:
        into = nodes[e["target"]]
        if e["kind"] == "cross" and into["layer"] == layer:
            j, i = nodes[e["source"]]["position"], into["position"]
            assert contribution[i, j] == pytest.approx(e["heads"][head], abs=TOLERANCE)
    own = run_seq2seq(lm, SOURCE, TARGET).cross[layer, head]
    np.testing.assert_allclose(z_of(figures_now["pred_attention"]), own, rtol=0, atol=TOLERANCE)
    assert "pred_graph" in figures_now and "pred_dla" in figures_now
    assert at.selectbox(key="pred_node").value == f"dA{layer + 1}:{target['position']}"
    lens = analyse("lens", lm, text=SOURCE, target=TARGET, position=target["position"]).result.to_json()
    (read,) = [n for n in lens["nodes"] if n["kind"] == "A" and n["layer"] == layer]
    table = next(t for t in tables(at) if "top token" in t.columns)
    assert list(table["top logit"]) == pytest.approx([t["logit"] for t in read["top"]], abs=1e-6)


def test_an_encoder_decoders_route_frequency_draws_its_three_attentions(t5_dir):
    at = predictions_page(t5_dir, tab="corpus", limit=str(LIMIT))
    asks = [b for b in at.button if str(b.key).startswith("compute:")]
    if asks:
        asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    found = analyse("routes", load_model(t5_dir), corpus=read_corpus(CLASSROOM_SINGLE, limit=LIMIT)).result.to_json()
    figures_now = drawn(at)
    for key, name in (("pred_frequency", "frequency"), ("pred_frequency_cross", "cross_frequency"),
                      ("pred_frequency_encoder", "encoder_frequency")):  # fmt: skip
        np.testing.assert_allclose(z_of(figures_now[key]), np.asarray(found[name], float), rtol=0, atol=TOLERANCE)
