"""`special`: share of attention to [CLS], [SEP], punctuation and other tokens, offsets and entropy over a corpus."""

from __future__ import annotations

import argparse
from functools import partial

from ..corpus import read_corpus
from ..head_distances import HeadDistances, head_map
from ..model import LoadedModel
from ..norms import NormShareStats
from ..scale import add_scale_options, run_corpus, save_result
from ..special import SpecialTokenStats


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `special` command."""
    p = sub.add_parser("special", help="attention to [CLS], [SEP] and punctuation per layer and head over a corpus")
    p.add_argument(
        "--corpus", required=True, help="a text file (one input per line, TAB between A and B) or a .conllu file"
    )
    p.add_argument("--limit", type=int, default=None, help="use at most this many inputs")
    p.add_argument("--all-punct", action="store_true", help="count every punctuation token, not only '.' and ','")
    p.add_argument("--head-map", action="store_true", help="add the JS-divergence head map (METHODS §4)")
    p.add_argument("--norms", action="store_true", help="add value-weighted norm shares and value norms (METHODS §11)")
    p.add_argument("--batch-size", type=int, default=32, help="inputs per forward pass")
    from ..cli import add_model_option

    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def special_accumulators(lm: LoadedModel, all_punct: bool, with_map: bool, with_norms: bool = False) -> list:
    """Empty accumulators: the special-token statistics, then the head distances and the norm statistics if wanted."""
    f = lm.facts
    accumulators: list = [SpecialTokenStats(f.n_layers, f.n_heads, all_punct=all_punct)]
    if with_map:
        accumulators.append(HeadDistances(f.n_layers, f.n_heads))
    if with_norms:
        accumulators.append(NormShareStats(f.n_layers, f.n_heads, all_punct=all_punct))
    return accumulators


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, layers (one object per layer), heads ([layer][head] per key), uniform_entropy; 0-based.

    With --norms also norm_layers and norm_heads (NormShareResult.to_json)."""
    inputs = read_corpus(args.corpus, args.limit)
    make = partial(special_accumulators, all_punct=args.all_punct, with_map=args.head_map, with_norms=args.norms)
    run = run_corpus(args, make, inputs)
    stats, *rest = run.accumulators
    result = stats.result()
    out = {"model": run.facts.name, **result.to_json()}
    if args.head_map:
        out["head_map"] = head_map(rest.pop(0).result(), result).to_json()
    if args.norms:
        out |= rest.pop(0).result().to_json()
    save_result(args, args.corpus, len(inputs), run, out)
    return out
