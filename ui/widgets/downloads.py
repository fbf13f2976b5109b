"""Download buttons for tables and figures (a figure's HTML embeds plotly.js, so it opens offline)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from attnlib.results.files import json_ready
from ui.widgets.plotly_figure import figure_page, plotly_figure


def download_table(df: pd.DataFrame, name: str, key: str) -> None:
    """CSV download of a table."""
    st.download_button("Download CSV", lambda: df.to_csv(index=False).encode(), f"{name}.csv", "text/csv", key=key)


def download_json(obj: dict | Callable[[], dict], name: str, key: str) -> None:
    """JSON download of a result (strict JSON: numpy converted, NaN written as null); a callable is built on click."""
    st.download_button(
        "Download JSON",
        lambda: json.dumps(json_ready(obj() if callable(obj) else obj), allow_nan=False).encode(),
        f"{name}.json",
        "application/json",
        key=key,
    )


def download_figure(fig: go.Figure, name: str, key: str) -> None:
    """HTML download of a figure, built only on click; PNG comes from the camera icon of the figure's toolbar."""
    st.download_button(
        "Download figure (HTML)",
        lambda: figure_page(fig).encode(),
        f"{name}.html",
        "text/html",
        key=key,
        help="A standalone page that opens offline. For a PNG, use the camera icon above the figure.",
    )


def chart(fig: go.Figure, name: str, key: str, on_click: Callable[[], None] | None = None) -> None:
    """A figure and, under it, its HTML download (`name`.html); `on_click`: see plotly_figure."""
    plotly_figure(fig, key=key, on_click=on_click)
    download_figure(fig, name, key=f"{key}_dl")
