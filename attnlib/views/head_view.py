"""Head view: tokens in two columns, a line from each query to each key, opacity = weight, one colour per head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..runner import RunResult
from .canvas_html import head_color, html_page, pack_sparse, round_list, view_script
from .display import View
from .inputs import attention_of, check_index, segments_of, tokens_of

# Pair filter: name -> (segment of the query tokens, segment of the key tokens); None keeps every token.
PAIR_FILTERS: dict[str, tuple[int | None, int | None]] = {
    "All": (None, None),
    "A→A": (0, 0),
    "B→B": (1, 1),
    "A→B": (0, 1),
    "B→A": (1, 0),
}
MIN_WEIGHT = 0.01  # lines below this are invisible at any opacity scale and are not sent


@dataclass
class HeadViewData:
    """What the head view draws: the kept query rows and key columns, the heads, and the packed lines."""

    left: list[int]  # query positions kept by the pair filter
    right: list[int]  # key positions kept
    heads: list[int]  # 0-based heads drawn
    maps: np.ndarray  # [(layers,) len(heads), len(left), len(right)] weights as computed (not renormalised)


def filter_positions(segments: Sequence[int] | None, n: int, pair_filter: str) -> tuple[list[int], list[int]]:
    """Query and key positions that a pair filter keeps (all positions for a single sentence or 'All')."""
    if pair_filter not in PAIR_FILTERS:
        raise ValueError(f"pair filter must be one of {list(PAIR_FILTERS)}, not {pair_filter!r}")
    src, dst = PAIR_FILTERS[pair_filter]
    if segments is None or src is None:
        return list(range(n)), list(range(n))
    seg = np.asarray(segments)
    return np.flatnonzero(seg == src).tolist(), np.flatnonzero(seg == dst).tolist()


def head_view_data(
    attn: np.ndarray, heads: Sequence[int], segments: Sequence[int] | None = None, pair_filter: str = "All"
) -> HeadViewData:
    """Select heads of one layer's maps [heads, n, n] (or of several layers', [layers, heads, n, n]) and the
    rows/columns the pair filter keeps."""
    n = attn.shape[-1]
    left, right = filter_positions(segments, n, pair_filter)
    heads = [int(h) for h in heads]
    if not heads:
        maps = np.zeros(attn.shape[:-3] + (0, len(left), len(right)), np.float32)
    elif heads == list(range(attn.shape[-3])):
        maps = attn
    else:
        maps = attn[..., heads, :, :]
    if len(left) < n or len(right) < n:
        maps = maps[..., left, :][..., right]
    return HeadViewData(left, right, heads, maps)


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
) -> str:
    """Self-contained HTML of the head view (0-based `layer`, `heads`, `selected` query position).

    `attn` holds one layer's maps [heads, n, n], those of `layer`; or, with `layers` (0-based), the maps
    [len(layers), heads, n, n] of each of them, and the view has a layer picker that opens on `layer`.
    `quantity` names what the maps hold in the hint and tooltips (attention weight, or a row-normalised norm)."""
    shown = [layer] if layers is None else [int(l) for l in layers]
    if layer not in shown:
        raise ValueError(f"layer {layer} is not one of the layers drawn, {shown}")
    data = head_view_data(attn, heads, segments, pair_filter)
    # one map per (layer, head), layer-major: the JavaScript draws map li * len(heads) + k
    maps = data.maps.reshape(len(shown) * len(data.heads), len(data.left), len(data.right))
    sel_row = data.left.index(selected) if selected is not None and selected in data.left else -1
    payload = {
        "title": title,
        "layer": layer + 1,
        "layers": [l + 1 for l in shown],
        "heads": [h + 1 for h in data.heads],
        "colors": [head_color(h) for h in data.heads],
        "left": [labels[i] for i in data.left],
        "right": [labels[j] for j in data.right],
        "leftPos": [i + 1 for i in data.left],
        "rightPos": [j + 1 for j in data.right],
        "lines": pack_sparse(maps, min_weight),
        "minWeight": min_weight,
        "quantity": quantity,
        "selected": sel_row,
        "selRows": round_list(maps[:, sel_row], 3) if sel_row >= 0 else None,
    }
    body = (
        "<div class='bar'><b id='ttl'></b><span id='layers'></span><span id='legend'></span>"
        "<button id='png'>Save PNG</button></div>"
        "<div class='note' id='hint'></div><div class='scroll' id='box' style='max-height:640px'>"
        "<canvas id='cv'></canvas></div>"
    )
    return html_page(title or f"Head view, layer {layer + 1}", payload, body, view_script("head_view.js"))


def head_view(
    attention: RunResult | Any,
    tokens: Sequence[str] | None = None,
    *,
    sentence_b_start: int | None = None,
    layer: int | None = None,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    pair_filter: str = "All",
    title: str = "",
    quantity: str = "weight",
) -> View:
    """The head view of every layer (or of `layers`), with a layer picker that opens on `layer`; shows itself in a
    notebook and has .save_html(path). 0-based layers and heads.

    `attention`: a RunResult, or any model's attention as bertviz takes it (a list or tuple of per-layer
    [(1,) heads, n, n] tensors, HF's `outputs.attentions`, or one [layers, heads, n, n] array); then `tokens` names the
    n positions and `sentence_b_start` is where sentence B starts in a pair (a RunResult knows both). Every layer adds
    its lines to the page: for long inputs, draw fewer `layers` or `heads`."""
    maps = attention_of(attention)
    n_layers, n_heads, n, _ = maps.shape
    labels = tokens_of(attention, tokens, n)
    shown = list(range(n_layers)) if layers is None else [check_index(l, n_layers, "layer") for l in layers]
    first = shown[0] if layer is None else check_index(layer, n_layers, "layer")
    drawn = list(range(n_heads)) if heads is None else [check_index(h, n_heads, "head") for h in heads]
    segments = segments_of(attention, sentence_b_start, n)
    if pair_filter != "All" and segments is None:
        raise ValueError("pair_filter: a single sentence has no A and B (give sentence_b_start).")
    html = head_view_html(
        maps if shown == list(range(n_layers)) else maps[shown],
        labels,
        drawn,
        first,
        segments,
        pair_filter,
        title=title,
        quantity=quantity,
        layers=shown,
    )
    rows = 14 if n > 120 else 18  # head_view.js's row height
    height = 84 + min(642, 12 + rows * n)  # the bar and the hint, then the scroll box (640 px at most)
    return View(html, height, f"Head view: {len(shown)} layers, {len(drawn)} heads, {n} tokens")
