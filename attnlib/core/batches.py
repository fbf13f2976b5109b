"""The corpus engine: run a corpus in padded batches and feed every result to mergeable accumulators."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from attnlib.core.blockwise import BLOCKWISE_FROM, run_rows, supports_blockwise
from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import Capturing, captures_of
from attnlib.core.memory import estimate_peak_bytes, memory_limit, run_size
from attnlib.core.model import LoadedModel
from attnlib.core.runner import BatchMaps, Encoded, RunResult, run_batches

A = TypeVar("A", bound="Accumulator")
MADE_IN_POST_INIT: Any = None  # default of an accumulator's arrays, which __post_init__ makes from its sizes


class Accumulator(Capturing, Protocol):
    """Sums and counts over inputs; two accumulators over two halves merge into the one over the whole; `captures`
    names what each input's run must hold for it (attnlib.core.hooks.Capture)."""

    def add(self, result: RunResult, item: CorpusInput) -> None:
        """Add one input's run (padding already removed) to the sums."""

    def merge(self: A, other: A) -> A:
        """Return the accumulator over both inputs sets; neither operand is changed."""


Progress = Callable[[int, int], None]


def blockwise_inputs(lm: LoadedModel, accumulators: Sequence) -> Callable[[Encoded], bool] | None:
    """Which inputs run block-wise for these accumulators (None: every input runs eager): those longer than
    BLOCKWISE_FROM, or whose eager run's estimated peak exceeds the memory limit."""
    if (
        not accumulators
        or not all(hasattr(acc, "row_consumer") for acc in accumulators)
        or not supports_blockwise(lm.encoder)
    ):
        return None
    limit = memory_limit(device=lm.device)

    def defer(encoded: Encoded) -> bool:
        eager = estimate_peak_bytes(run_size(lm, encoded.n))
        return encoded.n > BLOCKWISE_FROM or (limit is not None and eager > limit)

    return defer


def accumulate(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    accumulators: Iterable[Accumulator],
    batch_size: int = 32,
    progress: Progress | None = None,
    skip: Callable[[RunResult, CorpusInput], bool] | None = None,
    batch_maps: BatchMaps | None = None,
) -> int:
    """Run every input once and add it to each accumulator; returns how many inputs were added.

    When every accumulator takes attention block by block (a `row_consumer(encoded, item)` method giving a
    blockwise.RowConsumer) and the model's family can, inputs longer than BLOCKWISE_FROM tokens, or whose eager run
    would exceed the memory limit, run block-wise (METHODS §19: the same statistics, within float32 error).

    Each run captures the union of what the accumulators capture (their `captures`: value vectors and layer inputs
    for METHODS §11-12, queries and keys for §17...); batch_maps, run_encoded's computation over each padded batch
    (stats.norms.batch_norm_maps: every §11-13 map), fills each result's maps."""
    accumulators = list(accumulators)
    added = 0
    pairs = ((item.text_a, item.text_b) for item in inputs)
    defer = blockwise_inputs(lm, accumulators)
    results = run_batches(
        lm, pairs, batch_size=batch_size, capture=captures_of(accumulators), defer=defer, batch_maps=batch_maps
    )
    for done, (result, item) in enumerate(zip(results, inputs), start=1):
        if skip is None or not skip(result, item):
            if result.deferred:
                run_rows(lm, result, [acc.row_consumer(result, item) for acc in accumulators])  # type: ignore[attr-defined]
            else:
                for acc in accumulators:
                    acc.add(result, item)
            added += 1
        if progress is not None and (done % batch_size == 0 or done == len(inputs)):
            progress(done, len(inputs))
    return added
