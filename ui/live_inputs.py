"""Sentence A / B inputs kept in the URL, and the cached run of the model on them."""

from __future__ import annotations

import streamlit as st

from attnlib.runner import InputError, RunResult, run
from ui.model_sidebar import cached_model, local_models_allowed

DEFAULT_A = "I went to the store."
DEFAULT_B = "At the store, I bought fresh strawberries."


def _remember_texts() -> None:
    """Widget callback: keep the typed texts under keys of our own, which Streamlit keeps when pages change."""
    state = st.session_state
    state._text_a, state._text_b = state.get("text_a", ""), state.get("text_b", "")


def text_inputs() -> tuple[str, str]:
    """Sentence A and optional B, initialised from and written back to the URL (?a=...&b=...).

    Streamlit drops a widget's value when another page runs and clears the URL on a page change, so the texts live
    in _text_a/_text_b and are given back to the widgets on every run: what a visitor typed follows them across pages."""
    state = st.session_state
    if "_text_a" not in state:  # first run of the session: a link's texts, else the tutorial pair
        state._text_a = st.query_params.get("a", DEFAULT_A)
        state._text_b = st.query_params.get("b", DEFAULT_B if "a" not in st.query_params else "")
    state.text_a, state.text_b = state._text_a, state._text_b
    left, right = st.columns(2)
    left.text_area("Sentence A", key="text_a", height=80, on_change=_remember_texts)
    right.text_area("Sentence B (optional, makes a pair)", key="text_b", height=80, on_change=_remember_texts)
    st.query_params["a"] = state.text_a
    if state.text_b.strip():
        st.query_params["b"] = state.text_b
    elif "b" in st.query_params:
        del st.query_params["b"]
    return state.text_a, state.text_b


# Small: a 512-token result holds about 85 MB of attention, queries and keys, and the cache is shared by every visitor.
@st.cache_data(max_entries=4, show_spinner=False)
def cached_run(model_name: str, text_a: str, text_b: str) -> RunResult:
    """Run the model on a sentence or pair once per (model, text)."""
    lm = cached_model(model_name, local_models_allowed())
    return run(lm, text_a, text_b.strip() or None, capture_qk=True)


def run_or_explain(model_name: str, text_a: str, text_b: str) -> RunResult | None:
    """The run, or None after showing why it could not be made; long inputs get a truncation notice."""
    try:
        result = cached_run(model_name, text_a, text_b)
    except InputError as exc:
        st.warning(str(exc))
        return None
    if result.truncated:
        st.warning(
            f"The input has {result.n_tokens_full} tokens; the model takes {result.n}, "
            "so it was truncated to the first tokens that fit."
        )
    return result
