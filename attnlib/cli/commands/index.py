"""`index`: a corpus's index for search by example (METHODS §16), written to a file that `search --index` and the
Live page reuse; it names its model, the corpus's SHA-1 and its options, and is refused where they do not match."""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict

from attnlib.cli.commands.search import add_index_flags, add_scale_options, index_options, indexed
from attnlib.cli.options import loaded
from attnlib.core.engines import check_device


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `index` command."""
    p = sub.add_parser("index", help="index a corpus for `search` (one layer or the embedding output, and a mode)")
    add_index_flags(p, index_file=False)
    add_scale_options(p, out_help="where to write the index (.npz)", out_required=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """Build and write the index; returns what it holds, its size and how long it took."""
    check_device(args.device)
    options = index_options(args)
    assert options is not None  # argparse requires --layer or --embeddings
    lm = loaded(args)
    start = time.perf_counter()
    index = indexed(lm, args, options)
    seconds = time.perf_counter() - start
    size = index.save(args.out)
    return {
        "model": lm.facts.name,
        **lm.facts.stack_keys(),
        "corpus": index.meta["corpus"],
        "options": asdict(index.options),
        "n_inputs": index.n_inputs,
        "n_positions": len(index),
        "dims": int(index.vectors.shape[1]),
        "out": args.out,
        "bytes": size,
        "seconds": round(seconds, 3),
    }
