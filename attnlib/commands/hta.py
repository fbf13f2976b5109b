"""`hta`: Hidden Token Attribution per head of one sentence or pair."""

from __future__ import annotations

import argparse
import sys

from ..attribution import attribute, exact_seconds
from ..cli_options import add_attribution_options, add_model_option, add_text_options
from ..model import load_model
from ..runner import encode


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `hta` command."""
    p = sub.add_parser("hta", help="Hidden Token Attribution per head (input and previous-layer contribution)")
    add_text_options(p)
    add_attribution_options(p, "exact")
    add_model_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """tokens, input and previous [layer][head][query][input token], output [layer][query][input token], 0-based;
    each row sums to 1."""
    lm = load_model(args.model, device=args.device)
    if args.mode == "exact":
        n = len(encode(lm, args.text, args.pair).tokens)
        print(
            f"exact attribution of {n} tokens: about {exact_seconds(lm.facts, n):.0f} s on 2 CPU cores", file=sys.stderr
        )
    a = attribute(lm, args.text, args.pair, mode=args.mode, probes=args.probes, with_output=True)
    return {
        "model": lm.facts.name,
        "mode": a.mode,
        "probes": a.probes,
        "tokens": a.tokens,
        "input": a.input,
        "previous": a.previous,
        "output": a.output,
    }
