"""The Head roles page's probe as a text (random words of the vocabulary, then the same words again), which the page
and the Tour open in the head view and link to the Live page: made once per model."""

from __future__ import annotations

import streamlit as st

from attnlib.analyses.roles import ProbeText, probe_text
from ui.sources.model_sidebar import model_named


@st.cache_data(max_entries=8, show_spinner=False)
def cached_probe_text(model_name: str, length: int) -> ProbeText:
    """The probe as a text for the Live page, once per model."""
    return probe_text(model_named(model_name), length)
