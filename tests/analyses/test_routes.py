"""The `routes` analysis and command (METHODS §21): the JSON's keys on a text and on a corpus, the graph's shape and the
route's edges, the prediction against the model's own logits, encoders and encoder-decoders, the corpus frequency on
Ray against the local run, bad input in one line, and the Tour's route on the shipped trained decoder (the induction
heads carry the last position's attention from the token after the earlier occurrence)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlib
from attnlib.analyses.base import OptionError, run_analysis
from attnlib.analyses.routes import RouteFrequency, RouteGraph, RoutesOptions
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import load_model
from attnlib.core.runner import InputError, encode, model_inputs
from attnlib.results.shipped import CLASSROOM_SINGLE
from support.cli import cli_json, run_cli
from support.models import save_tiny
from support.scale import requires_ray

TEXT = "The cat sat on the mat and the cat sat."
TEXT_KEYS = {"model", "tokens", "threshold", "mode", "nodes", "edges", "route", "prediction"}
CORPUS_KEYS = {"model", "frequency", "routes", "threshold", "mode"}
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Tiny models by kind, each saved once."""
    made: dict = {}

    def folder(kind: str) -> str:
        if kind not in made:
            made[kind] = str(save_tiny(kind, tmp_path_factory.mktemp(f"routes-{kind}")))
        return made[kind]

    return folder


@pytest.mark.parametrize("mode", ["renormalise", "cut"])
def test_text_json_is_a_graph_whose_route_reaches_back_from_the_prediction(tiny, mode):
    model = tiny("gpt2")
    printed = cli_json("routes", "--model", model, "--text", TEXT, "--position", "4", "--threshold", "0.05",
                       "--mode", mode, "--json")  # fmt: skip
    assert set(printed) == TEXT_KEYS
    n, layers = len(printed["tokens"]), 2
    assert len(printed["nodes"]) == n * (1 + 3 * layers)
    assert {node["kind"] for node in printed["nodes"]} == {"E", "A", "F", "R"}
    assert all(set(node) == {"id", "kind", "layer", "position"} for node in printed["nodes"])
    ids = {node["id"]: node for node in printed["nodes"]}
    for edge in printed["edges"]:
        assert edge["source"] in ids and edge["target"] in ids and edge["weight"] > 0.05
        assert set(edge) == ({"source", "target", "kind", "weight", "heads"} if edge["kind"] == "attention"
                             else {"source", "target", "kind", "weight"})  # fmt: skip
        if edge["kind"] == "attention":
            assert len(edge["heads"]) == 4 and np.isclose(sum(edge["heads"]), edge["weight"], atol=1e-5)
            assert ids[edge["source"]]["position"] <= ids[edge["target"]]["position"]  # causal
    route = printed["route"]
    assert route["position"] == 4 and printed["prediction"]["position"] == 4
    on_route = [printed["edges"][i] for i in route["edges"]]
    # every edge of the route leads on to the prediction's node R1_4: its target is that node or another edge's source
    sources = {edge["source"] for edge in on_route}
    assert on_route and all(edge["target"] in sources | {"R1_4"} for edge in on_route)
    assert all(ids[edge["target"]]["position"] <= 4 for edge in on_route)
    if mode == "renormalise":  # each node's kept parts sum to 1 (attention edges and the residual into A)
        into = {}
        for edge in printed["edges"]:
            if ids[edge["target"]]["kind"] == "A":
                into[edge["target"]] = into.get(edge["target"], 0.0) + edge["weight"]
        assert np.allclose(list(into.values()), 1.0, atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "gemma2"])
def test_the_prediction_is_the_models_own_next_token(tiny, kind):
    lm = load_model(tiny(kind))
    run = attnlib.routes(lm, text=TEXT, position=3)
    encoded = encode(lm, TEXT)
    with torch.no_grad():
        logits = lm.causal_lm(**model_inputs(lm, [encoded])).logits[0, 3]
    assert run.result.prediction["id"] == int(logits.argmax())
    assert run.result.prediction["token"] == lm.tokenizer.convert_ids_to_tokens(int(logits.argmax()))


@pytest.mark.parametrize(("kind", "part"), [("bert", "auto"), ("t5", "encoder"), ("bart", "encoder")])
def test_encoders_route_every_position_to_its_own_token(tiny, kind, part):
    """An encoder predicts nothing past its positions: the route ends at the position, whose token it names; so does
    an encoder-decoder's encoder (part encoder)."""
    run = attnlib.routes(tiny(kind), text=TEXT, position=1, part=part)
    graph = run.result
    assert isinstance(graph, RouteGraph) and graph.prediction["token"] == graph.tokens[1]
    assert any(graph.edges[i]["target"].startswith("R") for i in graph.route["edges"])
    assert not graph.crosses


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_an_encoder_decoders_route_runs_from_the_decoders_prediction_into_the_encoder(tiny, kind):
    """The decoder's route (the default part): the source's and the target's nodes, each with its part; the decoder's
    layers have S (after self-attention) and A (after cross-attention) nodes, its cross edges come from the encoder's
    last states with each cross head's share; the route leads on to the prediction's node; the prediction is the
    model's own next token at the target position."""
    from attnlib.core.seq2seq import encode_target, source_inputs

    model = tiny(kind)
    printed = cli_json("routes", "--model", model, "--text", TEXT, "--target", "A cat sat.", "--position", "2",
                       "--threshold", "0.0001", "--mode", "cut", "--json")  # fmt: skip
    assert set(printed) == TEXT_KEYS | {"kind", "part", "source", "target", "target_from"}
    assert printed["part"] == "decoder" and printed["target"] == "A cat sat." and printed["target_from"] == "given"
    nodes = {node["id"]: node for node in printed["nodes"]}
    layers = 2
    decoder = [n for n in nodes.values() if n["part"] == "decoder"]
    encoder = [n for n in nodes.values() if n["part"] == "encoder"]
    assert len(decoder) == len(printed["tokens"]) * (1 + 4 * layers)
    assert len(encoder) == len(printed["source"]) * (1 + 3 * layers)
    assert {n["kind"] for n in decoder} == {"E", "S", "A", "F", "R"} and all(n["id"].startswith("d") for n in decoder)
    cross = [e for e in printed["edges"] if e["kind"] == "cross"]
    assert cross, "a tiny model's cross-attention gives some edge above 1e-4"
    for edge in cross:
        source, target = nodes[edge["source"]], nodes[edge["target"]]
        assert (source["part"], source["kind"], source["layer"]) == ("encoder", "R", layers - 1)
        assert (target["part"], target["kind"]) == ("decoder", "A")
        assert len(edge["heads"]) == 4 and np.isclose(sum(edge["heads"]), edge["weight"], atol=1e-5)
    for edge in printed["edges"]:
        if edge["kind"] == "attention":
            assert nodes[edge["target"]]["kind"] == ("S" if nodes[edge["target"]]["part"] == "decoder" else "A")
    on_route = [printed["edges"][i] for i in printed["route"]["edges"]]
    sources = {edge["source"] for edge in on_route}
    assert on_route and all(edge["target"] in sources | {"dR1_2"} for edge in on_route)
    lm = load_model(model)
    source, target = encode(lm, TEXT), encode_target(lm, "A cat sat.")
    assert printed["source"] == source.tokens and printed["tokens"] == target.tokens
    with torch.no_grad():
        logits = lm.seq2seq(**source_inputs(lm, source), decoder_input_ids=torch.tensor([target.input_ids])).logits
    assert printed["prediction"] == {"position": 2, "id": int(logits[0, 2].argmax()),
                                     "token": lm.tokenizer.convert_ids_to_tokens(int(logits[0, 2].argmax()))}  # fmt: skip
    back = RouteGraph.read(printed)
    assert back.crosses and back.to_json() == {k: v for k, v in printed.items() if k != "model"}
    assert set(back.head_shares()) == {"decoder", "cross", "encoder"}
    assert set(back.tables("m")["Heads on the route"]["attention"]) == {"decoder", "cross", "encoder"}


def test_an_encoder_decoders_corpus_frequency_counts_its_three_attentions(tiny):
    """Over a corpus, every position of each input's greedy output: the decoder's self-attention heads (`frequency`),
    its cross-attention heads and its encoder's heads."""
    from attnlib.core.seq2seq import target_of

    printed = cli_json("routes", "--model", tiny("t5"), "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--json")
    assert set(printed) == CORPUS_KEYS | {"kind", "part", "cross_frequency", "encoder_frequency"}
    lm = load_model(tiny("t5"))
    lines = CLASSROOM_SINGLE.read_text(encoding="utf-8").splitlines()[:2]
    assert printed["routes"] == sum(len(target_of(lm, encode(lm, line), line, None).input_ids) for line in lines)
    for key in ("frequency", "cross_frequency", "encoder_frequency"):
        values = np.array(printed[key], float)
        assert values.shape == (2, 4) and np.all((values >= 0) & (values <= 1))
    back = RouteFrequency.from_json(printed)
    assert set(back.frequencies()) == {"decoder", "cross", "encoder"}
    assert back.to_json() == {k: v for k, v in printed.items() if k not in ("model", "kind")}


def test_corpus_json_is_each_heads_route_frequency(tiny):
    printed = cli_json("routes", "--model", tiny("llama"), "--corpus", str(CLASSROOM_SINGLE), "--limit", "2",
                       "--mode", "cut", "--json")  # fmt: skip
    assert set(printed) == CORPUS_KEYS and printed["mode"] == "cut" and printed["threshold"] == 0.04
    lm = load_model(tiny("llama"))
    lines = CLASSROOM_SINGLE.read_text(encoding="utf-8").splitlines()[:2]
    assert printed["routes"] == sum(encode(lm, line).n for line in lines)
    frequency = np.array(printed["frequency"])
    assert frequency.shape == (2, 4) and np.all((frequency >= 0) & (frequency <= 1))
    back = RouteFrequency.from_json(printed)
    assert isinstance(back, RouteFrequency)
    assert back.to_json() == {k: printed[k] for k in CORPUS_KEYS - {"model"}}


@pytest.mark.slow
@requires_ray
def test_corpus_frequency_on_ray_equals_the_local_run(tiny, local_ray):
    """A decoder's, and an encoder-decoder's three attentions' (the accumulators merged across workers)."""
    for kind in ("llama", "t5"):
        model = tiny(kind)
        local = attnlib.routes(model, corpus=CLASSROOM_SINGLE, limit=6)
        ray = attnlib.routes(model, corpus=CLASSROOM_SINGLE, limit=6, engine="ray", workers=2)
        assert ray.result.routes == local.result.routes
        for name, values in local.result.frequencies().items():
            assert np.array_equal(np.array(ray.result.frequencies()[name], float), np.array(values, float)), name


def test_bad_input_is_one_line(tiny, unknown_dir):
    model = tiny("gpt2")
    for argv, said in (
        (["--text", "  "], "is empty"),
        (["--text", TEXT, "--position", "40"], "position 40 is outside the input"),
        (["--text", TEXT, "--threshold", "0"], "threshold must be between 0 and 1"),
        (["--text", TEXT, "--threshold", "1"], "threshold must be between 0 and 1"),
        (["--text", TEXT, "--target", "A cat."], "are for encoder-decoder models"),
        ([], "routes reads a text (--text) or a corpus (--corpus)"),
    ):
        ran = run_cli("routes", "--model", model, *argv, "--json")
        assert ran.code == 2 and said in ran.error, (argv, ran.err)
    ran = run_cli("routes", "--model", str(unknown_dir), "--text", TEXT, "--json")
    assert ran.code == 2 and "not available for 'megatron-bert' models" in ran.error, ran.err
    with pytest.raises(OptionError, match="threshold must be between 0 and 1"):
        RoutesOptions(threshold=1.5)
    with pytest.raises(InputError, match="outside the input"):
        attnlib.routes(model, text=TEXT, position=-40)


def test_a_half_precision_checkpoint_is_routed_in_float32_unless_the_saved_dtype_is_asked(tmp_path):
    """A float16 checkpoint read in float32 gives the graph of the same (rounded) weights saved in float32; kept in
    float16 (dtype "saved") it is refused in words."""
    from attnlib.core.families import UnsupportedModelError

    half, full = (save_tiny("llama", tmp_path / name) for name in ("half", "full"))
    model = load_model(str(half)).causal_lm.to(torch.float16)
    model.save_pretrained(half)
    model.to(torch.float32).save_pretrained(full)  # the same weights, rounded to float16, saved in float32
    read = attnlib.routes(str(half), text=TEXT).to_json()
    assert read["model_dtype"] == {"analysed": "float32", "saved": "float16"}
    same = attnlib.routes(str(full), text=TEXT).to_json()
    assert {k: read[k] for k in TEXT_KEYS - {"model"}} == {k: same[k] for k in TEXT_KEYS - {"model"}}
    with pytest.raises(UnsupportedModelError, match="float32"):
        attnlib.routes(load_model(str(half), dtype="saved"), text=TEXT)


def test_a_request_that_would_not_fit_is_refused_in_one_line(tiny, monkeypatch):
    """One layer's weights and values of the input (4 heads x 11^2 floats and 4 x 11 x hidden) and the model's pass
    need more than 0.01 MB."""
    from attnlib.core.memory import MAX_RUN_MB_ENV

    monkeypatch.setenv(MAX_RUN_MB_ENV, "0.01")
    ran = run_cli("routes", "--model", tiny("gpt2"), "--text", TEXT, "--json")
    assert ran.code == 2 and "this server allows 0.01 MB per run" in ran.error, ran.err
    monkeypatch.setenv(MAX_RUN_MB_ENV, "100")
    assert run_cli("routes", "--model", tiny("gpt2"), "--text", TEXT, "--json").code == 0


def test_a_long_route_graph_says_its_cost_first(tiny, monkeypatch):
    """The cost said before a text's graph starts: layers x heads x n (n + 1) / 2 query-key pairs x hidden size L1
    terms at the kernel's measured rate (here made slow enough to be said; a short text says nothing)."""
    import attnlib.analyses.routes as routes_module

    lm = load_model(tiny("gpt2"))
    n = encode(lm, TEXT).n
    work = 2 * 4 * n * (n + 1) / 2 * lm.facts.hidden_size
    assert routes_module.route_cost(lm, CorpusInput(TEXT), RoutesOptions()) is None
    monkeypatch.setitem(routes_module.TERMS_PER_SECOND, "plain", work / 12.0)  # this text: 12 s with the plain kernel
    said = routes_module.route_cost(lm, CorpusInput(TEXT), RoutesOptions(kernel="plain"))
    assert said == f"the route graph of {n} tokens: about 12 s on one CPU thread (plain kernel; less on several)"
    noted: list[str] = []
    run_analysis(routes_module.ROUTES, lm, RoutesOptions(kernel="plain"), text=TEXT,
                                       note=noted.append)  # fmt: skip
    assert noted == [said]


def test_a_model_without_attention_is_refused_in_one_line(no_attention_dir):
    ran = run_cli("routes", "--model", str(no_attention_dir), "--text", TEXT, "--json")
    assert ran.code == 2 and ran.error, ran.err


# the Tour's prompt: 20 one-token words of the shipped decoder's vocabulary, then their first 10 again
TOUR_WORDS = ["ph", "from", "did", "started", "vis", "do", "tra", "business", "level", "public", "night", "bo", "less", "needed", "break", "forward", "cl", "Great", "ind", "rather"]  # fmt: skip
TOUR_TEXT = " ".join(TOUR_WORDS + TOUR_WORDS[:10])


@pytest.mark.slow
def test_the_tours_route_runs_through_the_induction_heads():
    """At the last position t (the 10th word said again), layer 1's largest attention edge comes from the token after
    the earlier occurrence (t - 19), carried by heads 1-0, 1-1 and 1-2 (0-based; the fourth gives none), and layer 0's
    from the previous token, mostly through head 0-2; the model predicts the word that followed the earlier occurrence."""
    run = attnlib.routes("tiny-llama-induction@step1150", text=TOUR_TEXT)
    graph = run.result
    t = graph.route["position"]
    assert len(graph.tokens) == 31 and t == 30  # BOS, 20 words, 10 again: one token each
    on_route = [graph.edges[i] for i in graph.route["edges"]]

    def largest_into(layer: int) -> dict:
        return max((e for e in on_route if e["kind"] == "attention" and e["target"] == f"A{layer}_{t}"),
                   key=lambda e: e["weight"])  # fmt: skip

    induction = largest_into(1)
    assert induction["source"] == f"R0_{t - 19}" and induction["weight"] > 0.7
    heads = np.array(induction["heads"])
    assert set(np.argsort(heads)[-3:]) == {0, 1, 2} and heads[3] < 0.05
    previous = largest_into(0)
    assert previous["source"] == f"E_{t - 1}" and int(np.argmax(previous["heads"])) == 2
    assert graph.prediction["token"] == "Ġ" + TOUR_WORDS[10]
