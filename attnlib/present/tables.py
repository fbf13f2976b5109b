"""Long tables of analysis results, as pages and the report show and download them: a `model` column first, layers
and heads numbered from 1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnlib.analyses.deps import CLARK_TABLE1


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


def layer_values(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """{"layer 1": value, ...} of one statistic per layer ([layers]), numbered from 1."""
    return {f"layer {l + 1}": float(v) for l, v in enumerate(values)}


def by_layer(per_layer: dict[str, np.ndarray], keys: Sequence[str], names: dict[str, str]) -> dict[str, dict]:
    """{name: {"layer 1": value, ...}} for the keys given ([layers] arrays), the shape largest_difference compares."""
    return {names[k]: layer_values(per_layer[k]) for k in keys}


def clark_table1() -> pd.DataFrame:
    """Clark et al. (2019) Table 1 (BERT-base uncased, WSJ dev): each paper relation with the closest UD label (None
    where UD has none), its best head (layer-head, 1-based), accuracy and baseline accuracy in percent, and offset."""
    return pd.DataFrame(
        [
            {"paper relation": rel, "relation": ud, "paper head": head, "paper accuracy %": acc,
             "paper baseline offset": offset, "paper baseline accuracy %": base}
            for rel, ud, head, acc, base, offset in CLARK_TABLE1
        ]
    )  # fmt: skip


def paper_rows(relations: Sequence[str]) -> pd.DataFrame:
    """Clark et al. Table 1 for the UD relations given, by the closest UD label, accuracies as fractions."""
    paper = clark_table1()
    paper = paper[paper["relation"].isin(list(relations))].reset_index(drop=True)
    percent = {"paper accuracy %": "paper accuracy", "paper baseline accuracy %": "paper baseline accuracy"}
    for column in percent:
        paper[column] = paper[column] / 100
    paper = paper.rename(columns=percent)
    return paper[["relation", "paper relation", "paper head", "paper accuracy", "paper baseline offset",
                  "paper baseline accuracy"]]  # fmt: skip


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
