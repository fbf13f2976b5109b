"""`special`: share of attention to [CLS], [SEP], punctuation and other tokens, offsets and entropy over a corpus."""

from __future__ import annotations

import argparse
from functools import partial

from ..cli_options import add_corpus_options, add_model_option, add_scale_options, run_corpus, save_result
from ..corpus import read_corpus
from ..special_tokens import special_accumulators, special_results

__all__ = ["handle", "register", "special_accumulators"]  # special_accumulators: for Ray jobs (see README)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `special` command."""
    p = sub.add_parser("special", help="attention to [CLS], [SEP] and punctuation per layer and head over a corpus")
    add_corpus_options(p)
    p.add_argument("--all-punct", action="store_true", help="count every punctuation token, not only '.' and ','")
    p.add_argument("--head-map", action="store_true", help="add the JS-divergence head map (METHODS §4)")
    p.add_argument("--norms", action="store_true", help="add value-weighted norm shares and value norms (METHODS §11)")
    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, layers (one object per layer), heads ([layer][head] per key), uniform_entropy; 0-based.

    With --head-map also head_map, with --norms also norm_layers and norm_heads (NormShareResult.to_json)."""
    inputs = read_corpus(args.corpus, args.limit)
    make = partial(special_accumulators, all_punct=args.all_punct, with_map=args.head_map, with_norms=args.norms)
    run = run_corpus(args, make, inputs)
    out = {"model": run.facts.name, **special_results(run.accumulators).to_json()}
    save_result(args, args.corpus, len(inputs), run, out)
    return out
