"""A click on a query token in the head view picks it for the page (the view posts it; app_pages/live/token_pick.js hands it over)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st

KEY = "live_token_pick"

_listen = st.components.v2.component(
    "attn_token_pick", js=Path(__file__).with_name("token_pick.js").read_text(), isolate_styles=False
)


def listen_for_picks(on_pick: Callable[[int], None]) -> None:
    """Call on_pick(position) (1-based, 0 for none) before the next run when a token is clicked in a head view."""

    def picked() -> None:
        value = st.session_state[KEY].get("picked")
        if isinstance(value, int):
            on_pick(value)

    _listen(data={}, key=KEY, on_picked_change=picked)
