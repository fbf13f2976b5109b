"""The Live page's "Switch heads off" section: the heads switched off on this input (kept in the URL, picked in a
multiselect or clicked in the model view) and what that changes (METHODS §15)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.live.head_switches import clicked_heads
from attnlib.analyses.importance import AblationUnavailable, InputAblation, heads_text, unavailable_reason
from attnlib.core.model import ModelFacts
from ui.sources.live_inputs import cached_ablation
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import Option, set_value
from ui.widgets.data_table import data_table

OFF = Option("live_off", "off", "")  # heads switched off, 1-based layer-head: "3-10,1-2"
CLICK = Option("live_click", "click", False)  # clicks in the model view switch heads off
OFF_PICK = "live_off_pick"  # the multiselect of the heads off (OFF is its text in the URL)
SWITCHES = "live_switches"  # the model view whose clicks switch heads


def heads_off_now(facts: ModelFacts) -> list[tuple[int, int]]:
    """The heads switched off (0-based), from the URL's 1-based text; those outside the model left out."""
    heads = []
    for part in str(st.session_state.get(OFF.key, "")).split(","):
        layer, _, head = part.strip().partition("-")
        if layer.isdigit() and head.isdigit() and 1 <= int(layer) <= facts.n_layers and 1 <= int(head) <= facts.n_heads:
            heads.append((int(layer) - 1, int(head) - 1))
    return sorted(set(heads))


def _label(head: tuple[int, int]) -> str:
    return f"{head[0] + 1}-{head[1] + 1}"


def _picked() -> None:
    """Multiselect callback: its heads become the URL's."""
    set_value(OFF, ",".join(st.session_state[OFF_PICK]))


def clicked() -> None:
    """Model view callback: the heads a click left off become the URL's."""
    set_value(OFF, ",".join(_label(h) for h in clicked_heads(SWITCHES)))


def _share(p: float) -> str:
    """A probability as a percentage, small ones with two significant digits."""
    return f"{p:.1%}" if p >= 0.001 else f"{100 * p:.2g}%"


def heads_off_picker(facts: ModelFacts) -> list[tuple[int, int]]:
    """The multiselect of the heads switched off and the toggle that lets model-view clicks switch them; the heads."""
    off = heads_off_now(facts)
    st.session_state[OFF_PICK] = [_label(h) for h in off]
    everyone = [_label((l, h)) for l in range(facts.n_layers) for h in range(facts.n_heads)]
    pick, click = st.columns([3, 1])
    pick.multiselect(
        "Heads switched off (layer-head)",
        everyone,
        key=OFF_PICK,
        on_change=_picked,
        help="Each head's context vectors are set to zero before the attention output projection (Michel et al.'s "
        "ablation); the rest of the model runs unchanged. The views above still show the unchanged model.",
    )
    click.toggle("Click heads in the model view", key=CLICK.key, help="In the model view, a click on a thumbnail "
                 "switches that head off, or on again.")  # fmt: skip
    return off


def ablation_metrics(found: InputAblation) -> None:
    """What switching the heads off changed: the sentence embedding, the hidden states and the masked-LM loss."""
    first, second, third = st.columns(3)
    first.metric(
        "Sentence-embedding similarity",
        f"{found.similarity:.4f}",
        delta=f"1 − cos = {found.embedding:.2g}",
        delta_color="off",
        help="cos between the mean-pooled last hidden states with and without the heads (1 = unchanged).",
    )
    second.metric("Hidden states changed by", f"{found.hidden:.1%}", help="Mean over tokens of ||h − h′|| / ||h||.")
    if found.mlm is not None:
        third.metric("Masked-LM loss change", f"{found.mlm:+.2g}", help="At 15% of the tokens masked (METHODS §15).")


def mask_predictions(found: InputAblation) -> None:
    """The top predictions at each mask token typed in the text, before and after (a masked-LM model's)."""
    mask = current_model().tokenizer.mask_token
    if not found.predictions:
        st.caption(f"Type {mask} in the text to see the model's top predictions there before and after.")
        return
    rows = [
        {
            "position": p.position + 1,
            "rank": k + 1,
            "before": f"{b[0]} ({_share(b[1])})",
            "after": f"{a[0]} ({_share(a[1])})",
        }
        for p in found.predictions
        for k, (b, a) in enumerate(zip(p.before, p.after))
    ]
    st.markdown(f"Top predictions at each {mask} typed in the text, before and after:")
    data_table(pd.DataFrame(rows), key="live_predictions")


def switches_section(facts: ModelFacts, text_a: str, text_b: str) -> None:
    """Heads switched off on this input (a multiselect, or clicks in the model view) and their effect: the sentence
    embedding's similarity to the unchanged model's, the hidden states' change and, for a masked-LM model, the
    predictions at each mask token typed in the text before and after (METHODS §15)."""
    st.subheader("Switch heads off")
    reason = unavailable_reason(current_model())
    if reason is not None:
        st.info(reason)
        return
    off = heads_off_picker(facts)
    if not off:
        st.caption(
            "No head is switched off: choose heads above, or turn on the toggle and click them in the model view."
        )
        return
    try:
        found = cached_ablation(facts.name, text_a, text_b, heads_text(off))
    except AblationUnavailable as exc:
        st.info(str(exc))
        return
    ablation_metrics(found)
    if found.mlm is not None:
        mask_predictions(found)
