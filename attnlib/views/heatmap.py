"""A single attention map as a heatmap."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnlib.views.figure import notebook_figure


@notebook_figure
def attention_heatmap(attn: np.ndarray, rows: Sequence[str], cols: Sequence[str], title: str = "") -> go.Figure:
    """Heatmap of one [n, n] map: rows are queries (attending), columns keys (attended to)."""
    n = len(rows)
    fig = go.Figure(
        go.Heatmap(
            z=attn,
            x=list(range(len(cols))),
            y=list(range(n)),
            colorscale="Blues",
            zmin=0,
            zmax=float(max(attn.max(), 1e-9)),
            customdata=np.dstack(np.meshgrid(cols, rows)),
            hovertemplate="from %{customdata[1]} to %{customdata[0]}: %{z:.3f}<extra></extra>",
        )
    )
    ticks = dict(tickmode="array", tickfont=dict(size=10))
    fig.update_xaxes(ticktext=list(cols), tickvals=list(range(len(cols))), side="top", tickangle=-60, **ticks)
    fig.update_yaxes(ticktext=list(rows), tickvals=list(range(n)), autorange="reversed", **ticks)
    size = min(900, 120 + 22 * n)
    fig.update_layout(title=title, width=size + 60, height=size, margin=dict(l=10, r=10, t=90, b=10))
    return fig
