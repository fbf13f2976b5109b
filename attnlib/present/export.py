"""Attention as a long table (one row per head, query and key) for CSV downloads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def attention_table(
    maps: np.ndarray, layer: int, heads: Sequence[int], rows: Sequence[int], cols: Sequence[int], labels: Sequence[str]
) -> pd.DataFrame:
    """Maps [heads, rows, cols] of one layer as rows: 0-based indices, labels, and the 1-based layer-head label."""
    h, i, j = np.meshgrid(np.arange(len(heads)), np.arange(len(rows)), np.arange(len(cols)), indexing="ij")
    head_ids, row_ids, col_ids = np.asarray(heads)[h.ravel()], np.asarray(rows)[i.ravel()], np.asarray(cols)[j.ravel()]
    names = np.array(labels, dtype=object)
    return pd.DataFrame(
        {
            "layer": layer,
            "head": head_ids,
            "layer_head": [f"{layer + 1}-{x + 1}" for x in head_ids],
            "query_index": row_ids,
            "query": names[row_ids],
            "key_index": col_ids,
            "key": names[col_ids],
            "weight": np.round(maps.reshape(-1).astype(np.float64), 6),
        }
    )
