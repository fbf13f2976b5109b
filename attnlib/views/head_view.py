"""Head view: tokens in two columns, a line from each query to each key, opacity = weight, one colour per head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .canvas_html import head_color, html_page, pack_sparse, round_list, view_script

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
    maps: np.ndarray  # [len(heads), len(left), len(right)] weights as computed by the model (not renormalised)


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
    attn_layer: np.ndarray, heads: Sequence[int], segments: Sequence[int] | None = None, pair_filter: str = "All"
) -> HeadViewData:
    """Select heads of one layer's maps [heads, n, n] and the rows/columns the pair filter keeps."""
    n = attn_layer.shape[-1]
    left, right = filter_positions(segments, n, pair_filter)
    heads = [int(h) for h in heads]
    if not heads:
        maps = np.zeros((0, len(left), len(right)), np.float32)
    elif len(left) == n and len(right) == n:
        maps = attn_layer if heads == list(range(attn_layer.shape[0])) else attn_layer[heads]
    else:
        maps = attn_layer[np.ix_(heads, left, right)]
    return HeadViewData(left, right, heads, maps)


def head_view_html(
    attn_layer: np.ndarray,
    labels: Sequence[str],
    heads: Sequence[int],
    layer: int,
    segments: Sequence[int] | None = None,
    pair_filter: str = "All",
    selected: int | None = None,
    min_weight: float = MIN_WEIGHT,
    title: str = "",
    quantity: str = "weight",
) -> str:
    """Self-contained HTML of the head view for one layer (0-based `layer`, `heads`, `selected` query position).

    `quantity` names what the maps hold in the hint and tooltips (attention weight, or a row-normalised norm)."""
    data = head_view_data(attn_layer, heads, segments, pair_filter)
    sel_row = data.left.index(selected) if selected is not None and selected in data.left else -1
    payload = {
        "title": title,
        "layer": layer + 1,
        "heads": [h + 1 for h in data.heads],
        "colors": [head_color(h) for h in data.heads],
        "left": [labels[i] for i in data.left],
        "right": [labels[j] for j in data.right],
        "leftPos": [i + 1 for i in data.left],
        "rightPos": [j + 1 for j in data.right],
        "lines": pack_sparse(data.maps, min_weight),
        "minWeight": min_weight,
        "quantity": quantity,
        "selected": sel_row,
        "selRows": round_list(data.maps[:, sel_row], 3) if sel_row >= 0 else None,
    }
    body = (
        "<div class='bar'><b id='ttl'></b><span id='legend'></span>"
        "<button id='png'>Save PNG</button></div>"
        "<div class='note' id='hint'></div><div class='scroll' id='box' style='max-height:640px'>"
        "<canvas id='cv'></canvas></div>"
    )
    return html_page(title or f"Head view, layer {layer + 1}", payload, body, view_script("head_view.js"))
