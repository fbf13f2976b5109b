"""The figures of an `attention` result: the head view of self-attention, else one map as a heatmap."""

from __future__ import annotations

from attnlib.analyses.attention import AttentionMaps
from attnlib.views.drawing import draws
from attnlib.views.head_view import head_view
from attnlib.views.heatmap import attention_heatmap


@draws(AttentionMaps)
def attention_figures(maps: AttentionMaps, model: str) -> list:
    """The head view of self-attention; the first map kept as a heatmap otherwise (a selection, cross-attention)."""
    n_rows, n_keys = maps.attentions.shape[2:]
    if maps.selection is None and n_rows == n_keys:
        pair_start = maps.segments.index(1) if 1 in maps.segments else None
        return [head_view(maps.attentions, maps.tokens, pair_start, title=model)]
    chosen = maps.selection or {}
    first = chosen.get("rows", (0, n_rows))[0]
    layer, head = chosen.get("layers", [0])[0], chosen.get("heads", [0])[0]
    title = f"{model}: layer {layer + 1}, head {head + 1}"
    return [attention_heatmap(maps.attentions[0, 0], maps.tokens[first : first + n_rows], maps.key_tokens, title)]
