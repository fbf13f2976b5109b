"""`probe`: Clark's attention probe: all heads together predict each word's head (METHODS section 14)."""

from __future__ import annotations

import argparse
from functools import partial

from ..cli_options import add_model_option, add_scale_options, positive_int, run_corpus, save_result
from ..corpus import CorpusError, read_conllu
from ..model import LoadedModel
from ..probe import VARIANTS, ProbeCorpus, score_probe, train_probe, word_embedding_table


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `probe` command."""
    p = sub.add_parser("probe", help="train Clark's attention probe on one CoNLL-U file, score UAS on another")
    p.add_argument("--train", required=True, help="CoNLL-U file to train on (gold trees)")
    p.add_argument("--test", required=True, help="CoNLL-U file to score on (gold trees)")
    p.add_argument(
        "--variant",
        choices=VARIANTS,
        default="attention",
        help="attention: one weight per head and direction; words: weights from the two words' embeddings",
    )
    p.add_argument("--epochs", type=positive_int, default=1, help="passes over the training file (default 1)")
    p.add_argument("--limit", type=positive_int, default=None, help="use only the first N sentences of each file")
    p.add_argument("--batch-size", type=positive_int, default=32, help="sentences per forward pass (default 32)")
    p.add_argument("--seed", type=int, default=0, help="torch seed while training (default 0)")
    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def _sentences(path: str, limit: int | None) -> list:
    sentences = read_conllu(path)[:limit]
    if not sentences:
        raise CorpusError(f"{path}: no sentence in the file.")
    return sentences


def probe_accumulators(lm: LoadedModel, with_embeddings: bool) -> list:
    """An empty map store for the model (with its word embedding table for the words variant)."""
    return [ProbeCorpus(lm.facts.n_layers, lm.facts.n_heads, word_embedding_table(lm) if with_embeddings else None)]


def handle(args: argparse.Namespace) -> dict:
    """The ProbeResult's JSON: UAS, best head and offset on the same words, per relation, weights, test sentences."""
    train, test = _sentences(args.train, args.limit), _sentences(args.test, args.limit)
    make = partial(probe_accumulators, with_embeddings=args.variant == "words")
    train_run = run_corpus(args, make, train)
    test_run = run_corpus(args, make, test)
    train_maps, test_maps = train_run.accumulators[0], test_run.accumulators[0]
    probe = train_probe(train_maps, args.variant, args.epochs, args.seed)
    out = score_probe(probe, train_maps, test_maps, args.variant, args.epochs).to_json()
    test_run.seconds += train_run.seconds
    save_result(args, args.test, len(test), test_run, out)
    return out
