"""`search` and the flags it shares with `index`: the tokens of a corpus most like one token of a typed text
(METHODS §16), over a corpus indexed on the way or an index file of `attnlib index --out`."""

from __future__ import annotations

import argparse
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from pathlib import Path

from attnlib.analyses.base import DEFAULT_BATCH_SIZE
from attnlib.cli.options import (
    CORPUS_HELP,
    add_model_option,
    add_option_flags,
    add_scale_options,
    loaded,
    positive_int,
    scale_of,
)
from attnlib.core.engines import check_device
from attnlib.core.model import LoadedModel
from attnlib.results.files import ResultFile, json_ready, write_result_file
from attnlib.results.shipped import file_sha1
from attnlib.results.version import __version__
from attnlib.search.by_example import CorpusIndex, IndexOptions, SearchError, SearchOptions, build_index, search_index

INDEX_FIELDS = {f.name: f for f in fields(IndexOptions)}


def add_index_flags(p: argparse.ArgumentParser, index_file: bool) -> None:
    """What an index is of: its corpus, the layer (or the embedding output), the heads, how vectors are stored;
    with `index_file`, an index file instead of the corpus and the layer (search)."""
    sources = p.add_mutually_exclusive_group(required=not index_file)
    sources.add_argument("--corpus", default=None, help=CORPUS_HELP)
    sources.add_argument("--conllu", default=None, help="a CoNLL-U file (gold UPOS and DEPREL for the summaries)")
    if index_file:
        p.add_argument(
            "--index",
            default=None,
            metavar="FILE",
            help="an index of `attnlib index --out` (with --corpus or --conllu too: it must be of that file)",
        )
    where = p.add_mutually_exclusive_group(required=not index_file)
    where.add_argument("--layer", type=int, default=None, help=INDEX_FIELDS["layer"].metadata["help"])
    where.add_argument("--embeddings", action="store_true", help=INDEX_FIELDS["embeddings"].metadata["help"])
    p.add_argument("--heads", default="", help=INDEX_FIELDS["heads"].metadata["help"])
    p.add_argument(
        "--dtype", choices=("float16", "float32"), default="float16", help=INDEX_FIELDS["dtype"].metadata["help"]
    )
    p.add_argument("--all-punct", action="store_true", help=INDEX_FIELDS["all_punct"].metadata["help"])
    p.add_argument("--limit", type=positive_int, default=None, help="use only the first N inputs")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"inputs per forward pass (default {DEFAULT_BATCH_SIZE})",
    )
    add_model_option(p)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `search` command."""
    p = sub.add_parser("search", help="the tokens of a corpus most like one token of a typed text (exBERT)")
    p.add_argument("--text", required=True, help="the query's sentence A")
    p.add_argument("--pair", default=None, help="the query's sentence B (optional)")
    p.add_argument(
        "--token", type=int, required=True, help="0-based position in the query's wordpieces as `attention` prints them"
    )
    add_option_flags(p, SearchOptions)
    add_index_flags(p, index_file=True)
    add_scale_options(p, out_help="also write the search as a JSON result file")
    p.set_defaults(handler=handle)


def index_options(args: argparse.Namespace) -> IndexOptions | None:
    """The index options of the flags; None when neither --layer nor --embeddings was given (an index file's own)."""
    if args.layer is None and not args.embeddings:
        return None
    layer = 0 if args.embeddings else args.layer
    return IndexOptions(layer, args.embeddings, args.heads, args.dtype, args.all_punct)


def corpus_of(args: argparse.Namespace) -> tuple[str | None, bool]:
    """The corpus flag's path and whether it is read as CoNLL-U."""
    return (args.conllu, True) if args.conllu else (args.corpus, False)


def indexed(lm: LoadedModel, args: argparse.Namespace, options: IndexOptions) -> CorpusIndex:
    """The index that the corpus flags and options describe, built in one pass of the chosen engine."""
    path, conllu = corpus_of(args)
    assert path is not None
    return build_index(
        lm, path, options, conllu=conllu, limit=args.limit, scale=scale_of(args), batch_size=args.batch_size
    )


def handle(args: argparse.Namespace) -> dict:
    """Search; returns model, query, index, heads, matches (best first) and summary."""
    check_device(args.device)
    options = index_options(args)
    path, _ = corpus_of(args)
    if args.index is None and path is None:
        raise SearchError("give --corpus, --conllu or --index.")
    if args.index is None and options is None:
        raise SearchError("give --layer L or --embeddings.")
    if args.index is not None and options is None and args.heads:
        raise SearchError("--heads needs --layer (the layer of the index's heads).")
    lm = loaded(args)
    if args.index is not None:
        index = CorpusIndex.load(args.index)
        index.check(lm, None if path is None else file_sha1(Path(path)), options)
        options = options if options is not None else index.options
    else:
        assert options is not None
        index = indexed(lm, args, options)
    options = options.for_model(lm.facts)
    heads = options.head_list(lm.facts.n_heads) if options.heads else None
    result = search_index(lm, index, args.text, args.token, pair=args.pair, k=args.k, heads=heads)
    out = {"model": lm.facts.name, **lm.facts.stack_keys(), **result.to_json()}
    if args.out:
        write_search_file(args.out, out, index, replace(options, dtype=index.options.dtype), args.k)
    return out


def write_search_file(path: str, out: dict, index: CorpusIndex, options: IndexOptions, k: int) -> None:
    """The search as a result file (command `search`, its options and its index's corpus)."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    stored = {**asdict(options), "k": k}
    record = ResultFile("search", out["model"], index.meta["corpus"], stored, __version__, created, json_ready(out))
    write_result_file(path, record)
