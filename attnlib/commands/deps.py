"""`deps`: Clark et al. Table 1 on a CoNLL-U treebank: each relation's best head against the best fixed offset."""

from __future__ import annotations

import argparse

from ..cli_options import add_corpus_options, add_model_option, add_scale_options, run_corpus, save_result
from ..corpus import CorpusError, read_conllu
from ..deps import DependencyCounts, dependency_counts_to_json
from ..model import LoadedModel


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `deps` command."""
    p = sub.add_parser("deps", help="dependency-head accuracy of every head on a CoNLL-U file (Clark et al. Table 1)")
    add_corpus_options(p, "--conllu", "path of a CoNLL-U file (gold trees)", "sentences")
    p.add_argument(
        "--min-count",
        type=_non_negative,
        default=100,
        help="list relations with at least this many dependents (default 100); 'all' is always listed",
    )
    add_model_option(p)
    add_scale_options(p)
    p.set_defaults(handler=handle)


def dependency_accumulators(lm: LoadedModel) -> list:
    """Empty dependency counts for the model (word rows merged by their mean, as in the paper)."""
    return [DependencyCounts(lm.facts.n_layers, lm.facts.n_heads)]


def handle(args: argparse.Namespace) -> dict:
    """n_sentences (analysed), n_words, n_skipped (too long for the model) and one row per relation, 0-based heads."""
    sentences = read_conllu(args.conllu)[: args.limit]
    if not sentences:
        raise CorpusError(f"{args.conllu}: no sentence in the file.")
    run = run_corpus(args, dependency_accumulators, sentences)
    counts = run.accumulators[0]
    result = counts.table(min_count=args.min_count).as_json()
    save_result(args, args.conllu, len(sentences), run, result, state=dependency_counts_to_json(counts))
    return result
