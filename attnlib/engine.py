"""The corpus engine: run a corpus in padded batches and feed every result to mergeable accumulators."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from .corpus import CorpusInput
from .model import LoadedModel
from .runner import RunResult, run_batches

A = TypeVar("A", bound="Accumulator")
MADE_IN_POST_INIT: Any = None  # default of an accumulator's arrays, which __post_init__ makes from its sizes


class Accumulator(Protocol):
    """Sums and counts over inputs; two accumulators over two halves merge into the one over the whole."""

    def add(self, result: RunResult, item: CorpusInput) -> None:
        """Add one input's run (padding already removed) to the sums."""

    def merge(self: A, other: A) -> A:
        """Return the accumulator over both inputs sets; neither operand is changed."""


Progress = Callable[[int, int], None]


def accumulate(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    accumulators: Iterable[Accumulator],
    batch_size: int = 32,
    progress: Progress | None = None,
    skip: Callable[[RunResult, CorpusInput], bool] | None = None,
) -> int:
    """Run every input once and add it to each accumulator; returns how many inputs were added.

    An accumulator with a true `needs_norms` attribute gets value vectors and layer inputs (METHODS §11-12), one
    with a true `needs_norm_maps` also every §11-13 map (result.maps), one with a true `needs_qk` the queries and keys
    (result.queries, result.keys: METHODS §17)."""
    accumulators = list(accumulators)
    added = 0
    pairs = ((item.text_a, item.text_b) for item in inputs)
    capture_norms = any(getattr(acc, "needs_norms", False) for acc in accumulators)
    norm_maps = any(getattr(acc, "needs_norm_maps", False) for acc in accumulators)
    capture_qk = any(getattr(acc, "needs_qk", False) for acc in accumulators)
    results = run_batches(
        lm, pairs, batch_size=batch_size, capture_norms=capture_norms, norm_maps=norm_maps, capture_qk=capture_qk
    )
    for done, (result, item) in enumerate(zip(results, inputs), start=1):
        if skip is None or not skip(result, item):
            for acc in accumulators:
                acc.add(result, item)
            added += 1
        if progress is not None and (done % batch_size == 0 or done == len(inputs)):
            progress(done, len(inputs))
    return added
