"""Per-layer values of analysis results as the report and pages compare them ({"layer 1": value, ...}); the long
tables themselves are the results' own (attnlib.analyses.tables)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def layer_values(values: Sequence[float] | np.ndarray) -> dict[str, float]:
    """{"layer 1": value, ...} of one statistic per layer ([layers]), numbered from 1."""
    return {f"layer {l + 1}": float(v) for l, v in enumerate(values)}


def by_layer(per_layer: dict[str, np.ndarray], keys: Sequence[str], names: dict[str, str]) -> dict[str, dict]:
    """{name: {"layer 1": value, ...}} for the keys given ([layers] arrays), the shape largest_difference compares."""
    return {names[k]: layer_values(per_layer[k]) for k in keys}
