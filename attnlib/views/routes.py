"""The figures of `routes` (METHODS §21): a text's route graph (layers up, positions across, edge width = weight, the
route to the prediction in colour, the rest of the graph in grey; an encoder-decoder's source on the left, its target
on the right, cross edges from the encoder's last states) and a corpus's route frequency as a layers x heads heatmap
(an encoder-decoder's: its decoder's, cross-attention's and encoder's heads)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnlib.analyses.routes import RouteFrequency, RouteGraph
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure
from attnlib.views.importance import effect_heatmap
from attnlib.views.inputs import prettified

WIDTHS = (0.25, 0.5, 0.75, 1.0)  # edges drawn in bins of weight up to these, one trace each (a light figure)
ROUTE_COLOUR, GRAPH_COLOUR = "#d62728", "#c8c8c8"
KIND_OFFSET = {"E": (0.0, 0.0), "A": (0.0, 1.0), "F": (0.3, 1.5), "R": (0.0, 2.0)}  # (x, y within a layer's band)
# an encoder-decoder's decoder layer: S after self-attention, A after cross-attention
DECODER_OFFSET = {"E": (0.0, 0.0), "S": (0.0, 0.7), "A": (0.0, 1.3), "F": (0.3, 1.65), "R": (0.0, 2.0)}
SYMBOLS = {"E": "square", "S": "triangle-up", "A": "circle", "F": "diamond", "R": "circle-open"}


def node_xy(node: dict, target_from: float = 0.0) -> tuple[float, float]:
    """Where a node is drawn: x its position (F a little right; an encoder-decoder's target nodes from `target_from`),
    y 0 for E and 2 l + 1, 2 l + 1.5, 2 l + 2 for A, F, R (a decoder layer's S and A at 2 l + 0.7 and 2 l + 1.3)."""
    decoder = node.get("part") == "decoder"
    dx, dy = (DECODER_OFFSET if decoder else KIND_OFFSET)[node["kind"]]
    layer = node["layer"]
    return node["position"] + dx + (target_from if decoder else 0.0), dy if layer is None else 2 * layer + dy


def _edge_traces(edges: Sequence[dict], at: dict[str, tuple[float, float]], colour: str, scale: float) -> list:
    """Line traces of these edges, one per width bin (weight up to each of WIDTHS)."""
    traces, low = [], 0.0
    for high in WIDTHS:
        xs: list[float | None] = []
        ys: list[float | None] = []
        for edge in edges:
            if low < edge["weight"] <= high or (high == WIDTHS[-1] and edge["weight"] > high):
                (x0, y0), (x1, y1) = at[edge["source"]], at[edge["target"]]
                xs += [x0, x1, None]
                ys += [y0, y1, None]
        if xs:
            line = dict(color=colour, width=max(0.5, scale * high))
            traces.append(go.Scatter(x=xs, y=ys, mode="lines", line=line, hoverinfo="skip", showlegend=False))
        low = high
    return traces


@notebook_figure
def route_graph(graph: RouteGraph, title: str = "") -> go.Figure:
    """The graph: nodes at (position, layer), every edge above tau in grey, the route's edges in colour with width by
    weight; hovering an attention edge's target node shows the route's heads into it. Each node's point carries its id
    and each attention edge's middle point "edge i" (its index in `edges`) as customdata, for a page's clicks."""
    source = graph.tokens_of(graph.part_nodes("encoder")[0]) if graph.crosses else []
    target_from = len(source) + 1.0 if source else 0.0
    at = {node["id"]: node_xy(node, target_from) for node in graph.nodes}
    on_route = [graph.edges[i] for i in graph.route["edges"]]
    fig = go.Figure(_edge_traces(graph.edges, at, GRAPH_COLOUR, 2.0) + _edge_traces(on_route, at, ROUTE_COLOUR, 6.0))
    reached = {edge["source"] for edge in on_route} | {edge["target"] for edge in on_route}
    route_hover = _heads_into(graph, on_route)
    attention = [i for i, edge in enumerate(graph.edges) if edge["kind"] in ("attention", "cross")]
    if attention:  # a point at each attention (and cross) edge's middle: hovered or clicked, it names it ("edge i")
        middles = [tuple((a + b) / 2 for a, b in zip(at[graph.edges[i]["source"]], at[graph.edges[i]["target"]]))
                   for i in attention]  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in middles],
                y=[y for _, y in middles],
                mode="markers",
                name="attention edge",
                marker=dict(size=6, color=GRAPH_COLOUR, opacity=0.4),
                customdata=[f"edge {i}" for i in attention],
                text=[_edge_text(graph.edges[i]) for i in attention],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    for kind, symbol in SYMBOLS.items():
        nodes = [node for node in graph.nodes if node["kind"] == kind]
        if not nodes:
            continue
        fig.add_trace(
            go.Scatter(
                x=[at[node["id"]][0] for node in nodes],
                y=[at[node["id"]][1] for node in nodes],
                mode="markers",
                name=kind,
                marker=dict(
                    symbol=symbol,
                    size=7,
                    color=[ROUTE_COLOUR if node["id"] in reached else "#7f7f7f" for node in nodes],
                ),
                customdata=[node["id"] for node in nodes],  # a click names the node
                text=[_node_text(graph, node, route_hover.get(node["id"], "")) for node in nodes],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    n_layers = graph.n_layers_of(None)
    fig.update_xaxes(
        tickmode="array",
        tickvals=list(range(len(source))) + [target_from + i for i in range(len(graph.tokens))],
        ticktext=prettified(source) + prettified(graph.tokens),
        tickangle=-60,
        title="",
    )
    if source:  # which tokens are the source's and which the target's, above the graph
        for x, text in (((len(source) - 1) / 2, "source (encoder)"), (target_from + (len(graph.tokens) - 1) / 2,
                                                                       "target (decoder)")):  # fmt: skip
            fig.add_annotation(x=x, y=1.0, yref="paper", yanchor="bottom", text=text, showarrow=False)
    fig.update_yaxes(
        tickmode="array", tickvals=[0] + [2 * l + 2 for l in range(n_layers)],
        ticktext=["embeddings"] + [f"layer {l + 1}" for l in range(n_layers)], title="",
    )  # fmt: skip
    prediction = graph.prediction
    said = f"the prediction at {prediction['position']}: {prettified([str(prediction['token'])])[0].strip()}"
    fig.update_layout(
        title=title or f"Route to {said} (tau {graph.threshold:g}, {graph.mode})",
        height=max(360, 60 * n_layers + 160),
        width=max(600, 40 * (len(source) + len(graph.tokens)) + 120),
        margin=dict(l=10, r=10, t=60, b=10),
        legend=dict(orientation="h", y=-0.2),
    )
    return fig


def _heads_into(graph: RouteGraph, on_route: Sequence[dict]) -> dict[str, str]:
    """Per attention node on the route, its incoming attention (and cross) edges' heads (head l-h numbered from 1) as
    text."""
    layer_of = {node["id"]: node["layer"] for node in graph.nodes}
    text: dict[str, list[str]] = {}
    for edge in on_route:
        if edge["kind"] not in ("attention", "cross"):
            continue
        heads = ", ".join(
            f"{layer_of[edge['target']] + 1}-{h + 1} {v:.2f}" for h, v in enumerate(edge["heads"]) if v > 0
        )
        text.setdefault(edge["target"], []).append(f"from {edge['source']} {edge['weight']:.2f} ({heads})")
    return {node: "<br>".join(lines) for node, lines in text.items()}


def _edge_text(edge: dict) -> str:
    return f"{edge['source']} → {edge['target']}: {edge['weight']:.2f}"


def _node_text(graph: RouteGraph, node: dict, heads: str) -> str:
    token = prettified([graph.tokens_of(node)[node["position"]]])[0]
    where = "embedding" if node["layer"] is None else f"layer {node['layer'] + 1}"
    part = f"{node['part']} " if graph.crosses else ""
    return f"{node['id']} ({part}{where}, {token!s})" + (f"<br>{heads}" if heads else "")


ATTENTION_NAMES = {"heads": "", "decoder": " (decoder self-attention)", "cross": " (cross-attention)",
                   "encoder": " (encoder self-attention)"}  # fmt: skip


@draws(RouteGraph)
def route_graph_figures(graph: RouteGraph, model: str) -> list:
    """The route graph, and each head's largest share on the route as a heatmap (an encoder-decoder: one per
    attention)."""
    figures = [route_graph(graph, title=f"{model}: route to position {graph.route['position']}")]
    for name, shares in graph.head_shares().items():
        if shares.size:
            figures.append(effect_heatmap(shares, f"Each head's largest share on the route{ATTENTION_NAMES[name]}",
                                          "share"))  # fmt: skip
    return figures


@draws(RouteFrequency)
def route_frequency_figures(frequency: RouteFrequency, model: str) -> list:
    """Each head's route frequency over the corpus as a layers x heads heatmap (an encoder-decoder: one per
    attention)."""
    figures = []
    for name, rows in frequency.frequencies().items():
        values = np.array([[np.nan if v is None else v for v in row] for row in rows], float)
        title = (f"{model}: share of {frequency.routes} routes each head is on{ATTENTION_NAMES[name]} (tau "
                 f"{frequency.threshold:g}, {frequency.mode})")  # fmt: skip
        figures.append(effect_heatmap(values, title, "frequency"))
    return figures
