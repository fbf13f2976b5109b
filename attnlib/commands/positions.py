"""`positions`: relative-position histograms of attention and attribution, and their correlation, over a corpus."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial

from ..cli_options import (
    add_attribution_options,
    add_corpus_options,
    add_model_option,
    add_scale_options,
    run_corpus,
    save_result,
)
from ..corpus import CorpusInput, read_corpus
from ..engine import Progress
from ..model import LoadedModel
from ..positions import PositionAccumulator, PositionOptions, accumulate_positions


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `positions` command."""
    p = sub.add_parser("positions", help="relative-position histograms, centres of mass and attention/HTA correlation")
    add_corpus_options(p)
    add_attribution_options(p)
    p.add_argument("--drop-special", action="store_true", help="drop CLS/SEP as queries and keys of the histograms")
    p.add_argument(
        "--identifiable-only", action="store_true", help="keep only inputs no longer than the head dimension"
    )
    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def position_accumulators(lm: LoadedModel, options: PositionOptions) -> list:
    """An empty position accumulator for the model."""
    f = lm.facts
    return [PositionAccumulator(f.n_layers, f.n_heads, f.head_dim, options)]


def fill_positions(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    accumulators: list,
    batch_size: int,
    progress: Progress | None,
    options: PositionOptions,
) -> list:
    """Positions run their own corpus loop (attention in batches, then each input's attribution): run it and merge."""
    return [accumulators[0].merge(accumulate_positions(lm, inputs, options, progress, batch_size))]


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, centres of mass per layer, histograms [layer][head][offset], correlations [layer][head] (0-based)."""
    inputs = read_corpus(args.corpus, args.limit)
    options = PositionOptions(
        mode=args.mode, probes=args.probes, drop_special=args.drop_special, identifiable_only=args.identifiable_only
    )
    run = run_corpus(
        args, partial(position_accumulators, options=options), inputs, fill=partial(fill_positions, options=options)
    )
    out = {"model": run.facts.name, **run.accumulators[0].result().to_dict()}
    save_result(args, args.corpus, len(inputs), run, out)
    return out
