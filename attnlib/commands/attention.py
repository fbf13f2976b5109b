"""`attention`: the attention maps of one sentence or pair."""

from __future__ import annotations

import argparse

from ..cli_options import add_model_option, add_text_options
from ..model import load_model
from ..runner import run


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `attention` command."""
    p = sub.add_parser("attention", help="attention maps of one sentence or pair")
    add_text_options(p)
    add_model_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """tokens, segments, words and attentions [layer][head][query][key], 0-based."""
    lm = load_model(args.model, device=args.device)
    r = run(lm, args.text, args.pair, capture_qk=False)
    return {
        "model": lm.facts.name,
        "tokens": r.tokens,
        "segments": r.segments,
        "words": r.words,
        "word_ids": r.word_ids,
        "truncated": r.truncated,
        "n_tokens_before_truncation": r.n_tokens_full,
        "attentions": r.attentions,
    }
