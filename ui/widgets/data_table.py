"""Tables drawn in the page as plain HTML, sortable by a click on a column's name (data_table.js), instead of
st.dataframe, whose data grid costs a new visitor about 0.5 s (benchmarks/README.md, Classroom). Download with
ui.widgets.downloads."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

COMPONENT = "attn_table"
HERE = Path(__file__).parent

_draw = st.components.v2.component(
    COMPONENT,
    js=(HERE / "data_table.js").read_text(),
    css=(HERE / "data_table.css").read_text(),
    isolate_styles=False,
)


def cell_text(value: Any, fmt: str | None = None) -> str:
    """A cell as shown: empty for a missing value, a number by `fmt` (printf style, "%.1f") or to 4 decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if fmt is not None:
        return fmt % value
    if isinstance(value, int):
        return str(value)
    return f"{value:.4f}".rstrip("0").rstrip(".")


def table_data(
    frame: pd.DataFrame, formats: Mapping[str, str] | None = None, links: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What the page is sent: column names, raw cells (to sort by; missing ones null), their text, which columns
    are numbers, and each link column's text (`links`: column -> the text its URLs are shown as)."""
    formats, links = formats or {}, links or {}
    columns = [str(c) for c in frame.columns]
    rows = frame.astype(object).where(frame.notna(), None).to_numpy().tolist()  # plain Python values, None if missing
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) for c in frame]
    text = [[cell_text(v, formats.get(c)) for v, c in zip(row, columns, strict=True)] for row in rows]
    return {
        "columns": columns,
        "rows": rows,
        "text": text,
        "numeric": numeric,
        "links": [links.get(c) for c in columns],
    }


def data_table(
    frame: pd.DataFrame, key: str, formats: Mapping[str, str] | None = None, links: Mapping[str, str] | None = None
) -> None:
    """Draw `frame` (no index) as a sortable table; `formats` give columns a printf format, `links` show a column of
    URLs as links with the given text."""
    _draw(data=table_data(frame, formats, links), key=key)
