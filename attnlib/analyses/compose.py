"""The `compose` analysis (METHODS §22): Q-, K- and V-composition between every earlier and later head of a model,
TransformerLens's definition on its processed weights, from the heads' thin factors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlib.analyses.base import Analysis, Options
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import Scale
from attnlib.core.model import LoadedModel
from attnlib.core.ov_circuit import head_weights
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.composition import KINDS, composition_scores

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class ComposeOptions(Options):
    """Composition reads the weights alone: nothing to choose."""


@dataclass
class CompositionResult:
    """q, k, v [layers, heads, layers, heads]: sender (layer, head), receiver (layer, head), 0-based; 0 where the
    receiver is not in a later layer."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray

    def to_json(self) -> dict[str, Any]:
        """The `compose` command's JSON."""
        return {kind: getattr(self, kind).tolist() for kind in KINDS}

    @classmethod
    def from_json(cls, data: dict) -> CompositionResult:
        with malformed("`compose` result"):
            q, k, v = (numeric_array(data[kind], kind, 4) for kind in KINDS)
            return cls(q, k, v)

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Every sender and later receiver (layers and heads from 1) with its three scores."""
        import pandas as pd

        L, H = self.q.shape[:2]
        rows = [
            {"model": model, "sender_layer": l1 + 1, "sender_head": h1 + 1, "receiver_layer": l2 + 1,
             "receiver_head": h2 + 1, "q": float(self.q[l1, h1, l2, h2]), "k": float(self.k[l1, h1, l2, h2]),
             "v": float(self.v[l1, h1, l2, h2])}
            for l1 in range(L) for h1 in range(H) for l2 in range(l1 + 1, L) for h2 in range(H)
        ]  # fmt: skip
        return {"Composition scores": pd.DataFrame(rows)}


def compute_composition(lm: LoadedModel, inputs: list[CorpusInput] | None, options: ComposeOptions,
                        scale: Scale) -> CompositionResult:  # fmt: skip
    """Every pair's scores; UnsupportedModelError where the processed weights are not defined."""
    found = composition_scores(head_weights(lm))
    return CompositionResult(found.q, found.k, found.v)


COMPOSE: Analysis[ComposeOptions, CompositionResult] = Analysis(
    name="compose",
    help="Q-, K- and V-composition scores between every earlier and later head (TransformerLens's definition)",
    options=ComposeOptions,
    reads="options",
    result=CompositionResult,
    methods=(22,),
    compute_model=compute_composition,
)
