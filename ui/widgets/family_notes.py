"""What a page says about the loaded model's family: which layers attend locally (ModernBERT's sliding window) and,
for a statistic the family cannot give exactly, why (attnlib.core.families.unsupported_reason)."""

from __future__ import annotations

import streamlit as st

from attnlib.core.families import Statistic, local_layers_text, unsupported_reason
from attnlib.core.model import ModelFacts
from ui.sources.model_sidebar import model_named


def local_layers_note(facts: ModelFacts) -> None:
    """A caption naming the local layers and their windows; nothing for a model whose layers are all global."""
    text = local_layers_text(facts.windows)
    if text:
        st.caption(f"{facts.name}: {text}")


def unsupported_for(model_name: str, statistic: Statistic) -> str | None:
    """Why the loaded model `model_name` cannot give this statistic, prefixed with its name; None when it can."""
    reason = unsupported_reason(model_named(model_name).encoder.config, statistic)
    return None if reason is None else f"{model_name}: {reason}"


def explain_unsupported(facts: ModelFacts, statistic: Statistic) -> bool:
    """Whether the model cannot give this statistic; if so the page says why, in words."""
    reason = unsupported_for(facts.name, statistic)
    if reason is not None:
        st.info(reason)
    return reason is not None
