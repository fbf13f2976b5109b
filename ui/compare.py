"""A second model to compare with: a sidebar field kept in the URL (`cmp`), loaded like the first model."""

from __future__ import annotations

import streamlit as st

from attnlib.model import LoadedModel
from ui.model_sidebar import try_load
from ui.page_state import Option, bind

COMPARE = Option("compare_name", "cmp", "")


def compare_sidebar() -> None:
    """Draw the "Compare with" field under the model chooser; a model that fails to load is named with its reason."""
    name = str(bind([COMPARE])["cmp"]).strip()
    with st.sidebar:
        st.text_input(
            "Compare with",
            key=COMPARE.key,
            placeholder="a second model id or folder",
            help="Any model the chooser above accepts. Corpus pages then show both models' numbers side by side; "
            "clear the field to show one model again.",
        )
        if name:
            lm, error = try_load(name)
            if lm is None:
                st.error(f"{error}\n\nNo comparison is shown.")


def compared_model() -> LoadedModel | None:
    """The second model chosen in the sidebar, or None (none chosen, or it failed to load)."""
    name = str(st.session_state.get(COMPARE.key, "")).strip()
    if not name:
        return None
    lm, _ = try_load(name)
    return lm
