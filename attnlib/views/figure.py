"""Plotly figures that show themselves in a notebook with the bundled plotly.js inlined, and save as offline pages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec

import plotly.graph_objects as go
import plotly.io as pio

from attnlib.views.display import NotebookView
from attnlib.views.plotly_js import plotly_js

P = ParamSpec("P")
CONFIG = {"displaylogo": False}
PLOTLY_HEIGHT = 450  # plotly's height for a figure that sets none
PAGE_MARGIN = 16
DIV_ID = "figure"  # the page holds one figure: a fixed id keeps the page the same for the same figure (plotly: a UUID)  # the body's default margins above and below the figure


def figure_page(fig: go.Figure | dict[str, Any], default_height: str = "100%") -> str:
    """A figure (or its plotly JSON) on a standalone HTML page with the bundle inlined: it opens offline (1.2 MB of
    script where plotly's own `to_html` inlines 4.8 MB)."""
    div = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        config=CONFIG,
        validate=False,
        default_height=default_height,
        div_id=DIV_ID,
    )
    head = f'<meta charset="utf-8"><script type="text/javascript">{plotly_js()}</script>'
    return f"<!DOCTYPE html>\n<html><head>{head}</head><body>{div}</body></html>\n"


class Figure(NotebookView, go.Figure):
    """A plotly Figure that a notebook shows with plotly.js inlined (no CDN, no require.js, no plotly renderer) and
    that .save_html(path) writes as an offline page; otherwise plotly's Figure as it is."""

    def figure_height(self) -> int:
        """Height in px that plotly draws the figure at."""
        return int(self.layout.height or PLOTLY_HEIGHT)

    def page(self) -> str:
        return figure_page(self, default_height=f"{self.figure_height()}px")

    def frame_height(self) -> int:
        return self.figure_height() + PAGE_MARGIN

    def summary(self) -> str:
        title = self.layout.title.text
        return f"Figure: {title}" if title else f"Figure: {len(self.data)} traces"


def as_figure(fig: go.Figure) -> Figure:
    """`fig` itself as a Figure. Figure adds methods only, so the object's class is changed, which is exact and free,
    where Figure(fig) would copy and validate it again (about 25 ms for a grid of six subplots)."""
    if isinstance(fig, Figure):
        return fig
    if type(fig) is not go.Figure:  # a FigureWidget or another subclass: copy it
        return Figure(fig)
    fig.__class__ = Figure
    return fig


def notebook_figure(build: Callable[P, go.Figure]) -> Callable[P, Figure]:
    """Decorate a figure builder so that its figure shows itself in a notebook (as_figure)."""

    @functools.wraps(build)
    def shown(*args: P.args, **kwargs: P.kwargs) -> Figure:
        return as_figure(build(*args, **kwargs))

    return shown
