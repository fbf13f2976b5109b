"""`special`: share of attention to [CLS], [SEP], punctuation and other tokens, offsets and entropy over a corpus."""

from __future__ import annotations

import argparse

from ..corpus import read_corpus
from ..engine import accumulate
from ..head_distances import HeadDistances, head_map
from ..model import load_model
from ..special import SpecialTokenStats


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `special` command."""
    p = sub.add_parser("special", help="attention to [CLS], [SEP] and punctuation per layer and head over a corpus")
    p.add_argument("--corpus", required=True, help="a text file (one input per line, TAB between A and B) or a .conllu file")
    p.add_argument("--limit", type=int, default=None, help="use at most this many inputs")
    p.add_argument("--all-punct", action="store_true", help="count every punctuation token, not only '.' and ','")
    p.add_argument("--head-map", action="store_true", help="add the JS-divergence head map (METHODS §4)")
    p.add_argument("--batch-size", type=int, default=32, help="inputs per forward pass")
    from ..cli import add_model_option

    add_model_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """n_inputs, layers (one object per layer), heads ([layer][head] per key), uniform_entropy; 0-based."""
    inputs = read_corpus(args.corpus, args.limit)
    lm = load_model(args.model, device=args.device)
    stats = SpecialTokenStats(lm.facts.n_layers, lm.facts.n_heads, all_punct=args.all_punct)
    accumulators = [stats]
    distances = HeadDistances(lm.facts.n_layers, lm.facts.n_heads) if args.head_map else None
    if distances is not None:
        accumulators.append(distances)
    accumulate(lm, inputs, accumulators, batch_size=args.batch_size)
    result = stats.result()
    out = {"model": lm.facts.name, **result.to_json()}
    if distances is not None:
        out["head_map"] = head_map(distances.result(), result).to_json()
    return out
