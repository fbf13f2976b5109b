"""Head view: tokens in two columns, a line from each query to each key, opacity = weight, one colour per head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnlib.core.runner import RunResult
from attnlib.views.canvas_html import (
    display_theme,
    head_color,
    html_page,
    kinds_box,
    kinds_payload,
    pack_sparse,
    round_list,
    view_script,
)
from attnlib.views.display import View, check_html_action
from attnlib.views.inputs import PAIR_FILTERS as PAIR_FILTERS  # the app imports the pair filters from here
from attnlib.views.inputs import Kind, check_index, chosen, describe, filter_positions, kinds_of, subset

MIN_WEIGHT = 0.01  # lines below this are invisible at any opacity scale and are not sent


@dataclass
class HeadViewData:
    """What the head view draws: the kept query rows and key columns, the heads, and the packed lines."""

    left: list[int]  # query positions kept by the pair filter
    right: list[int]  # key positions kept
    heads: list[int]  # 0-based heads drawn
    maps: np.ndarray  # [(layers,) len(heads), len(left), len(right)] weights as computed (not renormalised)


def head_view_data(
    attn: np.ndarray, heads: Sequence[int], segments: Sequence[int] | None = None, pair_filter: str = "All"
) -> HeadViewData:
    """Select heads of one layer's maps [heads, queries, keys] (or of several layers', [layers, heads, queries, keys])
    and the rows/columns the pair filter keeps."""
    rows, cols = attn.shape[-2:]
    left, right = filter_positions(segments, rows, pair_filter)
    if segments is None:  # every key, as many as there are (cross attention's maps are not square)
        right = list(range(cols))
    heads = [int(h) for h in heads]
    if not heads:
        maps = np.zeros(attn.shape[:-3] + (0, len(left), len(right)), np.float32)
    elif heads == list(range(attn.shape[-3])):
        maps = attn
    else:
        maps = attn[..., heads, :, :]
    if len(left) < rows or len(right) < cols:
        maps = maps[..., left, :][..., right]
    return HeadViewData(left, right, heads, maps)


def lines_part(
    maps: np.ndarray,
    layers: list[int],
    heads: list[int],
    labels: tuple[list[str], list[str]],
    positions: tuple[list[int], list[int]],
    min_weight: float,
) -> dict:
    """The page data of one kind of attention: maps [len(layers), len(heads), queries, keys] packed layer-major (the
    JavaScript draws map li * len(heads) + k), the query (left) and key (right) labels and 0-based positions, and the
    0-based layers and heads, all 1-based on the page."""
    (left, right), (left_pos, right_pos) = labels, positions
    return {
        "layers": [l + 1 for l in layers],
        "heads": [h + 1 for h in heads],
        "colors": [head_color(h) for h in heads],
        "left": left,
        "right": right,
        "leftPos": [i + 1 for i in left_pos],
        "rightPos": [j + 1 for j in right_pos],
        "lines": pack_sparse(maps.reshape(len(layers) * len(heads), len(left), len(right)), min_weight),
    }


def head_view_page(payload: dict, title: str, display_mode: str) -> str:
    """The head view's page; with payload["kinds"], a select of them."""
    theme, css = display_theme(display_mode)
    kinds = kinds_box(payload)
    body = (
        f"<div class='bar'><b id='ttl'></b>{kinds}<span id='layers'></span><span id='legend'></span>"
        "<button id='png'>Save PNG</button></div>"
        "<div class='note' id='hint'></div><div class='scroll' id='box' style='max-height:640px'>"
        "<canvas id='cv'></canvas></div>"
    )
    return html_page(title, payload | theme, body, view_script("head_view.js"), css)


def head_view_html(
    attn: np.ndarray,
    labels: Sequence[str],
    heads: Sequence[int],
    layer: int,
    segments: Sequence[int] | None = None,
    pair_filter: str = "All",
    selected: int | None = None,
    min_weight: float = MIN_WEIGHT,
    title: str = "",
    quantity: str = "weight",
    layers: Sequence[int] | None = None,
    display_mode: str = "light",
) -> str:
    """Self-contained HTML of the head view (0-based `layer`, `heads`, `selected` query position).

    `attn` holds one layer's maps [heads, n, n], those of `layer`; or, with `layers` (0-based), the maps
    [len(layers), heads, n, n] of each of them, and the view has a layer picker that opens on `layer`.
    `quantity` names what the maps hold in the hint and tooltips (attention weight, or a row-normalised norm)."""
    shown = [layer] if layers is None else [int(l) for l in layers]
    if layer not in shown:
        raise ValueError(f"layer {layer} is not one of the layers drawn, {shown}")
    data = head_view_data(attn, heads, segments, pair_filter)
    sides = [labels[i] for i in data.left], [labels[j] for j in data.right]
    sel_row = data.left.index(selected) if selected is not None and selected in data.left else -1
    sel_rows = data.maps[..., sel_row, :].reshape(len(shown) * len(data.heads), len(data.right))
    payload = {
        "title": title,
        "layer": layer + 1,
        **lines_part(data.maps, shown, data.heads, sides, (data.left, data.right), min_weight),
        "minWeight": min_weight,
        "quantity": quantity,
        "selected": sel_row,
        "selRows": round_list(sel_rows, 3) if sel_row >= 0 else None,
    }
    return head_view_page(payload, title or f"Head view, layer {layer + 1}", display_mode)


def kind_part(kind: Kind, layers: Sequence[int] | None, heads: Sequence[int] | None) -> dict:
    """The page data of one kind of attention, of the 0-based `layers` and `heads` asked for (all when None)."""
    n_layers, n_heads = kind.maps.shape[:2]
    shown = chosen(layers, n_layers, f"{kind.source}: layer")
    drawn = chosen(heads, n_heads, f"{kind.source}: head")
    maps = subset(kind.maps, shown, drawn)
    sides, positions = (kind.left, kind.right), (kind.left_pos, kind.right_pos)
    return {"name": kind.name, **lines_part(maps, shown, drawn, sides, positions, MIN_WEIGHT)}


def first_layer(layer: int | None, part: dict, n_layers: int) -> int:
    """The 0-based layer the view opens on: `layer`, checked, or the first drawn."""
    drawn = [l - 1 for l in part["layers"]]
    if layer is None:
        return drawn[0]
    if check_index(layer, n_layers, "layer") not in drawn:
        raise ValueError(f"layer {layer} is not one of the layers drawn, {drawn}")
    return layer


def head_view(
    attention: RunResult | Any = None,
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    layer: int | None = None,
    heads: Sequence[int] | None = None,
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    include_layers: Sequence[int] | None = None,
    html_action: str = "view",
    *,
    display_mode: str = "dark",
    layers: Sequence[int] | None = None,
    pair_filter: str = "All",
    title: str = "",
    quantity: str = "weight",
) -> View:
    """The head view of every layer (or of `include_layers`), with a layer picker that opens on `layer`; shows itself
    in a notebook and has .save_html(path). 0-based layers and heads. bertviz's head_view's arguments, in its order.

    `attention`: a RunResult, or any model's attention as bertviz takes it (a list or tuple of per-layer
    [(1,) heads, n, n] tensors, HF's `outputs.attentions`, or one [layers, heads, n, n] array); then `tokens` names the
    n positions and `sentence_b_start` is where sentence B starts in a pair (a RunResult knows both). A pair's view
    has a select of bertviz's filters (All, Sentence A → Sentence B, ...); `pair_filter` ("A→B", ...) draws one alone.
    Or, for an encoder-decoder, any of `encoder_attention`, `decoder_attention` and `cross_attention` ([layers][1,
    heads, decoder tokens, encoder tokens]) with `encoder_tokens` and `decoder_tokens`: a select switches between them.
    `heads`: the heads drawn (all when None); `layers` is `include_layers`'s older name. `prettify_tokens` shows 'Ġ'
    and '▁' as spaces; `display_mode` "dark" (bertviz's default) or "light". `html_action` "view" or "return": both
    return the View, which shows itself as a cell's value and whose `.data` is its HTML page (bertviz returns an IPython
    HTML object for "return"). Every layer adds its lines to the page: for long inputs, draw fewer layers or heads."""
    check_html_action(html_action)
    if include_layers is not None and layers is not None:
        raise ValueError("give include_layers or its older name layers, not both.")
    wanted = include_layers if include_layers is not None else layers
    if wanted is not None and not list(wanted):
        raise ValueError("include_layers: give at least one layer (None draws them all).")
    kinds = kinds_of(
        attention,
        tokens,
        sentence_b_start,
        prettify_tokens,
        pair_filter,
        encoder_attention,
        decoder_attention,
        cross_attention,
        encoder_tokens,
        decoder_tokens,
    )
    parts = [kind_part(kind, wanted, heads) for kind in kinds]
    first = first_layer(layer, parts[0], kinds[0].maps.shape[0])
    payload = {"title": title, "layer": first + 1, "minWeight": MIN_WEIGHT, "quantity": quantity}
    payload |= {"selected": -1, "selRows": None}
    payload |= kinds_payload(parts)
    html = head_view_page(payload, title or f"Head view, layer {first + 1}", display_mode)
    n = max(max(len(k.left), len(k.right)) for k in kinds)
    rows = 14 if n > 120 else 18  # head_view.js's row height
    height = 84 + min(642, 12 + rows * n)  # the bar and the hint, then the scroll box (640 px at most)
    n_layers, n_heads = len(parts[0]["layers"]), len(parts[0]["heads"])
    return View(html, height, describe("Head view", kinds, n_layers, n_heads))
