"""What a page says about the loaded model's family: which layers attend locally (ModernBERT's sliding window) and,
for a statistic the family cannot give exactly, why (attnlib.families.unsupported_reason)."""

from __future__ import annotations

import streamlit as st

from attnlib.families import Statistic, local_layers_text, unsupported_reason
from attnlib.model import ModelFacts
from ui.model_sidebar import model_named


def local_layers_note(facts: ModelFacts) -> None:
    """A caption naming the local layers and their windows; nothing for a model whose layers are all global."""
    text = local_layers_text(facts.windows)
    if text:
        st.caption(f"{facts.name}: {text}")


def explain_unsupported(facts: ModelFacts, statistic: Statistic) -> bool:
    """Whether the model cannot give this statistic; if so the page says why, in words."""
    reason = unsupported_reason(model_named(facts.name).encoder.config, statistic)
    if reason is not None:
        st.info(f"{facts.name}: {reason}")
    return reason is not None
