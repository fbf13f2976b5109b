"""`positions`: relative-position histograms of attention and attribution, and their correlation, over a corpus."""

from __future__ import annotations

import argparse

from ..attribution import DEFAULT_PROBES, MODES
from ..corpus import read_corpus
from ..model import load_model
from ..positions import PositionOptions, corpus_positions
from .hta import positive_int


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `positions` command."""
    p = sub.add_parser("positions", help="relative-position histograms, centres of mass and attention/HTA correlation")
    p.add_argument("--corpus", required=True, help="text file (one input per line, TAB between A and B) or .conllu")
    p.add_argument("--limit", type=positive_int, default=None, help="use at most this many inputs")
    p.add_argument("--mode", choices=MODES, default="estimate", help="attribution mode (default estimate)")
    p.add_argument("--probes", type=positive_int, default=DEFAULT_PROBES, help=f"probes per token in estimate mode (default {DEFAULT_PROBES})")
    p.add_argument("--drop-special", action="store_true", help="drop CLS/SEP as queries and keys of the histograms")
    p.add_argument("--identifiable-only", action="store_true", help="keep only inputs no longer than the head dimension")
    from ..cli import add_model_option

    add_model_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, centres of mass per layer, histograms [layer][head][offset], correlations [layer][head] (0-based)."""
    inputs = read_corpus(args.corpus, args.limit)
    lm = load_model(args.model, device=args.device)
    options = PositionOptions(mode=args.mode, probes=args.probes, drop_special=args.drop_special,
                              identifiable_only=args.identifiable_only)
    return {"model": lm.facts.name, **corpus_positions(lm, inputs, options).to_dict()}
