"""The Queries and keys page's grid of every head (attnlib/views/qk_grid.js on one canvas), as a Streamlit component:
a click on a head calls the page back with `picked_head(key)` set."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from attnlib.analyses.qk import QKResult
from attnlib.views.canvas_html import view_script
from attnlib.views.qk import grid_data

MOUNT = """
export default function ({ data, parentElement, setTriggerValue }) {
  return drawGrid(parentElement, data, (pick) => setTriggerValue("pick", pick));
}
"""
_grid = st.components.v2.component("qk_grid", js=view_script("qk_grid.js") + MOUNT, isolate_styles=False)


def head_grid(result: QKResult, colouring: str, picked: tuple[int, int], key: str, on_pick: Callable[[], None]) -> None:
    """Every head's PCA thumbnail, the picked head (0-based) outlined; a click calls on_pick before the rerun."""
    _grid(data=grid_data(result, colouring, picked), key=key, on_pick_change=on_pick)


def picked_head(key: str) -> tuple[int, int] | None:
    """The head (layer, head, 0-based) just clicked in the grid drawn under `key`."""
    state = st.session_state.get(key)
    pick = None if state is None else state.get("pick")
    return None if not pick else (int(pick["layer"]), int(pick["head"]))
