"""Figures of a circuit study (METHODS §22): a kind of composition as a sender x receiver heatmap with the heads of
each role marked, and the composition into given receivers over a model's training checkpoints against the 1/sqrt(d)
baseline. Layers and heads from 1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnlib.stats.composition import KINDS
from attnlib.views.figure import notebook_figure
from attnlib.views.patching import composition_heatmap
from attnlib.views.roles import ROLE_NAMES
from attnlib.views.special import head_label

ROLE_COLOURS = {"previous": "#d62728", "duplicate": "#9467bd", "induction": "#ff7f0e", "copying": "#2ca02c",
                "sink": "#7f7f7f"}  # fmt: skip
KIND_COLOURS = {"q": "#1f77b4", "k": "#d62728", "v": "#2ca02c"}


def role_tags(roles: Mapping[str, Sequence[Sequence[int]]]) -> dict[tuple[int, int], list[str]]:
    """(layer, head) 0-based -> the roles of that head, in ROLE_COLOURS order."""
    tags: dict[tuple[int, int], list[str]] = {}
    for role in ROLE_COLOURS:
        for layer, head in roles.get(role, []):
            tags.setdefault((int(layer), int(head)), []).append(role)
    return tags


@notebook_figure
def marked_composition_heatmap(scores: np.ndarray, kind: str, model: str,
                               roles: Mapping[str, Sequence[Sequence[int]]]) -> go.Figure:  # fmt: skip
    """One kind of composition as a sender x receiver heatmap; a head of a role is named (its first role) in its row's
    and column's label (e.g. '1-3 previous-token') and framed in the role's colour, a legend naming the colours."""
    L, H = np.asarray(scores).shape[:2]
    fig = composition_heatmap(np.asarray(scores), kind, model)
    tags = role_tags(roles)
    labels = [head_label(l, h) + "".join(f" {ROLE_NAMES.get(r, r)}" for r in tags.get((l, h), [])[:1])
              for l in range(L) for h in range(H)]  # fmt: skip
    fig.update_xaxes(ticktext=labels, title="receiver head")
    fig.update_yaxes(ticktext=labels, title="sender head")
    side = min(1000, 260 + 30 * L * H)
    fig.update_layout(title=f"{model}: {kind.upper()}-composition", width=side + 120, height=side + 60,
                      margin={"l": 10, "r": 10, "t": 170, "b": 10})  # fmt: skip
    for (layer, head), found in tags.items():
        i = layer * H + head
        colour = ROLE_COLOURS[found[0]]
        line = {"color": colour, "width": 2}
        fig.add_shape(type="rect", x0=-0.5, x1=L * H - 0.5, y0=i - 0.5, y1=i + 0.5, line=line)  # the sender's row
        fig.add_shape(type="rect", x0=i - 0.5, x1=i + 0.5, y0=-0.5, y1=L * H - 0.5, line=line)  # the receiver's column
    for role in {r for found in tags.values() for r in found[:1]}:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"{ROLE_NAMES.get(role, role)} heads",
                                 marker={"symbol": "square-open", "size": 12, "color": ROLE_COLOURS[role]}))  # fmt: skip
    fig.update_layout(showlegend=bool(tags), legend={"orientation": "h", "y": -0.02, "yanchor": "top"})
    return fig


@notebook_figure
def composition_training_figure(table: pd.DataFrame, model: str, receivers: str) -> go.Figure:
    """Each kind's mean composition into the receivers over the checkpoints (x: the training step), with the dashed
    1/sqrt(d) baseline."""
    fig = go.Figure()
    for kind in KINDS:
        fig.add_trace(go.Scatter(x=table["step"], y=table[kind], mode="lines+markers", name=f"{kind.upper()}-composition",
                                 line={"color": KIND_COLOURS[kind], "width": 3 if kind == "k" else 2},
                                 hovertemplate=f"step %{{x}}: {kind.upper()} %{{y:.3f}}<extra></extra>"))  # fmt: skip
    fig.add_trace(go.Scatter(x=table["step"], y=table["baseline"], mode="lines", name="1/√d (random matrices)",
                             line={"color": "#999", "dash": "dash"}, hoverinfo="skip"))  # fmt: skip
    fig.update_xaxes(title="training step")
    fig.update_yaxes(title=f"mean composition into {receivers}")
    fig.update_layout(title=f"{model}: composition from earlier heads into {receivers} over training", height=420,
                      margin={"l": 10, "r": 10, "t": 60, "b": 10})  # fmt: skip
    return fig
