"""The `special` analysis: attention to [CLS], [SEP], punctuation and the rest, offsets and entropy over a corpus,
with the head map and the value-weighted norm shares when asked (METHODS §1-4, §11)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnlib.analyses.base import Analysis, Options, option
from attnlib.core.families import Statistic, unsupported_reason
from attnlib.core.model import LoadedModel
from attnlib.stats.head_distances import BROAD_ENTROPY_FRACTION as BROAD_ENTROPY_FRACTION  # what the pages show, here
from attnlib.stats.head_distances import SHARE_THRESHOLD as SHARE_THRESHOLD
from attnlib.stats.head_distances import HeadDistances, HeadMap, head_map, special_from_json
from attnlib.stats.norms import NormShareResult, NormShareStats, special_norms_from_json
from attnlib.stats.special import CLASS_KEYS as CLASS_KEYS
from attnlib.stats.special import SINK_THRESHOLD as SINK_THRESHOLD
from attnlib.stats.special import SpecialTokenResult, SpecialTokenStats
from attnlib.stats.special import heads_above as heads_above
from attnlib.stats.special import input_layer_statistics as input_layer_statistics  # the Live page's one input

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class SpecialOptions(Options):
    """What the special-token pass computes besides the shares, offsets and entropy."""

    all_punct: bool = option(False, "count every punctuation token, not only '.' and ','", compare=True)
    head_map: bool = option(False, "add the JS-divergence head map (METHODS §4)", adds=True)
    norms: bool = option(False, "add value-weighted norm shares and value norms (METHODS §11)", adds=True)


@dataclass
class SpecialTokens:
    """The special-token statistics of a corpus: shares and entropy, the head map and the norm shares if asked."""

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

    @classmethod
    def from_json(cls, data: dict) -> SpecialTokens:
        """Read back a `special` JSON (head map and norms when it has them); ResultFileError when malformed."""
        special, hm = special_from_json(data)
        return cls(special, hm, special_norms_from_json(data))

    def for_options(self, options: SpecialOptions) -> SpecialTokens:
        """The parts these options ask for (a shipped result may hold more)."""
        return SpecialTokens(
            self.special, self.head_map if options.head_map else None, self.norms if options.norms else None
        )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """The shares, entropies and offsets per layer (mean over heads) and per head (with the head map's behaviour);
        with norms, the norm shares and value norms per layer and per head."""
        from attnlib.analyses.tables import head_frame, layer_frame

        result, hm, norms = self.special, self.head_map, self.norms
        per_head = dict(result.heads)
        if hm is not None:
            per_head["behaviour"] = hm.labels.reshape(result.heads["cls"].shape)
        tables = {
            "Per layer (mean over heads)": layer_frame(model, result.layers),
            "Per head": head_frame(model, per_head),
        }
        if norms is not None:  # the report always asks for them; a notebook's run may not
            tables["Norm shares and value norms per layer (mean over heads)"] = layer_frame(model, norms.layers)
            tables["Norm shares and value norms per head"] = head_frame(model, norms.heads)
        return tables


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


def special_accumulators(lm: LoadedModel, options: SpecialOptions) -> list:
    """Empty accumulators: the special-token statistics, then the head distances and the norm statistics if asked."""
    f = lm.facts
    accumulators: list = [SpecialTokenStats(f.n_layers, f.n_heads, all_punct=options.all_punct, causal=f.causal)]
    if options.head_map:
        accumulators.append(HeadDistances(f.n_layers, f.n_heads))
    if options.norms and unsupported_reason(lm.encoder.config, "norms") is None:  # the rest holds for any family
        accumulators.append(NormShareStats(f.n_layers, f.n_heads, all_punct=options.all_punct, causal=f.causal))
    return accumulators


def special_results(accumulators: Sequence, options: SpecialOptions | None = None) -> SpecialTokens:
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


def special_needs(options: SpecialOptions) -> tuple[Statistic, ...]:
    """What these options ask of the model's family: the norms, when asked (a function, so that a run pickles)."""
    return ("norms",) if options.norms else ()


SPECIAL: Analysis[SpecialOptions, SpecialTokens] = Analysis(
    name="special",
    help="attention to [CLS], [SEP] and punctuation per layer and head over a corpus",
    options=SpecialOptions,
    reads="corpus",
    result=SpecialTokens,
    methods=(1, 2, 3, 4, 11),
    accumulators=special_accumulators,
    finish=special_results,
    needs=special_needs,
)
