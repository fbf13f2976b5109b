"""Model view: every layer by every head as a thumbnail (lines for short inputs, heatmaps for long ones)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..runner import RunResult
from .canvas_html import HEAD_COLORS, html_page, pack_sparse, png_b64, quantize, round_list, view_script
from .display import View
from .inputs import attention_of, check_index, tokens_of

LINES_MAX_TOKENS = 48  # beyond this, thumbnail lines blur into one another, so thumbnails become heatmaps
THUMB_PX = 64  # heatmap thumbnails are max-pooled to at most this many cells a side
MIN_WEIGHT = 0.02
HEAT_LEVELS = 64  # grey levels of the heatmap images


def pooled_maps(maps: np.ndarray, cells: int = THUMB_PX) -> tuple[np.ndarray, int]:
    """Max-pool the last two axes of [..., n, n] into blocks of b x b tokens so at most `cells` remain; returns (pooled, b)."""
    n = maps.shape[-1]
    block = int(np.ceil(n / cells))
    if block == 1:
        return maps, 1
    side = int(np.ceil(n / block))
    lead = maps.shape[:-2]
    if side * block != n:  # pad with zeros (weights are >= 0, so padding never wins a maximum)
        padded = np.zeros(lead + (side * block, side * block), maps.dtype)
        padded[..., :n, :n] = maps
        maps = padded
    rows = maps.reshape(lead + (side, block, side * block)).max(axis=-2)  # pool query rows: vectorised along keys
    pooled = rows[..., 0::block].copy()
    for k in range(1, block):  # pool keys with strided maxima (much faster than reducing a short last axis)
        np.maximum(pooled, rows[..., k::block], out=pooled)
    return pooled, block


def scaled_to_max(maps: np.ndarray, levels: int = HEAT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """Each map [..., a, b] divided by its own maximum, in `levels` steps spread over 0..255; returns (bytes, maxima).

    Fewer steps than 256 make the PNG several times smaller and faster to encode; the eye cannot tell them apart."""
    peak = maps.max(axis=(-2, -1), keepdims=True)
    safe = np.where(peak > 0, peak, 1.0)
    steps = np.rint(np.asarray(maps / safe, dtype=np.float32) * (levels - 1))
    return quantize(steps / (levels - 1)), peak[..., 0, 0]


def thumbnail_atlas(attentions: np.ndarray, cells: int = THUMB_PX) -> tuple[np.ndarray, np.ndarray, int, int]:
    """All [L, H, n, n] maps pooled and scaled to their maximum, tiled into one [L*s, H*s] byte image.

    Returns (atlas, maxima [L, H], s, block)."""
    pooled, block = pooled_maps(attentions, cells)
    tiles, peaks = scaled_to_max(pooled)
    n_layers, n_heads, side, _ = tiles.shape
    atlas = tiles.transpose(0, 2, 1, 3).reshape(n_layers * side, n_heads * side)
    return atlas, peaks, side, block


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
) -> str:
    """Self-contained HTML of the model view of [layers, heads, n, n]; `selected` (0-based layer, head) starts enlarged.

    `quantity` names what the maps hold in the hint and tooltips; `windows` (ModelFacts.windows) marks local layers,
    which attend only to keys within +-w tokens. With `switches`, a click also switches a head off or on (the heads in
    `off` start crossed out) and tells the page that embeds it (ui/head_switches.py)."""
    n_layers, n_heads, n, _ = attentions.shape
    layer, head = selected
    payload: dict = {
        "title": title,
        "labels": list(labels),
        "L": n_layers,
        "H": n_heads,
        "n": n,
        "colors": [HEAD_COLORS[h % len(HEAD_COLORS)] for h in range(n_heads)],
        "sel": [layer, head],
        "mode": "lines" if n <= lines_max_tokens else "heat",
        "minWeight": min_weight,
        "quantity": quantity,
        "linesMax": lines_max_tokens,
        "windows": [windows[l] if l < len(windows) else None for l in range(n_layers)],
        "switches": switches,
        "off": [list(h) for h in off],
    }
    if payload["mode"] == "lines":
        payload["lines"] = pack_sparse(attentions.reshape(n_layers * n_heads, n, n), min_weight)
    else:
        atlas, peaks, side, block = thumbnail_atlas(attentions)
        full, peak = scaled_to_max(attentions[layer, head])
        payload.update(
            atlas=png_b64(atlas),
            tileMax=round_list(peaks.reshape(-1), 4),
            side=side,
            block=block,
            full=png_b64(full),
            fullMax=round(float(peak), 6),
        )
    body = (
        "<div class='bar'><b id='ttl'></b><button id='png'>Save PNG</button></div><div class='note' id='hint'></div>"
        "<div class='scroll' style='max-height:520px'><canvas id='grid'></canvas></div>"
        "<div class='bar'><b id='bigcap'></b></div><div class='note' id='bignote'></div>"
        "<div class='scroll' id='bigbox' style='max-height:720px'><canvas id='big'></canvas></div>"
    )
    return html_page(title or "Model view", payload, body, view_script("model_view.js"))


def model_view(
    attention: RunResult | Any,
    tokens: Sequence[str] | None = None,
    *,
    layer: int = 0,
    head: int = 0,
    title: str = "",
    quantity: str = "weight",
) -> View:
    """The model view: every layer by every head, `layer`-`head` (0-based) enlarged; shows itself in a notebook and
    has .save_html(path). `attention` and `tokens` as for head_view (a RunResult, or any model's attention)."""
    maps = attention_of(attention)
    n_layers, n_heads, n, _ = maps.shape
    labels = tokens_of(attention, tokens, n)
    selected = (check_index(layer, n_layers, "layer"), check_index(head, n_heads, "head"))
    html = model_view_html(maps, labels, selected, title=title, quantity=quantity)
    grid = 18 + n_layers * 70  # model_view.js: a 64 px thumbnail and a 6 px gap a layer, under a row of head numbers
    height = 120 + min(520, grid) + min(720, 40 + 18 * n)
    return View(html, height, f"Model view: {n_layers} layers, {n_heads} heads, {n} tokens")
