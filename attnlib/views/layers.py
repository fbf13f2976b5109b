"""What the per-layer line charts share: layers numbered from 1 (or relative depth when models differ in depth),
one colour per model, a line through one value per layer with its hover text, and the axes and margins."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.views.figure import notebook_figure

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


@notebook_figure
def model_lines(
    per_model: dict[str, dict[str, np.ndarray]],
    names: dict[str, str],
    title: str,
    y_title: str,
    cols: int = 3,
    shared_y: bool = True,
) -> go.Figure:
    """One panel per statistic, one line per model through its per-layer values ([layers] arrays), one colour each."""
    keys = list(next(iter(per_model.values())))
    rows = -(-len(keys) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[names[k] for k in keys], shared_yaxes=shared_y)
    for m, (model, values) in enumerate(per_model.items()):
        colour = MODEL_COLOURS[m % len(MODEL_COLOURS)]
        for i, key in enumerate(keys):
            trace = layer_line(
                np.asarray(values[key], dtype=float),
                model,
                hover=f"{model}<br>{names[key]}",
                legendgroup=model,
                showlegend=i == 0,
                line=dict(color=colour, width=2),
            )
            fig.add_trace(trace, row=i // cols + 1, col=i % cols + 1)
    fig.update_xaxes(title="layer", tickmode="linear", dtick=1)
    fig.update_yaxes(title=y_title, col=1)
    fig.update_layout(title=title, height=260 * rows + 80, margin=dict(l=10, r=10, t=80, b=10))
    return fig
