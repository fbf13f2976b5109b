"""`aggregation`: per layer, how attention, norm and rollout maps agree with layer-output attribution (METHODS §13)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial

from ..aggregation import AggregationAccumulator, AggregationOptions, accumulate_aggregation
from ..cli_options import (
    add_attribution_options,
    add_model_option,
    add_scale_options,
    positive_int,
    run_corpus,
    save_result,
)
from ..corpus import CorpusInput, read_corpus
from ..engine import Progress
from ..model import LoadedModel


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `aggregation` command."""
    p = sub.add_parser(
        "aggregation", help="per-layer agreement of attention, norms and rollouts with layer-output attribution"
    )
    p.add_argument("--corpus", required=True, help="text file (one input per line, TAB between A and B) or .conllu")
    p.add_argument("--limit", type=positive_int, default=None, help="use at most this many inputs")
    add_attribution_options(p)
    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def aggregation_accumulators(lm: LoadedModel, options: AggregationOptions) -> list:
    """An empty aggregation accumulator for the model."""
    return [AggregationAccumulator(lm.facts.n_layers, options)]


def fill_aggregation(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    accumulators: list,
    batch_size: int,
    progress: Progress | None,
    options: AggregationOptions,
) -> list:
    """Aggregation runs its own corpus loop (maps in batches, then each input's attribution): run it and merge."""
    return [accumulators[0].merge(accumulate_aggregation(lm, inputs, options, progress, batch_size))]


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, measures, pearson and spearman {measure: [per layer]}, center_of_mass {measure or attribution: [..]}."""
    inputs = read_corpus(args.corpus, args.limit)
    options = AggregationOptions(mode=args.mode, probes=args.probes)
    run = run_corpus(
        args,
        partial(aggregation_accumulators, options=options),
        inputs,
        fill=partial(fill_aggregation, options=options),
    )
    out = {"model": run.facts.name, **run.accumulators[0].result().to_dict()}
    save_result(args, args.corpus, len(inputs), run, out)
    return out
