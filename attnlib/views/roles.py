"""Figures of head roles (METHODS §20): a layers x heads map coloured by role with every score on hover, one score as
a heatmap, the causal check's bars, the lines of each score's maximum and the in-context gain over training steps,
and retrieval's per-head scores. Layers and heads are numbered from 1."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.roles import (
    NO_ROLE,
    ROLE_NAMES,
    SCORE_KEYS,
    RolesResult,
    checkpoint_table,
    main_roles,
    role_thresholds,
)
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.importance import effect_heatmap
from attnlib.views.layers import MARGIN
from attnlib.views.special import head_label

ROLE_COLOURS = {
    "none": "#e8e8e8",
    "previous": "#9467bd",
    "duplicate": "#2ca02c",
    "induction": "#d62728",
    "copying": "#1f77b4",
    "retrieval": "#ff7f0e",
    "first_share": "#8c564b",
}
GAIN_COLOUR = "#000000"


def hover_text(scores: Mapping[str, np.ndarray | None], roles: np.ndarray) -> np.ndarray:
    """Each head's hover: its label, its role and every score it has."""
    n_layers, n_heads = roles.shape
    text = np.empty(roles.shape, dtype=object)
    for l in range(n_layers):
        for h in range(n_heads):
            lines = [f"head {head_label(l, h)}: {ROLE_NAMES.get(roles[l, h], roles[l, h])}"]
            lines += [f"{ROLE_NAMES[r]} {s[l, h]:.3f}" for r, s in scores.items() if s is not None and r in ROLE_NAMES]
            text[l, h] = "<br>".join(lines)
    return text


@notebook_figure
def role_map(
    scores: Mapping[str, np.ndarray | None], thresholds: Mapping[str, float], title: str = "Head roles"
) -> go.Figure:
    """Every head as a cell coloured by its role (main_roles; grey: none), with all its scores on hover; a cell's
    customdata is its head's index l * heads + h (0-based)."""
    roles = main_roles(scores, thresholds)
    n_layers, n_heads = roles.shape
    order = [NO_ROLE, *[r for r in ROLE_COLOURS if r != NO_ROLE and r in thresholds and scores.get(r) is not None]]
    index = np.vectorize(order.index)(roles).astype(float)
    k = len(order)
    colourscale = []
    for i, role in enumerate(order):  # one flat band of colour per role: role i at z = i
        colourscale += [[i / k, ROLE_COLOURS[role]], [(i + 1) / k, ROLE_COLOURS[role]]]
    fig = go.Figure(
        go.Heatmap(
            z=index,
            x=np.arange(1, n_heads + 1),
            y=np.arange(1, n_layers + 1),
            zmin=-0.5,
            zmax=k - 0.5,
            colorscale=colourscale,
            text=hover_text(scores, roles),
            customdata=np.arange(n_layers * n_heads).reshape(n_layers, n_heads),  # a click names the head: l * H + h
            hovertemplate="%{text}<extra></extra>",
            xgap=2,
            ygap=2,
            colorbar={
                "tickvals": list(range(k)),
                "ticktext": [ROLE_NAMES.get(r, r) for r in order],
                "thickness": 14,
                "title": {"text": "role", "side": "right"},
            },
        )
    )
    fig.update_xaxes(title="head", tickmode="linear", dtick=1)
    fig.update_yaxes(title="layer", tickmode="linear", dtick=1, autorange="reversed")
    fig.update_layout(title=title, height=max(300, 90 + 28 * n_layers), margin=dict(l=10, r=10, t=60, b=10))
    return fig


@notebook_figure
def score_heatmap(values: np.ndarray, role: str, what: str = "score") -> go.Figure:
    """One role's score of every head ([layers, heads]) as a heatmap."""
    return effect_heatmap(np.asarray(values, float), f"{ROLE_NAMES.get(role, role).capitalize()} score", what)


@notebook_figure
def causal_bars(causal: Mapping[str, Mapping], gain: float | None) -> go.Figure:
    """The causal check (§20): per role, the in-context gain with its top-k heads ablated against the control (k
    random other heads), and the model's own gain as a dashed line."""
    roles = list(causal)
    names = [ROLE_NAMES.get(r, r) for r in roles]
    heads = [", ".join(head_label(int(l), int(h)) for l, h in causal[r]["heads"]) for r in roles]
    fig = go.Figure(
        [
            go.Bar(
                x=names,
                y=[causal[r]["gain_ablated"] for r in roles],
                name="role's top heads ablated",
                marker_color=[ROLE_COLOURS.get(r, "#444") for r in roles],
                customdata=heads,
                texttemplate="%{y:.2f}",  # a gain ablated to about 0 has no bar to see: its number says it
                textposition="outside",
                hovertemplate="%{x}: heads %{customdata} ablated<br>gain %{y:.3f} nat<extra></extra>",
            ),
            go.Bar(
                x=names,
                y=[causal[r]["control_gain"] for r in roles],
                name="as many random other heads ablated (control)",
                marker_color="#bdbdbd",
                texttemplate="%{y:.2f}",
                textposition="outside",
                hovertemplate="%{x}: control<br>gain %{y:.3f} nat<extra></extra>",
            ),
        ]
    )
    if gain is not None:
        fig.add_hline(y=gain, line_dash="dash", line_color=GAIN_COLOUR,
                      annotation_text=f"no head ablated: {gain:.2f} nat", annotation_position="top left")  # fmt: skip
    fig.update_yaxes(title="in-context gain G = L₁ − L₂ (nat)")
    fig.update_layout(
        title="Causal check: the in-context gain with each role's heads ablated",
        barmode="group",
        height=420,
        legend={"orientation": "h", "y": -0.2},
        margin=MARGIN,
    )
    return fig


@notebook_figure
def checkpoint_lines(
    steps: Sequence[float],
    maxima: Mapping[str, Sequence[float]],
    gain: Sequence[float | None] | None,
    x_title: str = "training step",
    title: str = "Head roles over training",
) -> go.Figure:
    """Per checkpoint (x: its training step), the largest score of each role over the heads (left axis) and the
    in-context gain (right axis, nat), so a phase change shows where one happens."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for role, values in maxima.items():
        fig.add_trace(
            go.Scatter(
                x=list(steps),
                y=list(values),
                name=f"largest {ROLE_NAMES.get(role, role)} score",
                mode="lines+markers",
                line={"color": ROLE_COLOURS.get(role, "#444"), "width": 3},
                hovertemplate=f"{ROLE_NAMES.get(role, role)}<br>step %{{x}}: %{{y:.3f}}<extra></extra>",
            ),
            secondary_y=False,
        )
    if gain is not None and any(g is not None for g in gain):
        fig.add_trace(
            go.Scatter(
                x=list(steps),
                y=[np.nan if g is None else g for g in gain],
                name="in-context gain (nat, right axis)",
                mode="lines+markers",
                line={"color": GAIN_COLOUR, "width": 3, "dash": "dash"},
                hovertemplate="in-context gain<br>step %{x}: %{y:.3f} nat<extra></extra>",
            ),
            secondary_y=True,
        )
        fig.update_yaxes(title_text="in-context gain (nat)", secondary_y=True, rangemode="tozero", tickmode="auto",
                         showgrid=False)  # fmt: skip  # plotly.js 3 syncs an overlaying axis's ticks: 1.51, 3.02, ...
    fig.update_yaxes(title_text="largest score over heads", range=[0, 1.02], secondary_y=False)
    fig.update_xaxes(title_text=x_title)
    fig.update_layout(title=title, height=440, legend={"orientation": "h", "y": -0.25}, margin=dict(MARGIN, b=60))
    return fig


@notebook_figure
def retrieval_heatmap(scores: np.ndarray, threshold: float) -> go.Figure:
    """Retrieval scores (Wu et al. 2024) of every head; a head above the threshold is a retrieval head."""
    return effect_heatmap(np.asarray(scores, float), f"Retrieval score (retrieval heads: above {threshold:g})", "score")


@notebook_figure
def training_figure(model: str, table: pd.DataFrame, scores: Sequence[str] | None = None) -> go.Figure:
    """checkpoint_lines of a checkpoints' table (attnlib.analyses.roles.checkpoint_table: step, max_<score>,
    in_context_gain): the `scores` named (default: every score defined at some checkpoint) and the gain."""
    names = [c.removeprefix("max_") for c in table.columns if c.startswith("max_") and table[c].notna().any()]
    maxima = {name: table[f"max_{name}"] for name in names if scores is None or name in scores}
    gain = table["in_context_gain"] if table["in_context_gain"].notna().any() else None
    return checkpoint_lines(table["step"], maxima, gain, title=f"{model}: head roles over training")


@draws(RolesResult)
def roles_figures(roles: RolesResult, model: str) -> list:
    """The role map, the induction score, the causal check's bars (with a next-token loss) and, with checkpoints,
    the lines of each score's largest value and the in-context gain over training."""
    scores = {key: roles.scores.of(key) for key in SCORE_KEYS}
    figures = [role_map(scores, role_thresholds(roles.thresholds), f"Head roles: {model}"),
               score_heatmap(roles.scores.induction, "induction")]  # fmt: skip
    if roles.causal:
        figures.append(causal_bars({r: c.to_json() for r, c in roles.causal.items()}, roles.in_context_gain))
    if roles.checkpoints:
        figures.append(training_figure(model, checkpoint_table(roles)))
    return figures
