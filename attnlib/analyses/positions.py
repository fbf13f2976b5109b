"""The `positions` analysis: relative-position histograms and centres of mass of attention and of Hidden Token
Attribution (METHODS §8), and their correlation per head (§9), over a corpus."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from scipy.stats import rankdata

from attnlib.analyses.base import Analysis, Options, option, own_loop, single_result
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import corpus_index
from attnlib.core.families import unsupported_reason
from attnlib.core.hooks import ATTENTION, Capture
from attnlib.core.model import LoadedModel
from attnlib.core.runner import RunResult, run_batches
from attnlib.results.files import json_ready, malformed
from attnlib.stats.hta import (
    DEFAULT_PROBES,
    DEFAULT_SEED,
    Attribution,
    Mode,
    RowAttribution,
    hidden_token_attribution,
    row_attribution,
)
from attnlib.stats.row_sampling import sampled_offset_sums, sampled_rows

if TYPE_CHECKING:
    import pandas as pd

CORRELATIONS = ("pearson_previous", "spearman_previous", "pearson_input", "spearman_input")


def relative_position_sums(maps: np.ndarray, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per offset k = j - i in -(n-1)..n-1: the sum of maps[..., i, i+k] and the number of rows i that have that offset.

    `keep` ([n] bool) drops the positions that are False as queries and as keys.
    """
    n = maps.shape[-1]
    keep = np.ones(n, bool) if keep is None else np.asarray(keep, bool)
    masked = maps * keep[:, None] * keep[None, :]
    sums = np.stack([np.diagonal(masked, offset=k, axis1=-2, axis2=-1).sum(-1) for k in range(-(n - 1), n)], axis=-1)
    return sums, offset_counts(keep)


def offset_counts(keep: np.ndarray) -> np.ndarray:
    """Per offset k = j - i in -(n-1)..n-1 (index k + n - 1): the number of rows i with i and i+k both kept."""
    return np.correlate(keep.astype(np.int64), keep.astype(np.int64), mode="full")


def center_of_mass(histograms: np.ndarray, offsets: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """sum_k k * H[k] / sum_k H[k] over the offsets seen (last axis); NaN where the histogram is all zero."""
    h = np.where(seen, histograms, 0.0)
    total = h.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (h * offsets).sum(-1) / total, np.nan)


@dataclass
class RelativePositionHistogram:
    """Sums and counts per head and offset over a corpus; the histogram divides each offset by how often it occurs."""

    n_layers: int
    n_heads: int
    max_offset: int = 0
    sums: np.ndarray = field(default=None)  # type: ignore[arg-type]  # [layers, heads, 2 * max_offset + 1], float64
    counts: np.ndarray = field(default=None)  # type: ignore[arg-type]  # [2 * max_offset + 1], int64
    variance: np.ndarray = field(default=None)  # type: ignore[arg-type]  # like sums: of the sampled inputs' sums
    rows_sampled: int = 0  # query rows of the inputs whose rows were sampled (METHODS §19)
    inputs_sampled: int = 0

    def __post_init__(self) -> None:
        width = 2 * self.max_offset + 1
        if self.sums is None:
            self.sums = np.zeros((self.n_layers, self.n_heads, width))
        if self.counts is None:
            self.counts = np.zeros(width, np.int64)
        if self.variance is None:
            self.variance = np.zeros_like(self.sums)

    @property
    def offsets(self) -> np.ndarray:
        return np.arange(-self.max_offset, self.max_offset + 1)

    def _widened(self, max_offset: int) -> RelativePositionHistogram:
        """A copy whose offset axis reaches at least max_offset on both sides."""
        grow = max(max_offset, self.max_offset) - self.max_offset
        return RelativePositionHistogram(
            self.n_layers,
            self.n_heads,
            self.max_offset + grow,
            np.pad(self.sums, ((0, 0), (0, 0), (grow, grow))),
            np.pad(self.counts, (grow, grow)),
            np.pad(self.variance, ((0, 0), (0, 0), (grow, grow))),
            self.rows_sampled,
            self.inputs_sampled,
        )

    def _widen(self, n: int) -> int:
        """Widen in place to take an input of n tokens; where its offset -(n-1) sits on the offset axis."""
        if n - 1 > self.max_offset:
            wider = self._widened(n - 1)
            self.max_offset, self.sums, self.counts, self.variance = (
                wider.max_offset,
                wider.sums,
                wider.counts,
                wider.variance,
            )
        return self.max_offset - (n - 1)

    def add_maps(self, maps: np.ndarray, keep: np.ndarray | None = None) -> None:
        """Add one input's maps [layers, heads, n, n]."""
        n = maps.shape[-1]
        lo = self._widen(n)
        sums, counts = relative_position_sums(maps.astype(np.float64), keep)
        self.sums[..., lo : lo + 2 * n - 1] += sums
        self.counts[lo : lo + 2 * n - 1] += counts

    def add_sampled_rows(self, row_maps: np.ndarray, rows: np.ndarray, keep: np.ndarray | None = None) -> None:
        """Add one input of which only rows `rows` of its maps are known (row_maps [layers, heads, m, n]): its offset
        sums estimated from them and their variance (attnlib.stats.row_sampling); the counts are the exact ones."""
        n = row_maps.shape[-1]
        lo = self._widen(n)
        sums, variance = sampled_offset_sums(row_maps, rows, keep)
        self.sums[..., lo : lo + 2 * n - 1] += sums
        self.variance[..., lo : lo + 2 * n - 1] += variance
        self.counts[lo : lo + 2 * n - 1] += offset_counts(np.ones(n, bool) if keep is None else np.asarray(keep, bool))
        self.rows_sampled += len(rows)
        self.inputs_sampled += 1

    def merge(self, other: RelativePositionHistogram) -> RelativePositionHistogram:
        """The histogram over both corpora."""
        width = max(self.max_offset, other.max_offset)
        a, b = self._widened(width), other._widened(width)
        return RelativePositionHistogram(
            self.n_layers,
            self.n_heads,
            width,
            a.sums + b.sums,
            a.counts + b.counts,
            a.variance + b.variance,
            a.rows_sampled + b.rows_sampled,
            a.inputs_sampled + b.inputs_sampled,
        )

    def histograms(self) -> np.ndarray:
        """[layers, heads, offsets]: sum at each offset / number of (input, row) pairs with that offset (0 if none)."""
        return np.divide(self.sums, self.counts, out=np.zeros_like(self.sums), where=self.counts > 0)

    def standard_errors(self) -> np.ndarray:
        """[layers, heads, offsets]: the standard error of each histogram value from the sampled rows (0 where every
        row was computed)."""
        return np.divide(np.sqrt(self.variance), self.counts, out=np.zeros_like(self.sums), where=self.counts > 0)

    def center_of_mass(self) -> np.ndarray:
        """Per head [layers, heads]."""
        return center_of_mass(self.histograms(), self.offsets, self.counts > 0)


def row_correlations(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pearson and Spearman between a[..., :] and b[..., :] per row, and whether the row counts (neither side constant)."""
    valid = (np.ptp(a, axis=-1) > 0) & (np.ptp(b, axis=-1) > 0)
    return _pearson(a, b), _pearson(rankdata(a, axis=-1), rankdata(b, axis=-1)), valid


def _pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation along the last axis (NaN on constant rows)."""
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))


@dataclass
class CorrelationSums:
    """Per head: sums of per-row Pearson and Spearman correlations and the number of rows that count."""

    n_layers: int
    n_heads: int
    pearson: np.ndarray = field(default=None)  # type: ignore[arg-type]  # None until __post_init__
    spearman: np.ndarray = field(default=None)  # type: ignore[arg-type]  # None until __post_init__
    rows: np.ndarray = field(default=None)  # type: ignore[arg-type]  # None until __post_init__

    def __post_init__(self) -> None:
        shape = (self.n_layers, self.n_heads)
        self.pearson = np.zeros(shape) if self.pearson is None else self.pearson
        self.spearman = np.zeros(shape) if self.spearman is None else self.spearman
        self.rows = np.zeros(shape, np.int64) if self.rows is None else self.rows

    def add_maps(self, attention: np.ndarray, attribution: np.ndarray) -> None:
        """Add every row j of one input's maps [layers, heads, n, n]."""
        p, s, valid = row_correlations(attention.astype(np.float64), attribution.astype(np.float64))
        self.pearson += np.where(valid, p, 0.0).sum(-1)
        self.spearman += np.where(valid, s, 0.0).sum(-1)
        self.rows += valid.sum(-1)

    def merge(self, other: CorrelationSums) -> CorrelationSums:
        return CorrelationSums(
            self.n_layers,
            self.n_heads,
            self.pearson + other.pearson,
            self.spearman + other.spearman,
            self.rows + other.rows,
        )

    def means(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean Pearson and Spearman per head over rows and inputs (NaN where no row counted)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.pearson / self.rows, self.spearman / self.rows


MODE_HELP = "exact or estimate (random probes; default %(default)s)"
PROBES_HELP = "probes per token in estimate mode (default %(default)s)"
SEED_HELP = "seed of the random probes and of the sampled query rows (default %(default)s)"
SAMPLE_ROWS = 128  # METHODS §19: query rows attributed per input longer than SAMPLE_FROM tokens
SAMPLE_FROM = 512
SAMPLING = ("sample_rows", "sample_from")  # in the JSON's options only when rows were sampled


@dataclass(frozen=True)
class PositionOptions(Options):
    """How a corpus is turned into position statistics (the attribution's mode, probes and seed, and the filters)."""

    mode: Mode = option("estimate", MODE_HELP, compare=True)
    probes: int = option(DEFAULT_PROBES, PROBES_HELP, minimum=1, compare=True)
    seed: int = option(DEFAULT_SEED, SEED_HELP, compare=True)
    drop_special: bool = option(False, "drop CLS/SEP as queries and keys of the histograms", compare=True)
    identifiable_only: bool = option(
        False, "keep only inputs no longer than the head dimension", compare=True
    )  # Brunner et al.: longer inputs have non-identifiable attention
    sample_rows: int = option(
        SAMPLE_ROWS,
        "query rows attributed, drawn at random, per input longer than sample-from tokens (default %(default)s)",
        minimum=2,
        compare=True,
        added_later=True,
    )
    sample_from: int = option(
        SAMPLE_FROM,
        "inputs up to this many tokens have every query row attributed (default %(default)s)",
        minimum=1,
        compare=True,
        added_later=True,
    )

    def stored(self, sampled: bool) -> dict:
        """The options as the JSON keeps them: the sampling options only when rows were sampled."""
        return {k: v for k, v in asdict(self).items() if sampled or k not in SAMPLING}


@dataclass
class PositionsResult:
    """Everything the local-versus-global page shows, for one model and corpus."""

    n_inputs: int  # inputs added
    n_skipped: int  # inputs left out because they were longer than the head dimension
    n_longer: int  # inputs added although longer than the head dimension
    head_dim: int
    offsets: np.ndarray  # [offsets]
    offset_counts: np.ndarray  # [offsets] (input, row) pairs with that offset
    attention_histograms: np.ndarray  # [layers, heads, offsets]
    attribution_histograms: np.ndarray  # [layers, heads, offsets], input contribution
    attention_head_com: np.ndarray  # [layers, heads]
    attribution_head_com: np.ndarray  # [layers, heads]
    correlation: dict[str, np.ndarray]  # CORRELATIONS -> [layers, heads]
    options: PositionOptions
    n_truncated: int = 0  # inputs longer than the model takes, cut to its maximum length
    windows: tuple[int | None, ...] = ()  # per layer: a local layer's half-width (ModelFacts.windows); () unknown
    causal: bool = False  # a decoder's (METHODS §18): offsets k <= 0 only
    attribution_note: str | None = None  # why there is no attribution (its arrays are then NaN); None: there is
    attribution_rows_sampled: int = 0  # query rows attributed in the inputs whose rows were sampled (METHODS §19)
    attribution_inputs_sampled: int = 0
    attribution_stderr: np.ndarray | None = None  # [layers, heads, offsets]: standard errors when rows were sampled

    @property
    def sampled(self) -> bool:
        """Whether some input's attribution histograms come from a sample of its query rows."""
        return self.attribution_inputs_sampled > 0

    def _sampling_json(self) -> dict:
        """The keys that say how rows were sampled, only when they were."""
        if not self.sampled:
            return {}
        return {
            "attribution_inputs_sampled": self.attribution_inputs_sampled,
            "attribution_rows_sampled": self.attribution_rows_sampled,
            "attribution_stderr": self.attribution_stderr,
        }

    def window(self, layer: int) -> int | None:
        """Layer's local-attention half-width, or None (global, or not recorded)."""
        return self.windows[layer] if layer < len(self.windows) else None

    @property
    def attention_center_of_mass(self) -> np.ndarray:
        """Per layer: mean over heads (Pascual Fig. 4, 5)."""
        return _layer_statistic(self.attention_head_com, np.mean)

    @property
    def attribution_center_of_mass(self) -> np.ndarray:
        return _layer_statistic(self.attribution_head_com, np.mean)

    def median_correlation(self, name: str) -> np.ndarray:
        """Per layer: the median over heads of one correlation."""
        return _layer_statistic(self.correlation[name], np.median)

    def to_json(self) -> dict:
        """The `positions` command's JSON (numbers as lists, NaN as None; layers and heads 0-based); a decoder's says
        so (`kind`) and, without attribution, says why (`attribution_unavailable`) and leaves its keys out."""
        if self.causal or self.attribution_note is not None:
            return json_ready(self._decoder_json())
        return json_ready(
            {
                "n_inputs": self.n_inputs,
                "n_skipped_longer_than_head_dim": self.n_skipped,
                "n_longer_than_head_dim": self.n_longer,
                "head_dim": self.head_dim,
                "n_truncated": self.n_truncated,
                "options": self.options.stored(self.sampled),
                "attention_center_of_mass": self.attention_center_of_mass,
                "attribution_center_of_mass": self.attribution_center_of_mass,
                "attention_head_center_of_mass": self.attention_head_com,
                "attribution_head_center_of_mass": self.attribution_head_com,
                "histograms": {
                    "offsets": self.offsets,
                    "counts": self.offset_counts,
                    "attention": self.attention_histograms,
                    "attribution": self.attribution_histograms,
                },
                "correlation": dict(self.correlation),
                "median_correlation": {name: self.median_correlation(name) for name in CORRELATIONS},
            }
            | ({"windows": list(self.windows)} if any(w is not None for w in self.windows) else {})
            | self._sampling_json()
        )

    def _decoder_json(self) -> dict:
        """to_json's object for a decoder (or any model without attribution)."""
        attribution = self.attribution_note is None
        histograms = {"offsets": self.offsets, "counts": self.offset_counts, "attention": self.attention_histograms}
        return (
            {
                "kind": "decoder" if self.causal else "encoder",
                "n_inputs": self.n_inputs,
                "n_skipped_longer_than_head_dim": self.n_skipped,
                "n_longer_than_head_dim": self.n_longer,
                "head_dim": self.head_dim,
                "n_truncated": self.n_truncated,
                "options": self.options.stored(self.sampled),
                "attention_center_of_mass": self.attention_center_of_mass,
                "attention_head_center_of_mass": self.attention_head_com,
            }
            | (
                {
                    "attribution_center_of_mass": self.attribution_center_of_mass,
                    "attribution_head_center_of_mass": self.attribution_head_com,
                    "histograms": histograms | {"attribution": self.attribution_histograms},
                    "correlation": dict(self.correlation),
                    "median_correlation": {name: self.median_correlation(name) for name in CORRELATIONS},
                }
                if attribution
                else {"histograms": histograms, "attribution_unavailable": self.attribution_note}
            )
            | ({"windows": list(self.windows)} if any(w is not None for w in self.windows) else {})
            | self._sampling_json()
        )

    @classmethod
    def from_json(cls, d: dict) -> PositionsResult:
        """Read back what to_json wrote; ResultFileError when malformed."""

        def arr(x) -> np.ndarray:
            return np.array(x, dtype=float)  # None (JSON's NaN) becomes NaN

        with malformed("`positions` result"):
            h = d["histograms"]
            note = d.get("attribution_unavailable")
            if note is not None:  # no attribution: NaN in its place, of the attention's shapes
                blank = np.full_like(arr(h["attention"]), np.nan)
                h = h | {"attribution": blank}
                d = d | {
                    "attribution_head_center_of_mass": blank[..., 0],
                    "correlation": {name: blank[..., 0] for name in CORRELATIONS},
                }
            return cls(
                n_inputs=d["n_inputs"],
                n_skipped=d["n_skipped_longer_than_head_dim"],
                n_longer=d["n_longer_than_head_dim"],
                head_dim=d["head_dim"],
                offsets=np.array(h["offsets"], int),
                offset_counts=np.array(h["counts"], np.int64),
                attention_histograms=arr(h["attention"]),
                attribution_histograms=arr(h["attribution"]),
                attention_head_com=arr(d["attention_head_center_of_mass"]),
                attribution_head_com=arr(d["attribution_head_center_of_mass"]),
                correlation={name: arr(d["correlation"][name]) for name in CORRELATIONS},
                options=PositionOptions(**d["options"]),
                n_truncated=d.get("n_truncated", 0),
                windows=tuple(d.get("windows", ())),
                causal=d.get("kind") == "decoder",
                attribution_note=note,
                attribution_rows_sampled=d.get("attribution_rows_sampled", 0),
                attribution_inputs_sampled=d.get("attribution_inputs_sampled", 0),
                attribution_stderr=arr(d["attribution_stderr"]) if "attribution_stderr" in d else None,
            )

    def layer_statistics(self) -> dict[str, np.ndarray]:
        """Per layer: both centres of mass (mean over heads) and each correlation's median over the heads."""
        return {
            "attention_center_of_mass": self.attention_center_of_mass,
            "attribution_center_of_mass": self.attribution_center_of_mass,
            **{f"median_{name}": self.median_correlation(name) for name in CORRELATIONS},
        }

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Centres of mass and correlations per layer (correlations: the median over heads) and per head."""
        from attnlib.analyses.tables import head_frame, layer_frame

        per_head = {
            "attention_center_of_mass": self.attention_head_com,
            "attribution_center_of_mass": self.attribution_head_com,
            **self.correlation,
        }
        return {
            "Per layer (mean over heads; correlations: median)": layer_frame(model, self.layer_statistics()),
            "Per head": head_frame(model, per_head),
        }

    def shown_frame(self) -> pd.DataFrame:
        """Per layer (1-based), as the Local vs global page shows it: centres of mass and median correlations (the
        attention's alone without attribution), rounded to 4 places."""
        import pandas as pd

        table = pd.DataFrame(
            {
                "layer": np.arange(1, len(self.attention_center_of_mass) + 1),
                "attention centre of mass": self.attention_center_of_mass,
            }
            | ({} if self.attribution_note else {"input-contribution centre of mass": self.attribution_center_of_mass})
        )
        for name in () if self.attribution_note else CORRELATIONS:
            table[f"median {name.replace('_', ' ')}"] = self.median_correlation(name)
        return table.round(4)


def _layer_statistic(per_head: np.ndarray, statistic) -> np.ndarray:
    """statistic over the heads of each layer that have a value (NaN for a layer with none)."""
    return np.array([statistic(row[np.isfinite(row)]) if np.isfinite(row).any() else np.nan for row in per_head])


@dataclass
class PositionAccumulator:
    """Sums and counts for the histograms and correlations of a corpus; two halves merge into the whole."""

    n_layers: int
    n_heads: int
    head_dim: int
    options: PositionOptions = PositionOptions()
    attention: RelativePositionHistogram = None  # type: ignore[assignment]  # set in __post_init__
    attribution: RelativePositionHistogram = None  # type: ignore[assignment]  # set in __post_init__
    previous_correlation: CorrelationSums = None  # type: ignore[assignment]  # set in __post_init__
    input_correlation: CorrelationSums = None  # type: ignore[assignment]  # set in __post_init__
    n_inputs: int = 0
    n_skipped: int = 0
    n_longer: int = 0
    n_truncated: int = 0
    captures: ClassVar[frozenset[Capture]] = ATTENTION  # what each input's run holds for it
    windows: tuple[int | None, ...] = ()  # ModelFacts.windows, carried into the result
    causal: bool = False  # a decoder's maps: the result keeps offsets k <= 0 only
    attribution_note: str | None = None  # why attribution is left out (attention histograms only); None: it is added

    def __post_init__(self) -> None:
        L, H = self.n_layers, self.n_heads
        self.attention = self.attention or RelativePositionHistogram(L, H)
        self.attribution = self.attribution or RelativePositionHistogram(L, H)
        self.previous_correlation = self.previous_correlation or CorrelationSums(L, H)
        self.input_correlation = self.input_correlation or CorrelationSums(L, H)

    def wants(self, n_tokens: int) -> bool:
        """Whether an input of this length enters (the identifiability option leaves out longer ones)."""
        return not (self.options.identifiable_only and n_tokens > self.head_dim)

    def skip(self) -> None:
        """Count an input left out for its length."""
        self.n_skipped += 1

    def add(self, result: RunResult, attribution: Attribution | RowAttribution | None) -> None:
        """Add one input: its attention maps and its attribution (None: attention only; a RowAttribution: of a sample
        of its query rows, METHODS §19, whose correlations are means over those rows)."""
        keep = ~(result.cls_mask | result.sep_mask) if self.options.drop_special else None
        self.attention.add_maps(result.attentions, keep)
        if isinstance(attribution, RowAttribution):
            attention_rows = result.attentions[:, :, attribution.rows]
            self.attribution.add_sampled_rows(attribution.input, attribution.rows, keep)
            self.previous_correlation.add_maps(attention_rows, attribution.previous)
            self.input_correlation.add_maps(attention_rows, attribution.input)
        elif attribution is not None:
            self.attribution.add_maps(attribution.input, keep)
            self.previous_correlation.add_maps(result.attentions, attribution.previous)
            self.input_correlation.add_maps(result.attentions, attribution.input)
        self.n_inputs += 1
        self.n_longer += int(result.n > self.head_dim)
        self.n_truncated += int(result.truncated)

    def merge(self, other: PositionAccumulator) -> PositionAccumulator:
        """The accumulator over both corpora (same options)."""
        if (other.options, other.causal, other.attribution_note) != (self.options, self.causal, self.attribution_note):
            raise ValueError("Cannot merge position statistics made with different options or of different kinds.")
        return PositionAccumulator(
            self.n_layers,
            self.n_heads,
            self.head_dim,
            self.options,
            self.attention.merge(other.attention),
            self.attribution.merge(other.attribution),
            self.previous_correlation.merge(other.previous_correlation),
            self.input_correlation.merge(other.input_correlation),
            self.n_inputs + other.n_inputs,
            self.n_skipped + other.n_skipped,
            self.n_longer + other.n_longer,
            self.n_truncated + other.n_truncated,
            self.windows or other.windows,
            self.causal,
            self.attribution_note,
        )

    def result(self) -> PositionsResult:
        """Histograms, centres of mass and mean correlations."""
        pearson_prev, spearman_prev = self.previous_correlation.means()
        pearson_in, spearman_in = self.input_correlation.means()
        correlation = dict(zip(CORRELATIONS, (pearson_prev, spearman_prev, pearson_in, spearman_in)))
        offsets = self.attention.offsets
        # a causal row i has keys 0..i: offset k <= 0 occurs in the n + k rows with i + k >= 0, as counted for any map
        kept = slice(0, self.attention.max_offset + 1) if self.causal else slice(None)  # a view keeps sums' order
        counts = self.attention.counts[kept]
        attention = self.attention.histograms()[..., kept]
        stderr = None
        if self.attribution_note is None:
            attribution = self.attribution.histograms()[..., kept]
            stderr = self.attribution.standard_errors()[..., kept] if self.attribution.inputs_sampled else None
            attribution_com = center_of_mass(attribution, offsets[kept], self.attribution.counts[kept] > 0)
        else:
            attribution = np.full_like(attention, np.nan)
            attribution_com = np.full(attention.shape[:2], np.nan)
            correlation = {name: np.full(attention.shape[:2], np.nan) for name in CORRELATIONS}
        return PositionsResult(
            n_inputs=self.n_inputs,
            n_skipped=self.n_skipped,
            n_longer=self.n_longer,
            head_dim=self.head_dim,
            offsets=offsets[kept],
            offset_counts=counts,
            attention_histograms=attention,
            attribution_histograms=attribution,
            attention_head_com=center_of_mass(attention, offsets[kept], counts > 0),
            attribution_head_com=attribution_com,
            correlation=correlation,
            options=self.options,
            n_truncated=self.n_truncated,
            windows=self.windows,
            causal=self.causal,
            attribution_note=self.attribution_note,
            attribution_rows_sampled=self.attribution.rows_sampled,
            attribution_inputs_sampled=self.attribution.inputs_sampled,
            attribution_stderr=stderr,
        )


def accumulate_positions(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    options: PositionOptions = PositionOptions(),
    progress: Progress | None = None,
    batch_size: int = 32,
) -> PositionAccumulator:
    """Run every input (attention in batches, then its Hidden Token Attribution) into one accumulator."""
    return accumulate_variants(lm, inputs, [options], progress, batch_size)[0]


def accumulate_variants(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    variants: Sequence[PositionOptions],
    progress: Progress | None = None,
    batch_size: int = 32,
) -> list[PositionAccumulator]:
    """One accumulator per variant of the options, attributing each input once (the variants share mode, k, seed)."""
    first = variants[0]
    shared = ("mode", "probes", "seed", "sample_rows", "sample_from")
    if any(any(getattr(v, name) != getattr(first, name) for name in shared) for v in variants):
        raise ValueError("Variants computed together must share the attribution mode, probes, seed and row sampling.")
    accs = [_empty_accumulator(lm, v) for v in variants]
    attributed = accs[0].attribution_note is None
    pairs = ((item.text_a, item.text_b) for item in inputs)
    for done, result in enumerate(run_batches(lm, pairs, batch_size=batch_size), start=1):
        wanted = [acc.wants(result.n) for acc in accs]
        attribution = None
        if any(wanted) and attributed:
            attribution = _attribute(lm, result, first, corpus_index(inputs[done - 1], done - 1), len(inputs))
        for acc, wants in zip(accs, wanted):
            if wants:
                acc.add(result, attribution)
            else:
                acc.skip()
        if progress is not None:
            progress(done, len(inputs))
    return accs


@dataclass(frozen=True)
class LongAttributionReport:
    """Where the attribution of a sampled (long) input says, before it runs, how long it will take, and then how far
    it is: the command line's stderr, the page's bar."""

    estimate: Callable[[str], None]
    progress: Progress


_REPORTS = threading.local()


@contextlib.contextmanager
def reporting_long_attribution(report: LongAttributionReport) -> Iterator[None]:
    """Within this block, in this thread, long attributions tell `report`."""
    before = getattr(_REPORTS, "report", None)
    _REPORTS.report = report
    try:
        yield
    finally:
        _REPORTS.report = before


def _attribute(
    lm: LoadedModel, result: RunResult, options: PositionOptions, index: int, total: int
) -> Attribution | RowAttribution:
    """An input's attribution: every row, or above options.sample_from tokens a seeded sample of rows (METHODS §19)."""
    mode, probes, seed = options.mode, options.probes, options.seed
    rows = sampled_rows(result.n, options.sample_rows, options.sample_from, seed, index)
    if rows is None:
        return hidden_token_attribution(lm, result, mode=mode, probes=probes, seed=seed)
    report: LongAttributionReport | None = getattr(_REPORTS, "report", None)
    if report is None:
        return row_attribution(lm, result, rows, mode=mode, probes=probes, seed=seed)
    what = f"input {index + 1} of {total}: {len(rows)} of {result.n} query rows sampled, {mode} attribution"
    return row_attribution(
        lm,
        result,
        rows,
        mode=mode,
        probes=probes,
        seed=seed,
        progress=report.progress,
        estimate=lambda seconds: report.estimate(f"{what}: about {_duration(seconds)}"),
    )


def _duration(seconds: float) -> str:
    """Seconds in words: "40 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _empty_accumulator(lm: LoadedModel, options: PositionOptions) -> PositionAccumulator:
    """An empty accumulator for the model; a decoder whose attribution is refused (OPT-350m) gets attention only."""
    f = lm.facts
    note = unsupported_reason(lm.encoder.config, "hta") if f.causal else None
    return PositionAccumulator(
        f.n_layers, f.n_heads, f.head_dim, options, windows=f.windows, causal=f.causal, attribution_note=note
    )


def position_accumulators(lm: LoadedModel, options: PositionOptions) -> list:
    """An empty position accumulator for the model."""
    f = lm.facts
    if f.causal:
        return [_empty_accumulator(lm, options)]
    return [PositionAccumulator(f.n_layers, f.n_heads, f.head_dim, options)]


POSITIONS: Analysis[PositionOptions, PositionsResult] = Analysis(
    name="positions",
    help="relative-position histograms, centres of mass and attention/HTA correlation",
    options=PositionOptions,
    reads="corpus",
    result=PositionsResult,
    methods=(8, 9),
    accumulators=position_accumulators,
    finish=single_result,
    fill=partial(own_loop, accumulate_positions),
)
