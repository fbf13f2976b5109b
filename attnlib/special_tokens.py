"""The special-token statistics of a corpus as the Special tokens page and the `special` command assemble them."""

from __future__ import annotations

from collections.abc import Sequence

from .corpus import CorpusInput
from .engine import Progress, accumulate
from .head_distances import HeadDistances, HeadMap, head_map
from .model import LoadedModel
from .special import SpecialTokenResult, SpecialTokenStats


def special_accumulators(lm: LoadedModel, all_punct: bool, with_map: bool) -> list:
    """Empty accumulators: the special-token statistics, and the head distances when the map is wanted."""
    f = lm.facts
    stats = SpecialTokenStats(f.n_layers, f.n_heads, all_punct=all_punct)
    return [stats, HeadDistances(f.n_layers, f.n_heads)] if with_map else [stats]


def special_results(accumulators: Sequence) -> tuple[SpecialTokenResult, HeadMap | None]:
    """The result of filled special_accumulators: the statistics, and the head map when distances were kept."""
    stats, *distances = accumulators
    special = stats.result()
    return special, head_map(distances[0].result(), special) if distances else None


def special_tokens(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    all_punct: bool,
    with_map: bool,
    progress: Progress | None = None,
) -> tuple[SpecialTokenResult, HeadMap | None]:
    """Run a corpus once in this process and return its special-token statistics and head map."""
    accumulators = special_accumulators(lm, all_punct, with_map)
    accumulate(lm, inputs, accumulators, progress=progress)
    return special_results(accumulators)
