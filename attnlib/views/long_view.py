"""Long-input view (METHODS §19): the reduced map of a layer's heads, cells of b x b tokens each the largest weight,
drawn as a heat map, and a window of query rows (dragged on the map) drawn at full resolution as the head view's lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnlib.views.canvas_html import head_color, html_page, pack_sparse, png_b64, view_script

LONG_FROM = 512  # inputs longer than this get the reduced map in the Live page's head and model views
MAP_WIDTH = 512  # cells a side of the reduced map at most (METHODS §19's width)
MAX_WINDOW = 256  # query rows of a window at most: their lines draw fast
MIN_WEIGHT = 0.01  # window lines below this are not sent (as the head view's)
MAX_KEYS = 512  # keys drawn right of a window at most: those its strongest lines reach (the caption says how many more)


@dataclass
class WindowLines:
    """A window's full-resolution rows: the query positions, the keys some line reaches, and their weights."""

    start: int  # first query row, 0-based
    end: int  # past the last query row
    keys: list[int]  # 0-based key positions that receive a line >= min_weight from some row of some head shown
    maps: np.ndarray  # [heads, end - start, len(keys)]
    reached: int  # keys that some line reaches; more than len(keys) when MAX_KEYS cut them


def window_lines(rows: np.ndarray, start: int, min_weight: float = MIN_WEIGHT, max_keys: int = MAX_KEYS) -> WindowLines:
    """The keys of a window's rows [heads, rows, n] that some line reaches (weight >= min_weight), in order, and those
    columns; of more than max_keys, the max_keys with the largest weights."""
    strongest = rows.max(axis=(0, 1))
    keys = np.flatnonzero(strongest >= min_weight)
    reached = len(keys)
    if reached > max_keys:
        keys = np.sort(keys[np.argsort(-strongest[keys], kind="stable")[:max_keys]])
    return WindowLines(start, start + rows.shape[1], keys.tolist(), np.ascontiguousarray(rows[:, :, keys]), reached)


def gray_cells(pooled: np.ndarray, top: float) -> np.ndarray:
    """A reduced map as grey levels 0..255, 255 at `top` (the largest cell of the heads shown)."""
    scale = 255.0 / top if top > 0 else 0.0
    return np.clip(np.rint(np.asarray(pooled, np.float32) * scale), 0, 255).astype(np.uint8)


def long_view_html(
    pooled: np.ndarray,
    cell: int,
    labels: Sequence[str],
    heads: Sequence[int],
    layer: int,
    rows: np.ndarray | None = None,
    window: tuple[int, int] | None = None,
    min_weight: float = MIN_WEIGHT,
    title: str = "",
    quantity: str = "attention weight",
    max_window: int = MAX_WINDOW,
) -> str:
    """Self-contained HTML of the long view of one layer (0-based `layer`, `heads`).

    `pooled`: the reduced maps [len(heads), cells, cells] of those heads (blockwise.reduce_map / reduced_maps), cells
    of `cell` x `cell` tokens; `labels`: the n tokens. With `window` (0-based, half-open START:END) and `rows`
    [len(heads), END - START, n], the window's exact rows, drawn as lines from its queries to the keys they reach."""
    pooled = np.asarray(pooled, np.float32)
    if pooled.ndim != 3 or pooled.shape[0] != len(heads):
        raise ValueError(f"pooled must be [heads, cells, cells] of the {len(heads)} heads, not {pooled.shape}")
    n = len(labels)
    top = float(pooled.max()) if pooled.size else 0.0
    payload: dict = {
        "title": title,
        "layer": layer + 1,
        "heads": [h + 1 for h in heads],
        "colors": [head_color(h) for h in heads],
        "n": n,
        "cell": cell,
        "cells": int(pooled.shape[-1]),
        "top": round(top, 6),
        "maps": [png_b64(gray_cells(p, top)) for p in pooled],
        "quantity": quantity,
        "minWeight": min_weight,
        "maxWindow": max_window,
        "window": None,
    }
    if window is not None and rows is not None:
        start, end = window
        if rows.shape != (len(heads), end - start, n):
            raise ValueError(f"rows must be [heads, {end - start}, {n}] for window {start}:{end}, not {rows.shape}")
        found = window_lines(rows, start, min_weight)
        payload |= {
            "window": [start, end],
            "left": [str(labels[i]) for i in range(start, end)],
            "leftPos": list(range(start + 1, end + 1)),
            "right": [str(labels[j]) for j in found.keys],
            "rightPos": [j + 1 for j in found.keys],
            "lines": pack_sparse(found.maps, min_weight),
            "reached": found.reached,
        }
    body = (
        "<div class='bar'><b id='ttl'></b><span id='legend'></span><button id='png'>Save PNG</button></div>"
        "<div class='note' id='hint'></div>"
        "<div style='display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start'>"
        "<div><canvas id='map'></canvas><div class='note' id='scale'></div></div>"
        "<div><div class='note' id='wcap'></div>"
        "<div class='scroll' id='box' style='max-height:640px;width:max-content'><canvas id='cv' style='position:sticky;top:0;display:block'>"
        "</canvas><div id='spacer'></div></div></div></div>"
    )
    return html_page(title or f"Long view, layer {layer + 1}", payload, body, view_script("long_view.js"))
