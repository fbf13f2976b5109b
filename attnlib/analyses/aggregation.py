"""The `aggregation` analysis: agreement of attention, norm and rollout maps with layer-output attribution per layer,
and their centres of mass (METHODS §11-13).

Per input: the five measures of NormMaps.measures and G_out of hidden_token_attribution, both [layers, n, n]; the
per-row Pearson/Spearman sums and the relative-position histograms are the ones of positions.py, with the measures
(and attribution) standing where the heads stand there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from attnlib.analyses.base import Analysis, Options, option, own_loop, single_result
from attnlib.analyses.positions import MODE_HELP, PROBES_HELP, SEED_HELP, CorrelationSums, RelativePositionHistogram
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION, NORMS, Capture
from attnlib.core.model import LoadedModel
from attnlib.core.runner import RunResult, run_batches
from attnlib.results.files import json_ready, malformed
from attnlib.stats.hta import DEFAULT_PROBES, DEFAULT_SEED, Attribution, Mode, hidden_token_attribution
from attnlib.stats.norms import MEASURES, batch_norm_maps, norm_maps

if TYPE_CHECKING:
    import pandas as pd

ATTRIBUTION = "attribution"


@dataclass(frozen=True)
class AggregationOptions(Options):
    """How layer-output attribution is computed."""

    mode: Mode = option("estimate", MODE_HELP, compare=True)
    probes: int = option(DEFAULT_PROBES, PROBES_HELP, minimum=1, compare=True)
    seed: int = option(DEFAULT_SEED, SEED_HELP, compare=True)


@dataclass
class AggregationResult:
    """Per layer: each measure's mean row correlation with G_out, and centres of mass of the measures and of G_out."""

    n_inputs: int
    pearson: dict[str, np.ndarray]  # MEASURES -> [layers]
    spearman: dict[str, np.ndarray]  # MEASURES -> [layers]
    center_of_mass: dict[str, np.ndarray]  # MEASURES and "attribution" -> [layers]
    options: AggregationOptions
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, int))  # [offsets], -max..max
    histograms: dict[str, np.ndarray] = field(default_factory=dict)  # MEASURES and "attribution" -> [layers, offsets]
    causal: bool = False  # a decoder's (METHODS §18): offsets k <= 0 only

    def to_json(self) -> dict:
        """The JSON of the `aggregation` command (0-based layers, NaN as None); a decoder's says so (`kind`)."""
        return json_ready(
            {
                "n_inputs": self.n_inputs,
                "measures": list(MEASURES),
                "pearson": self.pearson,
                "spearman": self.spearman,
                "center_of_mass": self.center_of_mass,
                "histograms": {"offsets": self.offsets, **self.histograms},
                "options": asdict(self.options),
            }
            | ({"kind": "decoder"} if self.causal else {})  # an encoder's JSON as before
        )

    @classmethod
    def from_json(cls, d: dict) -> AggregationResult:
        """Read back what to_json wrote (None read as NaN; results written before histograms have none);
        ResultFileError when malformed."""

        def arrays(part: dict, names: Sequence[str]) -> dict[str, np.ndarray]:
            return {name: np.array(part[name], dtype=float) for name in names}

        with malformed("`aggregation` result"):
            return cls(
                n_inputs=int(d["n_inputs"]),
                pearson=arrays(d["pearson"], MEASURES),
                spearman=arrays(d["spearman"], MEASURES),
                center_of_mass=arrays(d["center_of_mass"], (*MEASURES, ATTRIBUTION)),
                options=AggregationOptions(**d["options"]),
                offsets=np.array(d.get("histograms", {}).get("offsets", []), dtype=int),
                histograms=arrays(d["histograms"], (*MEASURES, ATTRIBUTION)) if "histograms" in d else {},
                causal=d.get("kind") == "decoder",
            )

    def layer_statistics(self) -> dict[str, np.ndarray]:
        """Per layer: each measure's Pearson and Spearman correlation with G_out (mean over rows)."""
        return {
            **{f"pearson_{m}": self.pearson[m] for m in MEASURES},
            **{f"spearman_{m}": self.spearman[m] for m in MEASURES},
        }

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Each measure's agreement with layer-output attribution per layer, and each one's centre of mass."""
        from attnlib.analyses.tables import layer_frame

        centres = {f"center_of_mass_{m}": v for m, v in self.center_of_mass.items()}
        return {
            "Agreement with layer-output attribution per layer (mean row correlation)": layer_frame(
                model, self.layer_statistics()
            ),
            "Centre of mass per layer": layer_frame(model, centres),
        }


@dataclass
class AggregationAccumulator:
    """Correlation sums per layer and measure, and relative-position sums per layer for each measure and G_out."""

    captures: ClassVar[frozenset[Capture]] = ATTENTION | NORMS  # its maps are made from each run's value vectors
    n_layers: int
    options: AggregationOptions = AggregationOptions()
    correlation: CorrelationSums = field(default=None)  # type: ignore[assignment]  # [layers, measures], set below
    histogram: RelativePositionHistogram = field(default=None)  # type: ignore[assignment]  # [layers, measures + 1]
    n_inputs: int = 0
    causal: bool = False  # a decoder's maps: the result keeps offsets k <= 0 only

    def __post_init__(self) -> None:
        self.correlation = self.correlation or CorrelationSums(self.n_layers, len(MEASURES))
        self.histogram = self.histogram or RelativePositionHistogram(self.n_layers, len(MEASURES) + 1)

    def add_maps(self, measures: np.ndarray, attribution: np.ndarray) -> None:
        """Add one input: measures [layers, MEASURES, n, n] and G_out [layers, n, n]."""
        self.correlation.add_maps(measures, np.broadcast_to(attribution[:, None], measures.shape))
        self.histogram.add_maps(np.concatenate([measures, attribution[:, None]], axis=1))
        self.n_inputs += 1

    def add(self, result: RunResult, attribution: Attribution) -> None:
        """Add one input run with capture_norms=True and its attribution."""
        if attribution.output is None:
            raise ValueError("The attribution has no layer-output contribution.")
        measures = norm_maps(result).measures(result.attentions)
        self.add_maps(np.stack([measures[m] for m in MEASURES], axis=1), attribution.output)

    def merge(self, other: AggregationAccumulator) -> AggregationAccumulator:
        """The accumulator over both corpora (same options)."""
        if (self.n_layers, self.options, self.causal) != (other.n_layers, other.options, other.causal):
            raise ValueError("Cannot merge aggregation statistics of different models or options.")
        return AggregationAccumulator(
            self.n_layers,
            self.options,
            self.correlation.merge(other.correlation),
            self.histogram.merge(other.histogram),
            self.n_inputs + other.n_inputs,
            self.causal,
        )

    def result(self) -> AggregationResult:
        """Mean correlations over rows and inputs, and centres of mass (§8) per layer."""
        pearson, spearman = self.correlation.means()
        com = self.histogram.center_of_mass()
        kept = slice(0, self.histogram.max_offset + 1) if self.causal else slice(None)  # as positions keeps them
        histograms = self.histogram.histograms()[..., kept]  # [layers, measures + 1, offsets]
        names = (*MEASURES, ATTRIBUTION)
        return AggregationResult(
            n_inputs=self.n_inputs,
            pearson={m: pearson[:, k] for k, m in enumerate(MEASURES)},
            spearman={m: spearman[:, k] for k, m in enumerate(MEASURES)},
            center_of_mass={m: com[:, k] for k, m in enumerate(names)},
            options=self.options,
            offsets=self.histogram.offsets[kept],
            histograms={m: histograms[:, k] for k, m in enumerate(names)},
            causal=self.causal,
        )


def accumulate_aggregation(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    options: AggregationOptions = AggregationOptions(),
    progress: Progress | None = None,
    batch_size: int = 32,
) -> AggregationAccumulator:
    """Run every input (attention and value vectors in batches, then its attribution) into one accumulator."""
    acc = AggregationAccumulator(lm.facts.n_layers, options, causal=lm.facts.causal)
    pairs = ((item.text_a, item.text_b) for item in inputs)
    for done, result in enumerate(run_batches(lm, pairs, batch_size=batch_size, batch_maps=batch_norm_maps), start=1):
        attribution = hidden_token_attribution(
            lm, result, mode=options.mode, probes=options.probes, seed=options.seed, with_output=True
        )
        acc.add(result, attribution)
        if progress is not None:
            progress(done, len(inputs))
    return acc


def aggregation_accumulators(lm: LoadedModel, options: AggregationOptions) -> list:
    """An empty aggregation accumulator for the model."""
    return [AggregationAccumulator(lm.facts.n_layers, options, causal=lm.facts.causal)]


AGGREGATION: Analysis[AggregationOptions, AggregationResult] = Analysis(
    name="aggregation",
    help="per-layer agreement of attention, norms and rollouts with layer-output attribution",
    options=AggregationOptions,
    reads="corpus",
    result=AggregationResult,
    methods=(11, 12, 13),
    accumulators=aggregation_accumulators,
    finish=single_result,
    fill=partial(own_loop, accumulate_aggregation),
)
