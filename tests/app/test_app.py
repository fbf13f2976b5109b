"""Streamlit AppTest: every page opens without an exception; the model chooser keeps the previous model on failure."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import ROOT


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
