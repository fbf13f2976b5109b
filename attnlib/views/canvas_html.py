"""Shared pieces of the self-contained canvas views: the HTML shell, compact data packing, colours, PNG export."""

from __future__ import annotations

import base64
import html
import io
import json
from functools import cache
from pathlib import Path

import numpy as np

# One colour per head (d3 category10, then eight more), cycled past sixteen heads.
HEAD_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#393b79",
    "#e7ba52",
    "#843c39",
    "#5254a3",
    "#637939",
    "#7b4173",
)
LEVELS = 255  # weights travel as bytes: round(weight * 255)


def head_color(head: int) -> str:
    """The colour of a head (0-based) in every view."""
    return HEAD_COLORS[head % len(HEAD_COLORS)]


def quantize(weights: np.ndarray) -> np.ndarray:
    """Attention weights in [0, 1] as bytes 0..255."""
    return np.clip(np.rint(np.asarray(weights, dtype=np.float32) * LEVELS), 0, LEVELS).astype(np.uint8)


def pack_sparse(maps: np.ndarray, min_weight: float) -> dict:
    """Pack maps [m, rows, cols] as row counts (uint16), key columns (uint16) and byte weights, keeping weights >= min_weight."""
    maps = np.asarray(maps, dtype=np.float32)
    m, rows, cols = maps.shape
    keep = (
        maps >= (max(1, int(np.ceil(min_weight * LEVELS - 1e-6))) - 0.5) / LEVELS
    )  # the weights that round to >= the cut
    counts = keep.sum(axis=-1, dtype=np.uint16).reshape(-1)
    _, _, col_idx = np.nonzero(keep)  # row-major order: map, then row, then column
    payload = counts.astype("<u2").tobytes() + col_idx.astype("<u2").tobytes() + quantize(maps[keep]).tobytes()
    return {"m": m, "rows": rows, "cols": cols, "nnz": int(col_idx.size), "b64": base64.b64encode(payload).decode()}


def png_b64(gray: np.ndarray) -> str:
    """A 2-D uint8 array as a base64 grayscale PNG (decoded by the browser, colourised in JS)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(gray, dtype=np.uint8), mode="L").save(buf, format="PNG", compress_level=1)
    return base64.b64encode(buf.getvalue()).decode()


def round_list(values: np.ndarray, decimals: int) -> list:
    """Rounded numbers for JSON (short text, exact enough to read)."""
    return np.round(np.asarray(values, dtype=np.float64), decimals).tolist()


def _json_for_script(data: dict) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")


COMMON_CSS = """
body{margin:0;font:12px system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;color:#222;background:#fff}
.bar{display:flex;flex-wrap:wrap;gap:6px 12px;align-items:center;padding:4px 2px 6px}
.bar button{font:inherit;padding:2px 8px;border:1px solid #bbb;border-radius:4px;background:#f7f7f7;cursor:pointer}
.sw{display:inline-block;min-width:18px;padding:1px 3px;margin:1px;border-radius:3px;color:#fff;text-align:center;cursor:pointer;user-select:none}
.sw.off{opacity:.25}
.note{color:#666}
.scroll{overflow:auto;border:1px solid #eee}
#tip{position:fixed;pointer-events:none;background:rgba(255,255,255,.96);border:1px solid #999;border-radius:4px;
padding:3px 6px;font-size:11px;display:none;white-space:pre;z-index:9;box-shadow:0 1px 4px rgba(0,0,0,.2)}
"""

DISPLAY_MODES = ("dark", "light")  # bertviz's display_mode; light is the look of the app's views
DARK_CSS = """
body{color:#ddd;background:#000}
.note{color:#aaa}
.scroll{border-color:#333}
.bar button,.bar select{background:#222;color:#ddd;border:1px solid #555}
#tip{background:rgba(24,24,24,.96);color:#eee;border-color:#666}
"""


def display_theme(display_mode: str) -> tuple[dict, str]:
    """The page data and the CSS of a display mode: for 'dark', {"theme": "dark"} (canvas_common.js's THEME) and
    DARK_CSS; for 'light', nothing added."""
    if display_mode not in DISPLAY_MODES:
        raise ValueError(f"display_mode must be one of {list(DISPLAY_MODES)}, not {display_mode!r}")
    return ({"theme": "dark"}, DARK_CSS) if display_mode == "dark" else ({}, "")


def kinds_payload(parts: list[dict]) -> dict:
    """The page data of a view's kinds of attention (each part with its "name"): one's fields at the top level, as the
    app's pages have them; several under "kinds", which a select switches between (canvas_common.js's KINDS)."""
    if len(parts) > 1:
        return {"kinds": parts}
    return {k: v for k, v in parts[0].items() if k != "name"}


def kinds_box(payload: dict) -> str:
    """Where the select of the kinds of attention goes in a view's bar, if the page has several."""
    return "<span id='kinds'></span>" if "kinds" in payload else ""


# The helpers every view uses (data decoding, hi-dpi canvases, tooltip, PNG export, line drawing), before its script.
COMMON_SCRIPT = "canvas_common.js"


@cache
def view_script(name: str) -> str:
    """The JavaScript of a .js file beside this module (e.g. "head_view.js"), read once."""
    text = Path(__file__).with_name(name).read_text(encoding="utf-8")
    if "</script" in text.lower():
        raise ValueError(f"{name} contains '</script', which would end the inline script early.")
    return text


def html_page(title: str, data: dict, body: str, script: str, css: str = "") -> str:
    """A complete HTML document: inline CSS, the data as JSON, the common helpers and the view's script (text of
    view_script); loads nothing."""
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{COMMON_CSS}{css}</style></head><body>"
        f"{body}<div id='tip'></div>"
        f"<script type='application/json' id='data'>{_json_for_script(data)}</script>"
        f"<script>\n{view_script(COMMON_SCRIPT)}\n{script}</script></body></html>"
    )
