"""Long tables of analysis results, as a result's `tables(model)` makes them (and pages, the report and a notebook
show and download them): a `model` column first, layers and heads numbered from 1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def layer_frame(model: str, per_layer: dict[str, np.ndarray]) -> pd.DataFrame:
    """Long table: model, layer (1-based), then one column per statistic ([layers] arrays)."""
    n_layers = len(next(iter(per_layer.values())))
    return pd.DataFrame({"model": model, "layer": np.arange(1, n_layers + 1), **per_layer})


def head_frame(model: str, per_head: dict[str, np.ndarray]) -> pd.DataFrame:
    """Long table: model, layer, head (1-based), then one column per statistic ([layers, heads] arrays)."""
    n_layers, n_heads = np.shape(next(iter(per_head.values())))
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    columns = {key: np.asarray(value).reshape(-1) for key, value in per_head.items()}
    return pd.DataFrame({"model": model, "layer": layer + 1, "head": head + 1, **columns})


def cell_frame(
    model: str,
    per_cell: dict[str, np.ndarray],
    rows: Sequence[str],
    cols: Sequence[str],
    names: tuple[str, str] = ("query", "key"),
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    first_row: int = 0,
) -> pd.DataFrame:
    """Long table of maps [layers, heads, rows, cols] (or [layers, rows, cols]: no head column): model, layer and head
    (1-based; `layers`/`heads` the 0-based indices the maps hold, all by default), each row's and column's 0-based
    position (rows from `first_row`) and label, then one column per map."""
    shape = np.shape(next(iter(per_cell.values())))
    index = np.indices(shape).reshape(len(shape), -1)
    layer_ids = np.asarray(range(shape[0]) if layers is None else layers)[index[0]]
    head_ids = None if len(shape) == 3 else np.asarray(range(shape[1]) if heads is None else heads)[index[1]]
    row_ids, col_ids = index[-2] + first_row, index[-1]
    labels_rows, labels_cols = np.array(list(rows), dtype=object), np.array(list(cols), dtype=object)
    row_name, col_name = names
    return pd.DataFrame(
        {
            "model": model,
            "layer": layer_ids + 1,
            **({} if head_ids is None else {"head": head_ids + 1}),
            f"{row_name}_index": row_ids,
            row_name: labels_rows[row_ids],
            f"{col_name}_index": col_ids,
            col_name: labels_cols[col_ids],
            **{key: np.asarray(value).reshape(-1) for key, value in per_cell.items()},
        }
    )
