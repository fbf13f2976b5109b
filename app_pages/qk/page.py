"""Queries and keys: every query and key of a head over a corpus in one picture, and a grid of every head
(AttentionViz, Yeh et al. 2023; METHODS §17)."""

from __future__ import annotations

from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.qk.qk_grid import head_grid, picked_head
from attnlib.analyses.qk import METHOD_NAMES, METHODS, Fidelity, ProjectionUnavailable, QKOptions, QKResult
from attnlib.core.corpus import CorpusInput
from attnlib.core.runner import run
from attnlib.views.qk import COLOURINGS, MIN_LINE_WEIGHT, grid_html, picture_figure
from ui.sources.corpus_page import CorpusPage, Shown
from ui.sources.model_sidebar import current_model, model_named, try_load
from ui.sources.page_state import Option, bind, set_value
from ui.sources.result_source import Bar, computed, shipped
from ui.widgets.data_table import data_table
from ui.widgets.downloads import download_figure, download_json, download_table
from ui.widgets.family_notes import encoder_part_notes, score_cap_notes
from ui.widgets.methods import cite_methods
from ui.widgets.plotly_figure import clicked_point, plotly_figure
from ui.widgets.side_by_side import side_by_side

KEY = "qk"
GRID = QKOptions(all_heads=True)  # the grid: every head's PCA (a shipped file holds their t-SNE and UMAP too)
METHOD = Option(f"{KEY}_method", "method", "pca", list(METHODS))
COLOUR = Option(f"{KEY}_colour", "colour", "kind", list(COLOURINGS))
LAYER = Option(f"{KEY}_layer", "layer", 1, lo=1)
HEAD = Option(f"{KEY}_head", "head", 1, lo=1)
QUERY = Option(f"{KEY}_query", "query", None)  # [input, token], 1-based: the query whose attention is drawn
OPTIONS = [METHOD, COLOUR, LAYER, HEAD, QUERY]
BAR = Bar("Queries and keys, {model}")
ShownQK = Shown[QKResult]  # a model's grid as the page shows it (a result file's: its own texts are used)


@st.cache_data(max_entries=64, show_spinner=False)
def attention_row(model_name: str, text_a, text_b, layer: int, head: int, position: int) -> tuple[list[str], list]:
    """One input's tokens and one query's attention over its keys (the head's own weights, from one run)."""
    r = run(model_named(model_name), text_a, text_b, capture_qk=False)
    return list(r.tokens), r.attentions[layer, head, position].tolist()


PAGE: CorpusPage[QKOptions, ShownQK] = CorpusPage(
    KEY,
    "qk",
    lambda lm, from_file: GRID,  # no widgets
    bar=BAR,
    refusal="Queries and keys of {model} cannot be shown: {error}",
)


# ---------------------------------------------------------------------------------------------- state and clicks


def picked() -> tuple[int, int]:
    """The picked head, 0-based."""
    return int(st.session_state[LAYER.key]) - 1, int(st.session_state[HEAD.key]) - 1


def pick_head(key: str) -> None:
    """Grid callback: open the clicked head (in every model shown) and forget the picked query."""
    head = picked_head(key)
    if head is not None:
        set_value(LAYER, head[0] + 1)
        set_value(HEAD, head[1] + 1)
        set_value(QUERY, None)


def pick_query(key: str, result: QKResult) -> None:
    """Picture callback: a click on a query draws its attention; a click on a key (or off a point) clears it."""
    point = clicked_point(key)
    index = None if point is None else point.get("index")
    n = result.n_points // 2
    if index is None or not 0 <= int(index) < n:
        set_value(QUERY, None)
        return
    table = result.point_table()
    set_value(QUERY, [table["input"][int(index)] + 1, table["position"][int(index)] + 1])


def selected_point(result: QKResult) -> int | None:
    """The picked query's point index in this result, or None (none picked, or past this result's inputs)."""
    query = st.session_state.get(QUERY.key)
    if not query or len(query) != 2:
        return None
    item, position = int(query[0]) - 1, int(query[1]) - 1
    if not 0 <= item < len(result.inputs) or not 0 <= position < result.inputs[item].n:
        return None
    return sum(result.n_tokens[:item]) + position


# ------------------------------------------------------------------------------------------------------ sections


def options_sidebar(views: list[ShownQK]) -> None:
    """The projection, the colouring and the head (the grid picks it too), kept in the URL."""
    n_layers = min(v.result.n_layers for v in views)
    n_heads = min(v.result.n_heads for v in views)
    for option, top in ((LAYER, n_layers), (HEAD, n_heads)):
        if int(st.session_state[option.key]) > top:
            set_value(option, top)
    with st.sidebar:
        st.subheader("Picture")
        st.radio("Projection", list(METHODS), format_func=METHOD_NAMES.get, key=METHOD.key, horizontal=True)
        st.radio("Colour by", list(COLOURINGS), format_func=COLOURINGS.get, key=COLOUR.key)
        if st.session_state[COLOUR.key] == "upos" and not all(v.result.has_upos for v in views):
            st.caption("Gold UPOS needs a CoNLL-U corpus; the points without it are drawn as special tokens.")
        c_layer, c_head = st.columns(2)
        c_layer.number_input("Layer", 1, n_layers, key=LAYER.key)
        c_head.number_input("Head", 1, n_heads, key=HEAD.key)


def grids(views: list[ShownQK]) -> None:
    """Every head's PCA thumbnail for each model (layers as rows, heads as columns); a click opens a head."""
    st.markdown(
        "**Every head at a glance**: each cell is one head's PCA of every query (green) and key (orange) of the "
        "corpus. Positional heads draw bands or curves, heads that send everything to [SEP] pull the queries to one "
        "cluster. Click a head to open it below; hover to see how faithful its picture is."
    )
    colour = st.session_state[COLOUR.key]

    def grid(v: ShownQK, sfx: str) -> None:
        if not v.result.has_grid:
            st.info(f"{v.model}: this result has no grid; run `attnlib qk ... --all-heads --out FILE` for one.")
            return
        key = f"{KEY}_grid_{views.index(v)}"
        head_grid(v.result, colour, picked(), key, lambda key=key: pick_head(key))
        st.download_button(
            "Download grid (HTML)",
            lambda v=v: grid_html(v.result, colour, f"Queries and keys of {v.model}").encode(),
            f"qk_grid_{v.model.replace('/', '_')}.html",
            "text/html",
            key=f"{key}_html",
        )

    side_by_side(views, grid)


def fidelity_line(f: Fidelity) -> str:
    """The fidelity numbers of METHODS §17 in a sentence."""
    return (
        f"**Fidelity**: the top key of a query is its nearest key in the picture for **{f.top_is_nearest:.0%}** of "
        f"queries (a random key of the same input: {f.random_top_is_nearest:.0%}); its mean rank by distance is "
        f"**{f.mean_rank:.2f}** (a random key: {f.random_mean_rank:.2f}; 1 = nearest)."
    )


def picture_of(v: ShownQK, layer: int, head: int, method: str, index: int) -> QKResult | None:
    """The result holding this head's picture by this method: the shown one, or one computed on request."""
    if v.result.picture(layer, head, method) is not None:
        return v.result
    if v.choice is None:
        st.info(f"{v.model}: the result file has no {METHOD_NAMES[method]} picture of head {layer + 1}-{head + 1}.")
        return None
    options = QKOptions(layer=layer, head=head, method=method)
    found = shipped("qk", v.model, v.choice, options)
    if found is not None:
        return found[0].result
    asked = f"_{KEY}_asked:{v.model}:{v.choice.fingerprint}:{layer}:{head}:{method}"
    if not st.session_state.get(asked):
        st.info(f"{METHOD_NAMES[method]} of head {layer + 1}-{head + 1} is not precomputed for this corpus.")
        if not st.button(f"Compute {METHOD_NAMES[method]} ({v.result.n_points} points)", key=f"{asked}_button"):
            return None
        st.session_state[asked] = True
    try:
        return computed("qk", v.model, v.choice.fingerprint, options, {"corpus": v.choice.inputs}, BAR).result
    except ProjectionUnavailable as exc:
        st.error(str(exc))
        return None


def query_lines(v: ShownQK, result: QKResult, layer: int, head: int, point: int) -> tuple[list | None, str]:
    """The picked query's attention over its input's keys (None when the model cannot run it) and a caption."""
    table = result.point_table()
    item, position = table["input"][point], table["position"][point]
    own = result.inputs[item]
    source = v.inputs[item] if v.inputs is not None else CorpusInput(own.text_a, own.text_b)
    lm, error = try_load(v.model)
    if lm is None:
        return None, f"The attention lines need {v.model}, which cannot be loaded here: {error}"
    tokens, weights = attention_row(v.model, source.text_a, source.text_b, layer, head, position)
    if tokens != own.tokens:
        return None, "This input tokenizes differently here than in the result; no lines are drawn."
    top = int(np.argmax(weights))
    link = "./?" + urlencode(
        {"view": "head", "layer": layer + 1, "head": head + 1, "heads": head + 1, "model": v.model,
         "a": own.text_a, **({"b": own.text_b} if own.text_b else {}), "token": position + 1}
    )  # fmt: skip
    return weights, (
        f"Query **{own.tokens[position]}** (input {item + 1}, token {position + 1}): the lines are its attention to "
        f"the keys of its own input (width by weight, under {MIN_LINE_WEIGHT:.0%} left out); its top key is **{tokens[top]}** "
        f"({weights[top]:.2f}). [Open this input in the Live page's head view]({link})"
    )


def large_picture(v: ShownQK, index: int) -> None:
    """The picked head of one model, large, with its fidelity, the picked query's lines and downloads."""
    layer, head = picked()
    method = st.session_state[METHOD.key]
    if layer >= v.result.n_layers or head >= v.result.n_heads:
        st.info(f"{v.model} has no head {layer + 1}-{head + 1}.")
        return
    result = picture_of(v, layer, head, method, index)
    if result is None:
        return
    point = selected_point(result)
    weights, caption = query_lines(v, result, layer, head, point) if point is not None else (None, "")
    fig = picture_figure(
        result, layer, head, method, st.session_state[COLOUR.key], point, None if weights is None else np.array(weights)
    )
    key = f"{KEY}_picture_{index}"
    plotly_figure(fig, key=key, on_click=lambda: pick_query(key, result))
    picture = result.picture(layer, head, method)
    assert picture is not None
    st.markdown(fidelity_line(picture.fidelity))
    st.caption(caption or "Click a query (a green point) to draw its attention to the keys of its own input.")
    name = f"qk_{v.model.replace('/', '_')}_{layer + 1}-{head + 1}_{method}"
    c_fig, c_json = st.columns(2)
    with c_fig:
        download_figure(fig, name, key=f"{key}_html")
    with c_json:
        download_json(result.to_json, name, key=f"{key}_json")


def fidelity_table(views: list[ShownQK]) -> None:
    """Every head's fidelity (PCA), per model: a table to sort and download."""
    rows = [
        {"model": v.model, "layer": l + 1, "head": h + 1, "top key nearest": round(p.fidelity.top_is_nearest, 3),
         "random key nearest": round(p.fidelity.random_top_is_nearest, 3), "mean rank": round(p.fidelity.mean_rank, 2),
         "random mean rank": round(p.fidelity.random_mean_rank, 2)}
        for v in views
        for (l, h, method), p in sorted(v.result.pictures.items())
        if method == "pca" and v.result.has_grid
    ]  # fmt: skip
    if not rows:
        return
    with st.expander("Every head's fidelity (PCA)"):
        table = pd.DataFrame(rows)
        data_table(table, key=f"{KEY}_fidelity")
        download_table(table, "qk_fidelity", key=f"{KEY}_fidelity_csv")


def summary(views: list[ShownQK]) -> None:
    for v in views:
        r = v.result
        st.caption(
            f"{v.model}: {len(r.inputs)} inputs, {r.n_points} points per head (every query and key); {v.source}."
        )
        if r.n_truncated:
            st.warning(f"{v.model}: {r.n_truncated} inputs were longer than its maximum length and were cut.")


st.title("Queries and keys")
st.caption(
    "Every query and key of a head, over a whole corpus, in one picture (AttentionViz, Yeh et al. 2023): the keys "
    "are moved so that their mean is the queries' and both sets scaled to the same mean norm, which changes no "
    "attention weight, then the 2N points are projected to 2-D. A query near a key attends to it more. "
    "**Layers and heads are numbered from 1 on this page**; the command line `attnlib qk` counts from 0."
)
cite_methods(1, 17)
encoder_part_notes()
score_cap_notes()
bind(OPTIONS)
views = PAGE.shown(current_model())
if not views:
    st.stop()
options_sidebar(views)
summary(views)
grids(views)
layer, head = picked()
st.subheader(f"Head {layer + 1}-{head + 1}, {METHOD_NAMES[st.session_state[METHOD.key]]}")
side_by_side(views, lambda v, sfx: large_picture(v, views.index(v)))
fidelity_table(views)
