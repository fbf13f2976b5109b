"""What the Predictions page draws of one model's prompt: the prediction, the route graph with the picked edge's heads
(each head's attention map beside its contribution map) and the picked node's logit-lens table, and the direct logit
attribution with each head's promoted and suppressed tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.predictions.prompt_state import (
    ATTENTION_WORDS,
    TOP,
    PromptView,
    attention_edges,
    edge_attention,
    edge_ends,
    edge_name,
    edge_text,
    final_node,
    head_contribution_map,
    node_name,
    node_tokens,
    nodes_by_id,
    picked,
    route_nodes,
)
from attnlib.analyses.lens import Attribution, LensResult, attribution_rows
from attnlib.views.heatmap import attention_heatmap
from attnlib.views.lens import attribution_heatmap, lens_table
from attnlib.views.special import head_label
from ui.sources.live_inputs import cached_run, cached_seq2seq, pretty_token
from ui.sources.page_state import Option, bind, set_value
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.plotly_figure import clicked_point


def shown_tokens(view: PromptView) -> list[str]:
    """The tokens as readers expect them (byte-level BPE's space marks removed)."""
    return prettified(view.tokens)


def prettified(tokens: list[str]) -> list[str]:
    return [pretty_token(t) for t in tokens]


def pick_box(option: Option, label: str, names: list[str], texts: list[str], help: str) -> int:
    """A select box of `names` (shown as `texts`) bound to `option` (its URL value a name; the first by default);
    the index picked."""
    bind([option])
    if st.session_state[option.key] not in names:
        set_value(option, names[0])
    shown = dict(zip(names, texts, strict=True))
    chosen = st.selectbox(label, names, key=option.key, format_func=shown.__getitem__, help=help)
    return names.index(chosen)


def on_click_set(figure_key: str, option: Option, name_of: Callable[[Any], str | None]) -> Callable[[], None]:
    """A figure's click callback: the clicked point's customdata, named by `name_of`, becomes the option's value."""

    def clicked() -> None:
        point = clicked_point(figure_key)
        name = None if point is None or point.get("index") is None else name_of(point["index"])
        if name is not None:
            set_value(option, name)

    return clicked


# ---------- the prediction -------------------------------------------------------------------------------------------


def prediction_table(view: PromptView) -> pd.DataFrame | None:
    """The model's next-token prediction at the position: its likeliest tokens with their probabilities (the model's
    own softmax); None without an LM head."""
    if view.lens is None:
        return None
    top = view.lens["prediction"]["top"]
    return pd.DataFrame(
        {
            "rank": np.arange(1, len(top) + 1),
            "token": [pretty_token(t["token"]) for t in top],
            "probability": [float(t["probability"]) for t in top],
            "id": [int(t["id"]) for t in top],
        }
    )


def draw_prediction(view: PromptView, sfx: str) -> None:
    """The predicted token after the position, and the model's top tokens with their probabilities."""
    tokens = shown_tokens(view)
    table = prediction_table(view)
    if table is None:
        st.caption(view.missing("prediction"))
        return
    first = table.iloc[0]
    reads = "the decoder predicts" if view.crosses else "the model predicts"
    st.markdown(
        f"After **{tokens[view.position]}** (position {view.position}) {reads} **{first['token']}** "
        f"with probability {first['probability']:.3f}."
    )
    data_table(table, key=f"pred_prediction{sfx}", formats={"probability": "%.4f"})


# ---------- the route graph, an edge's heads, a node's lens ----------------------------------------------------------


def draw_graph(view: PromptView, sfx: str, threshold: float, mode: str) -> None:
    """The route graph (layers up, positions across, edge width the weight, the route in colour); a click on a node or
    an attention edge's middle opens it below (as its select box does)."""
    from attnlib.analyses.routes import RouteGraph
    from attnlib.views.routes import route_graph

    routes = view.routes
    assert routes is not None
    figure = route_graph(RouteGraph.from_json(routes))
    figure.update_layout(width=None)  # the column's width: the graph of a long prompt scrolls with plotly's zoom
    key = f"pred_graph{sfx}"

    def opened() -> None:  # a click on a node opens its lens below, on an attention edge's middle its heads
        point = clicked_point(key)
        index = None if point is None else point.get("index")
        if isinstance(index, str) and index.startswith("edge "):
            set_value(picked("edge", sfx), edge_name(routes, int(index.removeprefix("edge "))))
        elif index in nodes_by_id(routes):
            set_value(picked("node", sfx), node_name(nodes_by_id(routes)[index]))

    chart(figure, f"routes{sfx}", key, on_click=opened)
    route = attention_edges(routes, view.position)
    prediction = routes["prediction"]
    st.caption(
        f"The route to the prediction at position {view.position} ({pretty_token(prediction['token'])}): "
        f"{len(routes['route']['edges'])} edges above the threshold {threshold:g} ({mode}), {len(route)} of them "
        "through attention. Hover a node for the heads of the route's edges into it; click a node or the dot in the "
        "middle of an attention edge to open it below."
        + (
            " The source (encoder) is on the left, the target (decoder) on the right: each decoder layer has a node S "
            "after its self-attention and A after its cross-attention, whose edges come from the encoder's last states."
            if view.crosses
            else ""
        )
    )


def draw_edge(view: PromptView, sfx: str) -> None:
    """The picked attention edge: each head's share of it, and for the picked head its attention map beside its
    contribution map (METHODS §21) in that layer."""
    routes = view.routes
    assert routes is not None
    edges = attention_edges(routes, view.position) or attention_edges(routes, view.position, on_route=False)
    if not edges:
        st.caption("The graph has no attention edge.")
        return
    index = edges[
        pick_box(
            picked("edge", sfx),
            "Attention edge",
            [edge_name(routes, e) for e in edges],
            [edge_text(routes, e, prettified) for e in edges],
            "The route's attention edges, heaviest first; or click one in the graph.",
        )
    ]
    layer, key, query = edge_ends(routes, index)
    attention = edge_attention(routes, index)
    which = "" if attention is None else f" ({ATTENTION_WORDS[attention]})"
    shares = np.asarray(routes["edges"][index]["heads"], float)
    heads = [head_label(layer, h) for h in range(len(shares))]
    st.dataframe(
        pd.DataFrame({"head": heads, "share": shares}).set_index("head").T,
        width="stretch",
    )
    order = list(np.argsort(-shares))
    h = pick_box(
        picked("ehead", sfx),
        "Head",
        [heads[k] for k in order],
        [f"{heads[k]} (share {shares[k]:.3f})" for k in order],
        "Each head's share of the edge, largest first.",
    )
    head = int(order[h])
    nodes = nodes_by_id(routes)
    edge = routes["edges"][index]
    keys, queries = (prettified(node_tokens(routes, nodes[edge[end]])) for end in ("source", "target"))
    if attention is None:
        weights = cached_run(view.model, view.text, "").attentions[layer, head]
    else:  # the encoder-decoder's own maps of that attention for the source and the graph's target
        weights = cached_seq2seq(view.model, view.text, routes["target"]).part(attention)[0][layer, head]
    left, right = st.columns(2)
    with left:
        figure = attention_heatmap(weights, queries, keys, f"Attention of head {heads[head]}{which}")
        chart(figure.update_layout(width=None), f"attention_{heads[head]}{sfx}", f"pred_attention{sfx}")
    with right:
        contribution = head_contribution_map(routes, layer, head, attention)
        figure = attention_heatmap(contribution, queries, keys, f"Contribution of head {heads[head]}{which}")
        chart(figure.update_layout(width=None), f"contribution_{heads[head]}{sfx}", f"pred_contribution{sfx}")
    st.caption(
        f"Row {query} ({queries[query]}) of each map holds the edge: the head's attention to {keys[key]} ({key}) "
        f"and its share of what the attention node at {queries[query]} receives."
    )


def node_table(node: dict[str, Any]) -> pd.DataFrame:
    """A node's logit-lens reading: its top and bottom tokens, each with its logit and rank change."""
    top, bottom = node["top"], node["bottom"]
    return pd.DataFrame(
        {
            "rank": np.arange(1, len(top) + 1),
            "top token": [pretty_token(t["token"]) for t in top],
            "top logit": [float(t["logit"]) for t in top],
            "top rank change": [t["rank_change"] for t in top],
            "bottom token": [pretty_token(t["token"]) for t in bottom],
            "bottom logit": [float(t["logit"]) for t in bottom],
            "bottom rank change": [t["rank_change"] for t in bottom],
        }
    )


def draw_node(view: PromptView, sfx: str, lens_at: Callable[[int], dict[str, Any] | None]) -> None:
    """The picked node's logit lens: its state read through the final norm and the unembedding."""
    routes = view.routes
    assert routes is not None
    nodes = route_nodes(routes) or [final_node(routes, view.position)]
    tokens = shown_tokens(view)  # the lens reads the positions that predict (an encoder-decoder's target)
    names = [node_name(n) for n in nodes]
    texts = [
        f"{n['kind']}{'' if n['layer'] is None else int(n['layer']) + 1} at {tokens[int(n['position'])]!r} "
        f"({int(n['position'])})"
        for n in nodes
    ]
    node = nodes[pick_box(picked("node", sfx), "Node", names, texts, "The route's nodes; or click one in the graph.")]
    if view.crosses:
        st.caption(
            "The lens reads the decoder's states E, A (after both attentions) and R at a target position, through its "
            "final norm and head; the encoder's states reach the prediction only through cross-attention, and the "
            "decoder's S (after its self-attention alone) is not read."
        )
    lens = lens_at(int(node["position"]))
    if lens is None:
        return
    layer = node["layer"]
    (read,) = [n for n in lens["nodes"] if n["kind"] == node["kind"] and n["layer"] == layer]
    st.caption(
        f"Rank change: how many places the token rose since the node before it ("
        f"A follows the R below it, R the A of its layer); mode {lens['mode']}."
    )
    data_table(node_table(read), key=f"pred_lens{sfx}", formats={"top logit": "%.3f", "bottom logit": "%.3f"})
    where = f"{tokens[int(node['position'])]!r} ({int(node['position'])})"
    chart(lens_table(LensResult.from_json(lens), f"Every node's top tokens at {where}, {lens['mode']}"),
          f"lens_position{sfx}", f"pred_lens_position{sfx}")  # fmt: skip


# ---------- direct logit attribution ---------------------------------------------------------------------------------


def readout_table(lens: dict[str, Any], layer: int, head: int) -> pd.DataFrame:
    """One head's readout: the tokens it promotes and suppresses most at the position, with their values."""
    read = lens["readouts"][layer][head]
    return pd.DataFrame(
        {
            "promoted": [pretty_token(t["token"]) for t in read["promoted"]],
            "promoted value": [float(t["value"]) for t in read["promoted"]],
            "suppressed": [pretty_token(t["token"]) for t in read["suppressed"]],
            "suppressed value": [float(t["value"]) for t in read["suppressed"]],
        }
    )


def draw_attribution(view: PromptView, sfx: str) -> None:
    """The attribution heatmap (layers x heads, the feed-forward blocks beside) of the token or pair; a click on a
    head opens its promoted and suppressed tokens."""
    lens = view.attribution
    if lens is None:
        if "attribution" in view.refusals:
            st.error(f"{view.model}: {view.refusals['attribution']}")
        else:
            st.caption(view.missing("attribution"))
        return
    dla = lens["dla"]
    if dla is None:
        st.info(lens["notes"].get("dla", "No attribution."))
        return
    what = f"'{pretty_token(dla['token']['token'])}'"
    if dla["versus"] is not None:
        what += f" − '{pretty_token(dla['versus']['token'])}'"
    st.markdown(
        f"Direct logit attribution of {what} at position {view.position}: the parts sum to the model's own logit "
        f"{float(dla['logit']):.3f} within {float(dla['max_error']):.1e} (METHODS §21)."
    )
    heads = np.asarray(dla["heads"], float)
    option = picked("readout", sfx)
    key = f"pred_dla{sfx}"

    def name_of(index: Any) -> str | None:  # a head's hover text: "head 2-3: ..."
        return (
            index.split(":")[0].removeprefix("head ") if isinstance(index, str) and index.startswith("head ") else None
        )

    figure = attribution_heatmap(LensResult.from_json(lens), f"Direct logit attribution of {what}")
    chart(figure, f"attribution{sfx}", key, on_click=on_click_set(key, option, name_of))
    labels = [head_label(l, h) for l in range(heads.shape[0]) for h in range(heads.shape[1])]
    order = list(np.argsort(-np.abs(heads.ravel())))
    k = pick_box(option, "Head's readout", [labels[i] for i in order],
                 [f"{labels[i]} ({heads.ravel()[i]:+.3f})" for i in order],
                 "Largest attribution first; or click a head in the heatmap.")  # fmt: skip
    layer, head = divmod(int(order[k]), heads.shape[1])
    st.caption(f"Head {labels[order[k]]} at position {view.position}: the {TOP} tokens its output pushes up and down.")
    data_table(readout_table(lens, layer, head), key=f"pred_readout_table{sfx}",
               formats={"promoted value": "%.3f", "suppressed value": "%.3f"})  # fmt: skip
    table = pd.DataFrame(attribution_rows(Attribution.from_json(dla), view.model))
    download_table(table, f"attribution{sfx}", key=f"pred_dla_csv{sfx}")
    download_json(lens, f"lens{sfx}", key=f"pred_lens_json{sfx}")
