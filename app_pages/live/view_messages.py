"""What the Live page's views post from their iframes (a picked token, a dragged window), handed to the page by
view_messages.js as a trigger value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import streamlit as st

_listen = st.components.v2.component(
    "attn_view_messages", js=Path(__file__).with_name("view_messages.js").read_text(), isolate_styles=False
)


def listen(message: str, trigger: str, key: str, on_value: Callable[[Any], None]) -> None:
    """Call on_value(value) before the next run when a view posts {message: value}."""

    def changed() -> None:
        on_value(st.session_state[key].get(trigger))

    _listen(data={"message": message, "trigger": trigger}, key=key, **{f"on_{trigger}_change": changed})
