"""Plotly figures drawn in the page by plotly.js's cartesian bundle (static/, see plotly_figure.js) instead of
st.plotly_chart, whose full plotly.js costs a new visitor about a second (README, Classroom)."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

from attnlib.shipped import PLOTLY_BUNDLE
from figures.plotly_js import plotly_js

COMPONENT = "attn_figure"
BUNDLE_URL = f"app/static/{PLOTLY_BUNDLE.name}"  # relative to the page: enableStaticServing serves static/ there
APP_FONT = {"family": '"Source Sans", sans-serif', "color": "#31333F"}  # the app's own text
APP_LOOK = {"template": "plotly_white", "font": APP_FONT}
CONFIG = {"displaylogo": False}

_draw = st.components.v2.component(
    COMPONENT, js=Path(__file__).with_name("plotly_figure.js").read_text(), isolate_styles=False
)


def app_look(fig: go.Figure) -> go.Figure:
    """A copy of `fig` in the app's look (the caller's figure keeps plotly's defaults)."""
    return go.Figure(fig).update_layout(**APP_LOOK)


def plotly_figure(fig: go.Figure, key: str) -> None:
    """Draw `fig` at the container's width: hover, zoom, legend clicks, PNG and full screen from its toolbar."""
    _draw(data={"figure": app_look(fig).to_json(), "bundle": BUNDLE_URL}, key=key)


def figure_page(fig: go.Figure) -> str:
    """`fig` as the app draws it, on a standalone HTML page with the bundle inlined (opens offline; 1.5 MB of script
    where plotly's own `to_html` inlines 4.8 MB)."""
    div = app_look(fig).to_html(full_html=False, include_plotlyjs=False, config=CONFIG)
    head = f'<meta charset="utf-8"><script type="text/javascript">{plotly_js()}</script>'
    return f"<!DOCTYPE html>\n<html><head>{head}</head><body>{div}</body></html>\n"
