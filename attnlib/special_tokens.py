"""The special-token statistics of a corpus as the Special tokens page and the `special` command assemble them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .corpus import CorpusInput
from .engine import Progress, accumulate
from .families import unsupported_reason
from .head_distances import HeadDistances, HeadMap, head_map, special_from_json
from .model import LoadedModel
from .norms import NormShareResult, NormShareStats, special_norms_from_json
from .special import SpecialTokenResult, SpecialTokenStats


@dataclass
class SpecialTokens:
    """One corpus run of the Special tokens page: shares and entropy, the head map and the norm shares if asked."""

    special: SpecialTokenResult
    head_map: HeadMap | None = None
    norms: NormShareResult | None = None

    def to_json(self) -> dict:
        """The `special` command's JSON (0-based), with head_map and norm_layers/norm_heads when computed."""
        out = self.special.to_json()
        if self.head_map is not None:
            out["head_map"] = self.head_map.to_json()
        if self.norms is not None:
            out |= self.norms.to_json()
        return out


def special_tokens_from_json(result: dict) -> SpecialTokens:
    """The SpecialTokens of a `special` JSON (head map and norms when it has them); ResultFileError when malformed."""
    special, hm = special_from_json(result)
    return SpecialTokens(special, hm, special_norms_from_json(result))


NORM_GAP_FACTOR = 2.0  # a norm share within this factor of the weight share tells the same story


@dataclass
class WeightNormGap:
    """Where a token class's share of the attention weights and its share of the norms differ most (layer 0-based)."""

    key: str
    layer: int
    weight_share: float
    norm_share: float

    @property
    def verdict(self) -> str:
        """ "smaller" when the norm share is under half the weight share, "larger" when over twice it, else "similar"."""
        if self.norm_share < self.weight_share / NORM_GAP_FACTOR:
            return "smaller"
        return "larger" if self.norm_share > self.weight_share * NORM_GAP_FACTOR else "similar"


def largest_weight_norm_gap(
    weights: dict[str, np.ndarray], norms: dict[str, np.ndarray], keys: Sequence[str] = ("cls", "sep")
) -> WeightNormGap | None:
    """The largest |weight share - norm share| over the keys and layers ({key: [layers]} each; NaN skipped)."""
    best: WeightNormGap | None = None
    for key in keys:
        for layer, (w, n) in enumerate(zip(weights[key], norms[key])):
            if not (np.isfinite(w) and np.isfinite(n)):
                continue
            if best is None or abs(w - n) > abs(best.weight_share - best.norm_share):
                best = WeightNormGap(key, layer, float(w), float(n))
    return best


def special_accumulators(lm: LoadedModel, all_punct: bool, with_map: bool, with_norms: bool = False) -> list:
    """Empty accumulators: the special-token statistics, then the head distances and the norm statistics if wanted."""
    f = lm.facts
    accumulators: list = [SpecialTokenStats(f.n_layers, f.n_heads, all_punct=all_punct)]
    if with_map:
        accumulators.append(HeadDistances(f.n_layers, f.n_heads))
    if with_norms:
        accumulators.append(NormShareStats(f.n_layers, f.n_heads, all_punct=all_punct))
    return accumulators


def special_results(accumulators: Sequence) -> SpecialTokens:
    """The result of filled special_accumulators."""
    stats, *rest = accumulators
    special = stats.result()
    distances = next((a for a in rest if isinstance(a, HeadDistances)), None)
    norms = next((a for a in rest if isinstance(a, NormShareStats)), None)
    return SpecialTokens(
        special,
        head_map(distances.result(), special) if distances is not None else None,
        norms.result() if norms is not None else None,
    )


def special_tokens(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    all_punct: bool,
    with_map: bool,
    with_norms: bool = False,
    progress: Progress | None = None,
) -> SpecialTokens:
    """Run a corpus once in this process and return its special-token statistics, head map and norm shares (norms
    only where the model's family gives them: see families.unsupported_reason; the rest is computed either way)."""
    with_norms = with_norms and unsupported_reason(lm.encoder.config, "norms") is None
    accumulators = special_accumulators(lm, all_punct, with_map, with_norms)
    accumulate(lm, inputs, accumulators, progress=progress)
    return special_results(accumulators)
