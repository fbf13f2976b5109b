"""The model view whose clicks switch heads off: the view's HTML in an iframe of the page (head_switches.js), its
clicks reported back as the component's state (`off`, 0-based [layer, head] pairs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st

_draw = st.components.v2.component(
    "attn_head_switches", js=Path(__file__).with_name("head_switches.js").read_text(), isolate_styles=False
)


def head_switches(html: str, key: str, on_change: Callable[[], None]) -> None:
    """Draw the model view's HTML (made with switches=True); `on_change` runs when a click switches a head, with
    the heads then off in clicked_heads(key)."""
    _draw(data={"html": html}, key=key, default={"off": []}, on_off_change=on_change)


def clicked_heads(key: str) -> list[tuple[int, int]]:
    """The heads (0-based) the last click left switched off."""
    state = st.session_state.get(key)
    heads = getattr(state, "off", None) if state is not None else None
    if heads is None and isinstance(state, dict):
        heads = state.get("off")
    return [(int(l), int(h)) for l, h in heads or []]
