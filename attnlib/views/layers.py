"""What the per-layer line charts share: layers numbered from 1 (or relative depth when models differ in depth),
one colour per model, a line through one value per layer with its hover text, and the axes and margins."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go

MODEL_COLOURS = ("#1f77b4", "#d62728")  # first model, compared model
MARGIN = dict(l=10, r=10, t=60, b=40)


def differ_in_depth(depths: Iterable[int]) -> bool:
    """Whether models of these numbers of layers must share a relative-depth axis."""
    return len(set(depths)) > 1


def layer_positions(n_layers: int, relative: bool) -> np.ndarray:
    """x of each layer: 1..n, or the fraction of the depth (layer / n) when models of different depth share an axis."""
    layers = np.arange(1, n_layers + 1)
    return layers / n_layers if relative else layers


def layer_axis_title(relative: bool) -> str:
    """The x title of a per-layer chart."""
    return "relative depth (layer / number of layers)" if relative else "layer"


def layer_line(
    values: Sequence[float] | np.ndarray,
    name: str,
    hover: str | None = None,
    x: np.ndarray | None = None,
    value_format: str = ".3f",
    **style,
) -> go.Scatter:
    """A line with markers through one value per layer ([layers]; x defaults to 1..n), hovering `hover` (else the
    name), the layer and the value; style: any other Scatter property (line, legendgroup, showlegend, ...)."""
    x = np.arange(1, len(values) + 1) if x is None else x
    return go.Scatter(
        x=x,
        y=values,
        name=name,
        mode="lines+markers",
        hovertemplate=f"{hover or name}<br>layer %{{x}}: %{{y:{value_format}}}<extra></extra>",
        **style,
    )


def per_layer_layout(
    fig: go.Figure, title: str, y_title: str, height: int, y_range: Sequence[float] | None = None, **layout
) -> go.Figure:
    """Title, a tick per layer on x, the y title and range, height and the shared margins (layout: anything else)."""
    fig.update_xaxes(title_text="layer", tickmode="linear", dtick=1)
    fig.update_yaxes(title_text=y_title, range=y_range)
    fig.update_layout(title=title, height=height, margin=MARGIN, **layout)
    return fig
