"""Plotly figures drawn in the page by the app's plotly.js bundle (static/, see plotly_figure.js) instead of
st.plotly_chart, whose full plotly.js costs a new visitor about a second (benchmarks/README.md, Classroom)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from attnlib.results.shipped import PLOTLY_BUNDLE
from attnlib.views.figure import figure_page as standalone_page
from attnlib.views.margins import fitted_margins

COMPONENT = "attn_figure"
BUNDLE_URL = f"app/static/{PLOTLY_BUNDLE.name}"  # relative to the page: enableStaticServing serves static/ there
APP_FONT = {"family": '"Source Sans", sans-serif', "color": "#31333F"}  # the app's own text
APP_TEMPLATE = "plotly_white"

_draw = st.components.v2.component(
    COMPONENT, js=Path(__file__).with_name("plotly_figure.js").read_text(), isolate_styles=False
)


@cache
def _template() -> dict[str, Any]:
    return pio.templates[APP_TEMPLATE].to_plotly_json()


def app_look(fig: go.Figure) -> dict[str, Any]:
    """`fig` as a plain dict in the app's look: its template and the app's font (the caller's figure is unchanged).
    The dict, not `go.Figure.update_layout`, which validates a copy of the whole template each time (27 ms a figure
    against 2 ms, on every run of a page)."""
    spec = fig.to_plotly_json()
    layout = spec["layout"]
    margin = fitted_margins(spec)  # so that plotly lays the figure out once (attnlib/views/margins.py)
    return {
        "data": spec["data"],
        "layout": {**layout, "template": _template(), "font": {**layout.get("font", {}), **APP_FONT}, "margin": margin},
    }


def plotly_figure(fig: go.Figure, key: str, on_click: Callable[[], None] | None = None) -> None:
    """Draw `fig` at the container's width: hover, zoom, legend clicks, PNG and full screen from its toolbar. With
    `on_click`, a click on a point calls it (before the rerun) with `clicked_point(key)` set."""
    data = {"figure": pio.to_json(app_look(fig), validate=False), "bundle": BUNDLE_URL, "clicks": on_click is not None}
    _draw(data=data, key=key, **({"on_click_change": on_click} if on_click is not None else {}))


def clicked_point(key: str) -> dict | None:
    """The point just clicked in the figure drawn under `key`: {"index": its customdata, "curve": its trace}."""
    state = st.session_state.get(key)
    return None if state is None else state.get("click")


def figure_page(fig: go.Figure) -> str:
    """`fig` as the app draws it, on a standalone HTML page with the bundle inlined (opens offline)."""
    return standalone_page(app_look(fig))
