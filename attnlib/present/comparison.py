"""Two models compared: where their statistics differ most."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Difference:
    """Where two models differ most: a statistic at one place (a layer, a relation), with both values."""

    statistic: str
    where: str
    value_a: float
    value_b: float

    @property
    def size(self) -> float:
        return abs(self.value_a - self.value_b)

    def text(self) -> str:
        """'largest difference: [CLS] share in layer 3, 0.61 vs 0.12'."""
        return f"largest difference: {self.statistic} in {self.where}, {self.value_a:.2f} vs {self.value_b:.2f}"


def largest_difference(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> Difference | None:
    """The largest |a - b| over the statistics and places both have (NaN skipped; ties: first in a's order)."""
    best: Difference | None = None
    for statistic, values in a.items():
        for where, value_a in values.items():
            value_b = b.get(statistic, {}).get(where)
            if value_b is None or not (np.isfinite(value_a) and np.isfinite(value_b)):
                continue
            candidate = Difference(statistic, where, float(value_a), float(value_b))
            if best is None or candidate.size > best.size:
                best = candidate
    return best
