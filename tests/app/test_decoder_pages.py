"""A decoder on the pages (METHODS §18): the Live page's causal head view of sentence A alone, and the Special tokens
page's sink numbers for a decoder beside an encoder."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.core.model import load_model
from attnlib.core.runner import run
from attnlib.results.shipped import ROOT
from support.apptest import tables
from support.models import save_tiny
from support.pages import view_datas
from ui.sources.live_inputs import pretty_token

pytestmark = pytest.mark.slow
TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-pages"))


def unpacked(lines: dict) -> list[list[list[int]]]:
    """pack_sparse's map -> row -> key columns kept."""
    raw = base64.b64decode(lines["b64"])
    rows = lines["m"] * lines["rows"]
    counts = np.frombuffer(raw[: 2 * rows], "<u2")
    columns = np.frombuffer(raw[2 * rows : 2 * rows + 2 * lines["nnz"]], "<u2")
    ends = np.cumsum(counts)
    per_row = [columns[end - c : end].tolist() for c, end in zip(counts, ends)]
    return [per_row[m * lines["rows"] : (m + 1) * lines["rows"]] for m in range(lines["m"])]


def test_live_page_draws_a_decoders_causal_head_view(gpt2_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["model"], at.query_params["a"], at.query_params["b"] = str(gpt2_dir), TEXT, "It was warm."
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("decoder: causal attention" in c.value for c in at.sidebar.caption)
    (data,) = view_datas(at)
    expected = run(load_model(str(gpt2_dir)), TEXT, "It was warm.")  # a pair as the tokenizer joins it
    assert data["left"] == data["right"] == [pretty_token(t) for t in expected.tokens]
    for rows in unpacked(data["lines"]):  # causal: every line from query i goes to a key j <= i
        assert all(max(keys, default=0) <= i for i, keys in enumerate(rows))
        assert rows[0] == [0]  # the first token sees only itself


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_special_tokens_sinks_of_a_decoder_beside_an_encoder(gpt2_dir, tiny_model_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), cmp=str(tiny_model_dir), limit="4", tab="sinks")
    at.run()
    at.switch_page("app_pages/special/page.py")
    at.run()
    for _ in range(4):  # compute each model's statistics on request
        assert not at.exception, [e.value for e in at.exception]
        asks = [b for b in at.button if str(b.key).startswith("compute:")]
        if not asks:
            break
        asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Special tokens and sinks"
    (rates,) = [t for t in tables(at) if "sink heads" in t.columns]
    assert set(rates["kind"]) == {"decoder", "encoder"}
    assert list(rates[rates["model"] == str(gpt2_dir)]["layer"]) == ["all", "1", "2"]


def test_head_importance_of_a_decoder_is_the_sink_test(gpt2_dir):
    """Head importance on a decoder: first-token knockouts, the next-token loss as the LM measure, the sink test."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), limit="3", tab="noop", ko="1", measure="mlm")
    at.run()
    at.switch_page("app_pages/importance/page.py")
    at.run()
    asks = [b for b in at.button if str(b.key).startswith("compute:")]
    assert asks and "first-token attention" in " ".join(i.value for i in at.info)
    asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "First-token knockouts (drop, renormalise)" in [c.label for c in at.sidebar.checkbox]
    assert any(m.value.startswith("The sink test.") for m in at.markdown)
    (said,) = [s.value for s in at.success]
    assert "next-token loss" in said and "first-token share against effect" in said and "[CLS]" not in said


def test_tour_asks_whether_the_sink_is_a_no_op(gpt2_dir):
    """The Tour's step 3 for a decoder: the sink test, answered from the first-token knockouts."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), step="3")
    at.run()
    at.switch_page("app_pages/tour/page.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.header[0].value == "3. Is the sink a no-op?"
    (said,) = [s.value for s in at.success]
    assert "first token" in said and "first-token share against effect" in said and "[SEP]" not in said


def test_special_tokens_weights_vs_norms_of_a_decoder(gpt2_dir):
    """The Weights vs norms tab for a decoder (METHODS §11 with §18's FIRST): computed, named as first and end tokens,
    its norm shares those of the library's own `special --norms`."""
    from attnlib.analyses.base import run_analysis
    from attnlib.analyses.special import SPECIAL, SpecialOptions
    from attnlib.core.corpus import read_corpus
    from attnlib.results.shipped import CLASSROOM_SINGLE

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), limit="4", tab="norms")
    at.run()
    at.switch_page("app_pages/special/page.py")
    at.run()
    for _ in range(4):
        assert not at.exception, [e.value for e in at.exception]
        asks = [b for b in at.button if str(b.key).startswith("compute:")]
        if not asks:
            break
        asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("not exact" in i.value or "not available" in i.value for i in at.info)
    assert any(m.value.startswith("Is the attention to first token and end token a no-op?") for m in at.markdown)
    (table,) = [t for t in tables(at) if "norm_cls" in t.columns]
    corpus = {"corpus": read_corpus(CLASSROOM_SINGLE, limit=4)}  # the page's default corpus, limit 4
    own = run_analysis(SPECIAL, load_model(str(gpt2_dir)), SpecialOptions(norms=True), inputs=corpus).result.norms
    np.testing.assert_allclose(table["norm_cls"].to_numpy(float), own.layers["cls"], rtol=1e-6)


def test_live_norms_view_of_a_decoder(gpt2_dir):
    """The Live page's norms switch on a decoder: rows of ||A f(x)|| normalised, from the library's maps, causal."""
    from attnlib.stats.norms import norm_maps

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=str(gpt2_dir), a=TEXT, show="norms")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("not exact" in i.value or "not available" in i.value for i in at.info)
    (data,) = view_datas(at)
    assert "norms" in data["title"] and "‖α f(x)‖" in data["quantity"]
    for rows in unpacked(data["lines"]):  # causal: every line from query i goes to a key j <= i
        assert all(max(keys, default=0) <= i for i, keys in enumerate(rows))
    weighted = norm_maps(run(load_model(str(gpt2_dir)), TEXT, capture_norms=True)).weighted_norm
    assert not np.triu(weighted, 1).any()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["llama", "gpt2", "gemma2"])
def test_live_neuron_view_of_a_decoder_reproduces_its_row(kind, tmp_path_factory):
    """softmax of the shown scores is the model's row; Gemma 2's scores are soft-capped, and the page says that q·k is
    the score before capping."""
    from streamlit.testing.v1 import AppTest

    from attnlib.results.shipped import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=str(save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-live"))), view="neuron")
    at.query_params.update(layer="2", token="5")
    at.run()
    assert not at.exception, at.exception
    assert any("equals the model's attention row" in c.value for c in at.caption), [c.value for c in at.caption]
    assert any("‖f(x_j)‖ = ‖v_j W_O‖" in c.value for c in at.caption)  # value norms beside it (METHODS §11, §18)
    capped = [c.value for c in at.caption if "is the score before capping" in c.value]
    assert len(capped) == (kind == "gemma2") and all("50·tanh(s / 50)" in c for c in capped)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_live_page_finder_switches_and_search_of_a_decoder(kind, tmp_path_factory):
    """The Live page's head finder, head switches and corpus search on a decoder (METHODS §15, §16, §18): a pick opens
    its head; a head switched off gives the library's own ablation of the input; the matches are the library's."""
    from attnlib.analyses.importance import AblateOptions, ablate_input
    from attnlib.core.corpus import CorpusInput
    from attnlib.results.shipped import CLASSROOM_SINGLE
    from attnlib.search.by_example import search_corpus
    from support.pages import open_live, rerun, view_data

    folder = save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-live-tools"))
    lm = load_model(str(folder))
    at = open_live(model=str(folder), a=TEXT, b="", view="finder")
    picks = [b for b in at.button if b.key and b.key.startswith("pick_")]
    assert picks
    layer, head = (int(x) for x in picks[0].label.split(" ")[0].split("-"))
    picks[0].click()
    rerun(at)
    data = view_data(at)
    assert (data["layer"], data["heads"]) == (layer, [head]) and at.query_params["view"] == "head"

    at = open_live(model=str(folder), a=TEXT, b="", off="2-3")
    found = ablate_input(lm, CorpusInput(TEXT), AblateOptions(heads="1-2"))  # the page numbers from 1
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Sentence-embedding similarity"] == f"{found.similarity:.4f}"
    assert metrics["Hidden states changed by"] == f"{found.hidden:.1%}" and found.hidden > 0

    at = open_live(model=str(folder), a=TEXT, b="", layer="2", token="3", find="1", corpus="classroom-single", k="3")
    strips = [m for m in at.markdown if "attn-strip" in m.value]
    expected = search_corpus(lm, TEXT, 2, CLASSROOM_SINGLE, layer=1, k=3)
    assert [m.input + 1 for m in expected.matches] == [int(s.value.split("· input ")[1].split(",")[0]) for s in strips]


def test_sidebar_says_the_layout_found_in_a_family_outside_the_list(tmp_path):
    """A Mixtral (not in the family list): the sidebar names the parts found and checked, its experts among them."""
    from support.bad_input import _sidebar

    at = _sidebar(model=str(save_tiny("mixtral", tmp_path / "mixtral")))
    assert not at.exception and not at.error
    (note,) = [c.value for c in at.caption if c.value.startswith("Layout found in the model")]
    assert "a mixture of 4 experts" in note and "input_layernorm (pre-norm)" in note and "grouped-query" in note
