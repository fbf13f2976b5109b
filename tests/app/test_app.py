"""Streamlit AppTest: every page opens without an exception; the model chooser keeps the previous model on failure."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import ROOT
from support.apptest import tables


def test_default_page_is_live_with_tutorial_pair(app):
    assert not app.exception
    assert app.title[0].value == "Live attention"
    areas = {t.label: t.value for t in app.text_area}
    assert areas["Sentence A"] == "I went to the store."
    assert areas["Sentence B (optional, makes a pair)"] == "At the store, I bought fresh strawberries."
    assert app.query_params["model"] == "all-MiniLM-L6-v2"
    assert app.query_params["a"] == "I went to the store."


def _sidebar_only():
    """The model sidebar alone (AppTest drops the entrypoint's elements on reruns of a st.navigation app)."""
    from ui.sources.model_sidebar import model_sidebar

    model_sidebar()


def test_failed_model_keeps_previous_one():
    at = AppTest.from_function(_sidebar_only, default_timeout=300).run()
    at.selectbox(key="model_choice").select("Other (Hub id or local folder)…").run()
    at.text_input(key="model_custom").input(str(ROOT / "data")).run()
    assert not at.exception
    assert any("config.json" in e.value and "Still using" in e.value for e in at.error)
    assert at.session_state["model_name"] == "all-MiniLM-L6-v2"
    assert at.query_params["model"] == "all-MiniLM-L6-v2"


def test_url_restores_model_and_text():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["a"] = "The dog barked."
    at.run()
    assert not at.exception
    areas = {t.label: t.value for t in at.text_area}
    assert areas["Sentence A"] == "The dog barked." and areas["Sentence B (optional, makes a pair)"] == ""


# ---------- slow tests


PAGE_FILES = [
    "app_pages/live/page.py",
    "app_pages/special/page.py",
    "app_pages/deps/page.py",
    "app_pages/local_global/page.py",
    "app_pages/importance/page.py",
    "app_pages/roles/page.py",
    "app_pages/predictions/page.py",
    "app_pages/qk/page.py",
]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGE_FILES)
def test_every_page_opens(app, page):
    app.switch_page(page).run()
    assert not app.exception, app.exception
    assert app.title, "page has no title"


@pytest.mark.slow
@pytest.mark.parametrize("words, expect_button", [(8, True), (300, False)])
def test_exact_example_states_its_time_and_refuses_long_inputs(words, expect_button):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["tab"] = "example"
    at.run()
    at.switch_page("app_pages/local_global/page.py").run()
    at.text_area[0].input(" ".join(["river"] * words)).run()
    assert not at.exception, at.exception
    buttons = [b.label for b in at.button]
    if expect_button:
        assert "Compute exact attribution" in buttons
        assert any("takes about" in i.value for i in at.info)
    else:
        assert "Compute exact attribution" not in buttons
        assert any("minutes on 2 CPU cores" in w.value for w in at.warning)


@pytest.mark.slow
def test_corpus_choice_survives_a_visit_to_another_page():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("app_pages/special/page.py").run()
    at.selectbox(key="special_corpus").select("Classroom set: sentence pairs").run()
    at.number_input(key="special_limit").set_value(30).run()
    at.switch_page("app_pages/live/page.py").run()
    at.switch_page("app_pages/special/page.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="special_corpus").value == "Classroom set: sentence pairs"
    assert at.number_input(key="special_limit").value == 30
    assert not at.warning, [w.value for w in at.warning]


@pytest.mark.slow
def test_deps_example_follows_a_new_relation_and_the_url():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("app_pages/deps/page.py")
    at.session_state["deps_limit"] = 15
    at.session_state["deps_min_count"] = 5
    at.run()
    assert not at.exception, at.exception
    frame = tables(at)[0].set_index("relation")
    at.number_input(key="deps_layer").set_value(6).run()
    assert at.query_params["layer"] == "6" and at.query_params["limit"] == "15" and at.query_params["min"] == "5"
    shown = at.selectbox(key="deps_relation").value
    other = next(r for r in frame.index if r != shown and frame.loc[r, "layer"] != 6)  # so the reset can be seen
    at.selectbox(key="deps_relation").set_value(other).run()
    assert not at.exception, at.exception
    assert at.query_params["relation"] == other
    best = frame.loc[other]
    assert (at.number_input(key="deps_layer").value, at.number_input(key="deps_head").value) == (
        best["layer"],
        best["head"],
    ), "a new relation opens on its own best head"
    assert at.query_params["layer"] == str(best["layer"])


@pytest.mark.usefixtures("one_thread")
def test_unknown_family_on_the_pages(unknown_dir):
    """The Live page, Special tokens and the Tour's step 3 show what attention gives and say why norms are missing."""
    from streamlit.testing.v1 import AppTest

    from attnlib.results.shipped import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["model"], at.query_params["view"], at.query_params["show"] = str(unknown_dir), "neuron", "norms"
    at.run()
    assert not at.exception, at.exception
    assert any("query and key vectors of the neuron view are not available" in i.value for i in at.info)
    at.session_state["live_view"] = "head"
    at.run()
    assert not at.exception and any("Value-weighted norms" in i.value for i in at.info)
    at.query_params["tab"], at.query_params["limit"] = "norms", "3"
    at.switch_page("app_pages/special/page.py").run()
    assert not at.exception and not at.error, (at.exception, at.error)
    assert any("are not available for 'megatron-bert'" in i.value for i in at.info)
    at.query_params["step"] = "3"
    at.switch_page("app_pages/tour/page.py").run()
    assert not at.exception and any("are not available for 'megatron-bert'" in i.value for i in at.info)
