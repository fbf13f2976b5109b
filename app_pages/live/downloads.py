"""The Live page's downloads: the maps of each view as CSV and JSON (0-based indices), its figures as offline HTML."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.live.live_view import LiveView


def export_buttons(
    name: str, csv_maker: Callable[[], pd.DataFrame], json_maker: Callable[[], dict], views: list, key: str
):
    """CSV and JSON of the current maps (made on click) and each figure as offline HTML (views: [(LiveView, html)])."""
    c1, c2, *figure_columns = st.columns(2 + len(views))
    csv = lambda: csv_maker().to_csv(index=False).encode()  # noqa: E731
    c1.download_button("Download attention (CSV)", csv, f"{name}.csv", "text/csv", key=f"{key}_csv", on_click="ignore")
    as_json = lambda: json.dumps(json_maker()).encode()  # noqa: E731
    c2.download_button(
        "Download attention (JSON)", as_json, f"{name}.json", "application/json", key=f"{key}_json", on_click="ignore"
    )
    for k, (column, (view, html)) in enumerate(zip(figure_columns, views)):
        column.download_button(
            "Download figure (HTML)" if k == 0 else f"Figure of {view.facts.name} (HTML)",
            html.encode(),
            f"{name}.html" if k == 0 else f"{view.stem}.html",
            "text/html",
            key=f"{key}_html" if k == 0 else f"{key}_html{k}",
            on_click="ignore",
            help="A standalone page that opens offline (no CDN).",
        )
    st.caption(
        "PNG: the **Save PNG** button inside the figure. Downloads use 0-based indices; "
        "`layer_head` is the 1-based label shown on the page."
    )


def long_table(views: list[LiveView], tables: list[pd.DataFrame], value_key: str) -> pd.DataFrame:
    """The views' tables in one, with a `model` column first when there are two models."""
    if len(views) > 1:
        tables = [t.assign(model=v.facts.name)[["model", *t.columns]] for v, t in zip(views, tables)]
    table = pd.concat(tables, ignore_index=True)
    return table.rename(columns={"weight": "norm_share"}) if value_key == "norm_share" else table


def exports(views: list[LiveView], parts: list[dict]) -> dict:
    """The JSON download: one model's export, or {"models": [...]} with each model's."""
    return parts[0] if len(views) == 1 else {"models": parts}


def head_export(v: LiveView, data, pair_filter: str) -> dict:
    """One model's head view as JSON."""
    maps = np.round(data.maps.astype(np.float64), 6).tolist()
    fields = {"level": v.level, "rule": v.rule, "pair_filter": pair_filter, "heads": data.heads}
    return v.export(**fields, query_index=data.left, key_index=data.right, **{v.value_key: maps})
