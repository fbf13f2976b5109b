"""Corpus search by example (METHODS §16): top k against brute-force cosine (hand-made vectors, the model's own
vectors), heads mode against context vectors worked out from the weights, float16 against float32 within §16's bound,
summaries against counts made from the treebank and the model's own attention, and index files refused when they are
of another model, corpus or options.

The slow tier; test_search.py holds the quick tests."""

from __future__ import annotations

import pytest

from attnlib.core.corpus import read_corpus
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.search.by_example import search_corpus
from support.search import check_top_k_equals_brute_force_cosine

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


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


def test_top_k_of_the_embedding_output_equals_brute_force_cosine(family_model):
    """The embedding output (a layer's output: test_search.py) against a brute-force cosine."""
    check_top_k_equals_brute_force_cosine(family_model, None)
