"""Sentence A / B inputs kept in the URL (`a`, `b`), and the cached run of the model on them."""

from __future__ import annotations

import streamlit as st

from attnlib.runner import InputError, RunResult, run
from attnlib.shipped import TUTORIAL_A, TUTORIAL_B
from ui.model_sidebar import model_named
from ui.page_state import Option, bind

DEFAULT_A, DEFAULT_B = TUTORIAL_A, TUTORIAL_B


def text_options() -> tuple[Option, Option]:
    """Sentence A and B; a link without `a` opens the tutorial pair, a link with `a` and no `b` a single sentence."""
    return Option("text_a", "a", DEFAULT_A), Option("text_b", "b", "" if "a" in st.query_params else DEFAULT_B)


def text_inputs() -> tuple[str, str]:
    """Sentence A and optional B, kept across pages and in the URL (?a=...&b=...)."""
    values = bind(text_options())
    left, right = st.columns(2)
    left.text_area("Sentence A", key="text_a", height=80)
    right.text_area("Sentence B (optional, makes a pair)", key="text_b", height=80)
    return values["a"], values["b"]


# Small: a 512-token result holds about 85 MB of attention, queries and keys, and the cache is shared by every visitor.
@st.cache_data(max_entries=4, show_spinner=False)
def cached_run(model_name: str, text_a: str, text_b: str) -> RunResult:
    """Run the model on a sentence or pair once per (model, text)."""
    return run(model_named(model_name), text_a, text_b.strip() or None, capture_qk=True)


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
