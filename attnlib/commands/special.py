"""`special`: share of attention to [CLS], [SEP], punctuation and other tokens, offsets and entropy over a corpus."""

from __future__ import annotations

import argparse
from functools import partial

from ..cli_options import add_corpus_options, add_model_option, add_scale_options, run_corpus, save_result
from ..corpus import read_corpus
from ..head_distances import HeadDistances, head_map
from ..model import LoadedModel
from ..special import SpecialTokenStats


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `special` command."""
    p = sub.add_parser("special", help="attention to [CLS], [SEP] and punctuation per layer and head over a corpus")
    add_corpus_options(p)
    p.add_argument("--all-punct", action="store_true", help="count every punctuation token, not only '.' and ','")
    p.add_argument("--head-map", action="store_true", help="add the JS-divergence head map (METHODS §4)")
    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def special_accumulators(lm: LoadedModel, all_punct: bool, with_map: bool) -> list:
    """Empty accumulators: the special-token statistics, and the head distances when the map is wanted."""
    f = lm.facts
    stats = SpecialTokenStats(f.n_layers, f.n_heads, all_punct=all_punct)
    return [stats, HeadDistances(f.n_layers, f.n_heads)] if with_map else [stats]


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, layers (one object per layer), heads ([layer][head] per key), uniform_entropy; 0-based."""
    inputs = read_corpus(args.corpus, args.limit)
    run = run_corpus(args, partial(special_accumulators, all_punct=args.all_punct, with_map=args.head_map), inputs)
    stats, *distances = run.accumulators
    result = stats.result()
    out = {"model": run.facts.name, **result.to_json()}
    if distances:
        out["head_map"] = head_map(distances[0].result(), result).to_json()
    save_result(args, args.corpus, len(inputs), run, out)
    return out
