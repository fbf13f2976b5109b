"""Plotly figures drawn in the page by plotly.js's cartesian bundle (static/, see plotly_figure.js) instead of
st.plotly_chart, whose full plotly.js costs a new visitor about a second (README, Classroom)."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import streamlit as st

COMPONENT = "attn_figure"
APP_FONT = {"family": '"Source Sans", sans-serif', "color": "#31333F"}  # the app's own text
APP_LOOK = {"template": "plotly_white", "font": APP_FONT}

_draw = st.components.v2.component(
    COMPONENT, js=Path(__file__).with_name("plotly_figure.js").read_text(), isolate_styles=False
)


def app_look(fig: go.Figure) -> go.Figure:
    """A copy of `fig` in the app's look (the caller's figure keeps plotly's defaults)."""
    return go.Figure(fig).update_layout(**APP_LOOK)


def plotly_figure(fig: go.Figure, key: str) -> None:
    """Draw `fig` at the container's width: hover, zoom, legend clicks, PNG and full screen from its toolbar."""
    _draw(data={"figure": app_look(fig).to_json()}, key=key)
