"""What a page says about the loaded model's family: which layers attend locally (ModernBERT's sliding window) and,
for a statistic the family cannot give exactly, why (attnlib.core.families.unsupported_reason)."""

from __future__ import annotations

import streamlit as st

from attnlib.core.families import Part, Statistic, local_layers_text, score_cap_text, unsupported_reason
from attnlib.core.model import LoadedModel, ModelFacts
from ui.sources.compare import compared_model
from ui.sources.model_sidebar import current_model, model_named


def local_layers_note(facts: ModelFacts) -> None:
    """A caption naming the local layers and their windows; nothing for a model whose layers are all global."""
    text = local_layers_text(facts.windows)
    if text:
        st.caption(f"{facts.name}: {text}")


def encoder_part_text(facts: ModelFacts) -> str | None:
    """For an encoder-decoder, the sentence saying that a corpus page's statistics are its encoder's self-attention
    (METHODS §18); None for other models."""
    if facts.kind != "encoder-decoder":
        return None
    no_cls = "" if facts.cls_token else f" {facts.model_type} has no CLS token: its [CLS] class is empty."
    return (
        f"{facts.name} is an encoder-decoder ({facts.model_type}): these statistics are of its encoder's "
        "self-attention over the source text (METHODS §18); its decoder's self-attention and the cross attention are "
        f"on the Live attention page.{no_cls}"
    )


def encoder_part_notes(*models: LoadedModel | None) -> None:
    """A caption per encoder-decoder among the models shown (default: the loaded and the compared model)."""
    for lm in models or (current_model(), compared_model()):
        text = None if lm is None else encoder_part_text(lm.facts)
        if text:
            st.caption(text)


def score_cap_notes(*models: LoadedModel | None) -> None:
    """A caption per model shown (default: the loaded and the compared model) whose attention scores are soft-capped
    (Gemma 2): its q·k is the score before capping."""
    for lm in models or (current_model(), compared_model()):
        if lm is None:
            continue
        text = score_cap_text(getattr(lm.encoder.config, "attn_logit_softcapping", None))
        if text:
            st.caption(f"{lm.facts.name}: {text}")


def unsupported_for(model_name: str, statistic: Statistic, part: Part = "encoder") -> str | None:
    """Why the loaded model `model_name` cannot give this statistic (for an encoder-decoder's part), prefixed with its
    name; None when it can."""
    reason = unsupported_reason(model_named(model_name).encoder.config, statistic, part)
    return None if reason is None else f"{model_name}: {reason}"


def explain_unsupported(facts: ModelFacts, statistic: Statistic, part: Part = "encoder") -> bool:
    """Whether the model cannot give this statistic (for an encoder-decoder's part); if so the page says why."""
    reason = unsupported_for(facts.name, statistic, part)
    if reason is not None:
        st.info(reason)
    return reason is not None
