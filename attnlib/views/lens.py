"""The figures of the `lens` analysis (METHODS §21): the logit lens as a table of each node's top tokens (nodes down,
ranks across, coloured by logit, the rank change on hover) and the direct logit attribution as a layers x heads
heatmap with each layer's attention bias and feed-forward block beside it, each head's readout on hover."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.lens import LensResult, Readout
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.layers import MARGIN

READOUT_SHOWN = 5  # tokens of each end of a readout on hover


def _shown(token: str) -> str:
    """A token as hover text shows it (HTML-escaped, a byte-level BPE's leading Ġ as a space)."""
    return html.escape(token.replace("Ġ", " ").replace("▁", " "))


def _change(value: int | None) -> str:
    return "" if value is None else f" ({value:+d} ranks)"


@notebook_figure
def lens_table(result: LensResult, title: str = "") -> go.Figure:
    """Each node's top tokens (E, then each layer's A and R, from the bottom up; rank 1 at the left), the cell's
    colour its logit, its text the token, its hover the logit and the rank change from the node before."""
    nodes = result.nodes
    k = max(len(n.top) for n in nodes)
    logits = np.full((len(nodes), k), np.nan)
    text = np.full((len(nodes), k), "", dtype=object)
    hover = np.full((len(nodes), k), "", dtype=object)
    for row, node in enumerate(nodes):
        for rank, token in enumerate(node.top):
            logits[row, rank] = token.logit
            text[row, rank] = _shown(token.token)
            hover[row, rank] = (
                f"{node.name}, rank {rank + 1}: {_shown(token.token)}, logit {token.logit:.3f}"
                + _change(token.rank_change)
            )
    names = [n.name for n in nodes]
    fig = go.Figure(
        go.Heatmap(
            z=logits,
            x=list(range(1, k + 1)),
            y=names,
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale="Blues",
            colorbar={"title": {"text": "logit", "side": "right"}, "thickness": 12},
        )
    )
    position = result.tokens[result.position]
    fig.update_xaxes(title="rank", tickmode="linear", dtick=1, side="top")
    fig.update_yaxes(title="node", autorange="reversed", type="category")
    fig.update_layout(
        title=title or f"Logit lens at position {result.position} ({_shown(position)}), {result.mode}",
        height=min(1400, 140 + 24 * len(nodes)),
        margin=MARGIN,
    )
    return fig


def _readout_text(readout: Readout) -> str:
    up = ", ".join(_shown(t.token) for t in readout.promoted[:READOUT_SHOWN])
    down = ", ".join(_shown(t.token) for t in readout.suppressed[:READOUT_SHOWN])
    return f"promotes {up}<br>suppresses {down}"


def _heads_hover(values: np.ndarray, readouts, what: str) -> np.ndarray:
    """Each head's hover: its DLA and, where there are readouts, the tokens it promotes and suppresses."""
    n_layers, n_heads = values.shape
    hover = np.full((n_layers, n_heads), "", dtype=object)
    for l in range(n_layers):
        for h in range(n_heads):
            readout = "" if readouts is None else "<br>" + _readout_text(readouts[l][h])
            hover[l, h] = f"{what} {l + 1}-{h + 1}: {values[l, h]:.4g}{readout}"
    return hover


@notebook_figure
def attribution_heatmap(result: LensResult, title: str = "") -> go.Figure:
    """Every head's direct logit attribution (layers down from 1, heads across from 1; an encoder-decoder's decoder:
    its self-attention heads, then its cross-attention heads) and each layer's attention bias and feed-forward block
    beside them, on one diverging scale; a head's hover shows its readout."""
    dla = result.dla
    assert dla is not None, "no attribution: the notes say why"
    panels = [("heads", np.asarray(dla.heads, float), result.readouts, "head")]
    if dla.cross_heads is not None:
        panels = [("self-attention heads", panels[0][1], result.readouts, "head"),
                  ("cross-attention heads", np.asarray(dla.cross_heads, float), result.cross_readouts, "cross head")]  # fmt: skip
    side = np.stack([dla.attention_bias, dla.ffn], axis=1)
    n_layers = side.shape[0]
    top = float(max(*(np.abs(values).max() for _, values, _, _ in panels), np.abs(side).max(), 1e-9))
    layers = np.arange(1, n_layers + 1)
    widths = [0.8 / len(panels)] * len(panels) + [0.2]
    fig = make_subplots(rows=1, cols=len(panels) + 1, column_widths=widths, horizontal_spacing=0.06,
                        subplot_titles=(*(name for name, _, _, _ in panels), "bias and feed-forward"))  # fmt: skip
    scale = dict(colorscale="RdBu_r", zmin=-top, zmax=top)
    for col, (_, values, readouts, what) in enumerate(panels, start=1):
        fig.add_trace(
            go.Heatmap(z=values, x=np.arange(1, values.shape[1] + 1), y=layers,
                       customdata=_heads_hover(values, readouts, what), hovertemplate="%{customdata}<extra></extra>",
                       colorbar={"title": {"text": "DLA"}, "thickness": 12}, showscale=col == 1, **scale),
            row=1, col=col,
        )  # fmt: skip
        fig.update_xaxes(title="head", tickmode="linear", dtick=1, row=1, col=col)
    fig.add_trace(
        go.Heatmap(z=side, x=["attention bias", "feed-forward"], y=layers, showscale=False,
                   hovertemplate="layer %{y}, %{x}: %{z:.4g}<extra></extra>", **scale),
        row=1, col=len(panels) + 1,
    )  # fmt: skip
    fig.update_yaxes(title="layer", tickmode="linear", dtick=1, autorange="reversed")
    token = _shown(dla.token.token) + ("" if dla.versus is None else f" − {_shown(dla.versus.token)}")
    said = (
        f"Direct logit attribution of {token} at position {result.position}: logit {dla.logit:.3f} = parts "
        f"{dla.total:.3f} (embeddings {dla.embeddings:.3f}, constant {dla.constant:.3f}; largest error {dla.max_error:.1e})"
    )
    fig.update_layout(title=title or said, height=max(300, 120 + 26 * n_layers), margin=MARGIN)
    return fig


@draws(LensResult)
def lens_figures(result: LensResult, model: str) -> list:
    """The lens table and, where defined, the attribution heatmap with the readouts on hover."""
    figures = [lens_table(result, f"{model}: logit lens at position {result.position}, {result.mode}")]
    if result.dla is not None:
        figures.append(attribution_heatmap(result))
    return figures
