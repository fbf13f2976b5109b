"""Model view: every layer by every head as a thumbnail (lines for short inputs, heatmaps for long ones)."""

from __future__ import annotations

from collections.abc import Sequence
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
    png_b64,
    quantize,
    round_list,
    view_script,
)
from attnlib.views.display import View, check_html_action
from attnlib.views.inputs import Kind, check_index, chosen, describe, kinds_of, subset

LINES_MAX_TOKENS = 48  # beyond this, thumbnail lines blur into one another, so thumbnails become heatmaps
THUMB_PX = 64  # heatmap thumbnails are max-pooled to at most this many cells a side
MIN_WEIGHT = 0.02
HEAT_LEVELS = 64  # grey levels of the heatmap images


def pooled_maps(maps: np.ndarray, cells: int = THUMB_PX) -> tuple[np.ndarray, int]:
    """Max-pool the last two axes of [..., rows, cols] into blocks of b x b tokens so at most `cells` remain on the
    longer side; returns (pooled, b)."""
    rows, cols = maps.shape[-2:]
    block = int(np.ceil(max(rows, cols) / cells))
    if block == 1:
        return maps, 1
    side_r, side_c = int(np.ceil(rows / block)), int(np.ceil(cols / block))
    lead = maps.shape[:-2]
    if (side_r * block, side_c * block) != (rows, cols):  # pad with zeros (weights are >= 0: padding never wins)
        padded = np.zeros(lead + (side_r * block, side_c * block), maps.dtype)
        padded[..., :rows, :cols] = maps
        maps = padded
    pooled_rows = maps.reshape(lead + (side_r, block, side_c * block)).max(axis=-2)  # vectorised along keys
    pooled = pooled_rows[..., 0::block].copy()
    for k in range(1, block):  # pool keys with strided maxima (much faster than reducing a short last axis)
        np.maximum(pooled, pooled_rows[..., k::block], out=pooled)
    return pooled, block


def scaled_to_max(maps: np.ndarray, levels: int = HEAT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """Each map [..., a, b] divided by its own maximum, in `levels` steps spread over 0..255; returns (bytes, maxima).

    Fewer steps than 256 make the PNG several times smaller and faster to encode; the eye cannot tell them apart."""
    peak = maps.max(axis=(-2, -1), keepdims=True)
    safe = np.where(peak > 0, peak, 1.0)
    steps = np.rint(np.asarray(maps / safe, dtype=np.float32) * (levels - 1))
    return quantize(steps / (levels - 1)), peak[..., 0, 0]


def thumbnail_atlas(
    attentions: np.ndarray, cells: int = THUMB_PX
) -> tuple[np.ndarray, np.ndarray, tuple[int, int], int]:
    """All [L, H, rows, cols] maps pooled and scaled to their maximum, tiled into one [L*r, H*c] byte image.

    Returns (atlas, maxima [L, H], (r, c) the tile's size, block)."""
    pooled, block = pooled_maps(attentions, cells)
    tiles, peaks = scaled_to_max(pooled)
    n_layers, n_heads, side_r, side_c = tiles.shape
    atlas = tiles.transpose(0, 2, 1, 3).reshape(n_layers * side_r, n_heads * side_c)
    return atlas, peaks, (side_r, side_c), block


def model_part(
    maps: np.ndarray,
    labels: tuple[Sequence[str], Sequence[str]],
    selected: tuple[int, int],
    lines_max_tokens: int,
    min_weight: float,
    windows: Sequence[int | None] = (),
    layer_nums: list[int] | None = None,
    head_nums: list[int] | None = None,
) -> dict:
    """The page data of one kind of attention, maps [L, H, queries, keys] with the query (left) and key (right)
    labels: lines for short inputs, else heatmaps and the `selected` (0-based layer, head) map at full resolution.
    `layer_nums`, `head_nums`: the model's 0-based layers and heads that the maps are of, when not all of them."""
    n_layers, n_heads, rows, cols = maps.shape
    layer, head = selected
    part: dict = {
        "left": list(labels[0]),
        "right": list(labels[1]),
        "L": n_layers,
        "H": n_heads,
        "colors": [head_color(h) for h in (range(n_heads) if head_nums is None else head_nums)],
        "sel": [layer, head],
        "mode": "lines" if max(rows, cols) <= lines_max_tokens else "heat",
        "windows": [windows[l] if l < len(windows) else None for l in range(n_layers)],
    }
    if layer_nums is not None:
        part["layerNums"] = [l + 1 for l in layer_nums]
    if head_nums is not None:
        part["headNums"] = [h + 1 for h in head_nums]
    if part["mode"] == "lines":
        part["lines"] = pack_sparse(maps.reshape(n_layers * n_heads, rows, cols), min_weight)
    else:
        atlas, peaks, tile, block = thumbnail_atlas(maps)
        full, peak = scaled_to_max(maps[layer, head])
        part.update(
            atlas=png_b64(atlas),
            tileMax=round_list(peaks.reshape(-1), 4),
            tile=list(tile),
            block=block,
            full=png_b64(full),
            fullMax=round(float(peak), 6),
        )
    return part


def model_view_page(payload: dict, title: str, display_mode: str) -> str:
    """The model view's page; with payload["kinds"], a select of them."""
    theme, css = display_theme(display_mode)
    kinds = kinds_box(payload)
    body = (
        f"<div class='bar'><b id='ttl'></b>{kinds}<button id='png'>Save PNG</button></div>"
        "<div class='note' id='hint'></div>"
        "<div class='scroll' style='max-height:520px'><canvas id='grid'></canvas></div>"
        "<div class='bar'><b id='bigcap'></b></div><div class='note' id='bignote'></div>"
        "<div class='scroll' id='bigbox' style='max-height:720px'><canvas id='big'></canvas></div>"
    )
    return html_page(title or "Model view", payload | theme, body, view_script("model_view.js"), css)


def model_view_html(
    attentions: np.ndarray,
    labels: Sequence[str],
    selected: tuple[int, int] = (0, 0),
    lines_max_tokens: int = LINES_MAX_TOKENS,
    min_weight: float = MIN_WEIGHT,
    title: str = "",
    quantity: str = "weight",
    windows: Sequence[int | None] = (),
    switches: bool = False,
    off: Sequence[tuple[int, int]] = (),
    display_mode: str = "light",
) -> str:
    """Self-contained HTML of the model view of [layers, heads, n, n]; `selected` (0-based layer, head) starts enlarged.

    `quantity` names what the maps hold in the hint and tooltips; `windows` (ModelFacts.windows) marks local layers,
    which attend only to keys within +-w tokens. With `switches`, a click also switches a head off or on (the heads in
    `off` start crossed out) and tells the page that embeds it (app_pages/live/head_switches.py)."""
    payload = shared_payload(title, min_weight, quantity, lines_max_tokens)
    payload |= {"switches": switches, "off": [list(h) for h in off]}
    payload |= model_part(attentions, (labels, labels), selected, lines_max_tokens, min_weight, windows)
    return model_view_page(payload, title, display_mode)


def shared_payload(title: str, min_weight: float, quantity: str, lines_max_tokens: int) -> dict:
    """The page data that every kind of attention of a model view shares."""
    return {"title": title, "minWeight": min_weight, "quantity": quantity, "linesMax": lines_max_tokens}


def selection(value: int | None, drawn: list[int], size: int, name: str) -> int:
    """Where the model's 0-based layer or head `value` is among those drawn (the first when None)."""
    if value is None:
        return 0
    if check_index(value, size, name) not in drawn:
        raise ValueError(f"{name} {value} is not one of those drawn, {drawn}")
    return drawn.index(value)


def kind_part(
    kind: Kind,
    layers: Sequence[int] | None,
    heads: Sequence[int] | None,
    selected: tuple[int | None, int | None],
) -> dict:
    """The page data of one kind of attention, of the 0-based `layers` and `heads` asked for (all when None), with
    the model's layer and head `selected` enlarged."""
    n_layers, n_heads = kind.maps.shape[:2]
    shown = chosen(layers, n_layers, f"{kind.source}: layer")
    drawn = chosen(heads, n_heads, f"{kind.source}: head")
    sel = (
        selection(selected[0], shown, n_layers, f"{kind.source}: layer"),
        selection(selected[1], drawn, n_heads, f"{kind.source}: head"),
    )
    maps, sides = subset(kind.maps, shown, drawn), (kind.left, kind.right)
    layer_nums = None if shown == list(range(n_layers)) else shown
    head_nums = None if drawn == list(range(n_heads)) else drawn
    part = model_part(maps, sides, sel, LINES_MAX_TOKENS, MIN_WEIGHT, layer_nums=layer_nums, head_nums=head_nums)
    return {"name": kind.name, **part}


def model_view(
    attention: RunResult | Any = None,
    tokens: Sequence[str] | None = None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    display_mode: str = "dark",
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
    include_layers: Sequence[int] | None = None,
    include_heads: Sequence[int] | None = None,
    html_action: str = "view",
    *,
    layer: int | None = None,
    head: int | None = None,
    title: str = "",
    quantity: str = "weight",
) -> View:
    """The model view: every layer by every head (or those of `include_layers` and `include_heads`, 0-based), the
    model's `layer`-`head` (0-based; the first drawn when None) enlarged; shows itself in a notebook and has
    .save_html(path). bertviz's model_view's arguments, in its order, and what they mean as for head_view: a RunResult
    or any model's attention and its tokens (a pair's view has a select of bertviz's filters), or an encoder-decoder's
    attention (a select switches between encoder, decoder and cross attention); `display_mode` "dark" or "light";
    `html_action` "view" or "return", both giving the View (its `.data` is its HTML page)."""
    check_html_action(html_action)
    for name, values in (("include_layers", include_layers), ("include_heads", include_heads)):
        if values is not None and not list(values):
            raise ValueError(f"{name}: give at least one (None draws them all).")
    kinds = kinds_of(
        attention,
        tokens,
        sentence_b_start,
        prettify_tokens,
        "All",
        encoder_attention,
        decoder_attention,
        cross_attention,
        encoder_tokens,
        decoder_tokens,
    )
    parts = [kind_part(kind, include_layers, include_heads, (layer, head)) for kind in kinds]
    payload = shared_payload(title, MIN_WEIGHT, quantity, LINES_MAX_TOKENS) | {"switches": False, "off": []}
    payload |= kinds_payload(parts)
    html = model_view_page(payload, title, display_mode)
    n_layers = max(p["L"] for p in parts)
    n = max(max(len(k.left), len(k.right)) for k in kinds)
    grid = 18 + n_layers * 70  # model_view.js: a 64 px thumbnail and a 6 px gap a layer, under a row of head numbers
    height = 120 + min(520, grid) + min(720, 40 + 18 * n)
    return View(html, height, describe("Model view", kinds, parts[0]["L"], parts[0]["H"]))
