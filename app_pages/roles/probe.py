"""The Head roles page's probe as a text (random words of the vocabulary, then the same words again), which the page
and the Tour open in the head view and link to the Live page: made once per model; and the page's default corpus."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attnlib.analyses.roles import ProbeText, probe_text
from attnlib.results.shipped import CLASSROOM_SINGLE
from ui.sources.corpus_picker import CorpusChoice, shipped_corpus
from ui.sources.model_sidebar import model_named

DETECT_LIMIT = 20  # detection's default corpus: the first 20 inputs (the probe needs none)


def default_corpus() -> CorpusChoice:
    """The corpus the page opens on, as the picker chooses it: the first DETECT_LIMIT classroom sentences (what the
    shipped roles are computed on)."""
    whole = shipped_corpus(CLASSROOM_SINGLE)
    return replace(whole, fingerprint=f"{whole.sha1}:{DETECT_LIMIT}", inputs=whole.inputs[:DETECT_LIMIT])


@st.cache_data(max_entries=8, show_spinner=False)
def cached_probe_text(model_name: str, length: int) -> ProbeText:
    """The probe as a text for the Live page, once per model."""
    return probe_text(model_named(model_name), length)
