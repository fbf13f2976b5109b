"""Benchmark Clark's attention probe (METHODS 14) on EWT dev (train) and test against the batched forward pass alone.

Run: python -m benchmarks.bench_probe [--limit N] [--epochs E]
Target (issue 16): the whole attention-only result (extract both corpora, train one epoch, score) within 2x the
forward pass over both corpora. Also prints each variant's training time per epoch and the UAS it reaches.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.analyses.probe import ProbeCorpus, score_probe, train_probe, word_embedding_table  # noqa: E402
from attnlib.core.batches import accumulate  # noqa: E402
from attnlib.core.corpus import read_conllu  # noqa: E402
from attnlib.core.model import DEFAULT_MODEL, load_model  # noqa: E402
from attnlib.results.shipped import EWT_DEV, EWT_TEST  # noqa: E402
from benchmarks import TimedAdds  # noqa: E402


def timed(function, *args, **kwargs):
    """(value, wall seconds)."""
    start = time.perf_counter()
    value = function(*args, **kwargs)
    return value, time.perf_counter() - start


def extract(lm, sentences, words: bool, batch_size: int) -> tuple[ProbeCorpus, float, float]:
    """extract_maps with its add() timed: (maps, wall seconds, seconds inside add)."""
    table = word_embedding_table(lm) if words else None
    store = TimedAdds(ProbeCorpus(lm.facts.n_layers, lm.facts.n_heads, table))
    _, wall = timed(accumulate, lm, sentences, [store], batch_size)
    return store.inner, wall, store.seconds


def pipeline(lm, dev, test, variant: str, epochs: int, batch_size: int) -> tuple:
    """Seconds of each stage (extract both, of which inside add(), train, score) and the result."""
    words = variant == "words"
    train_maps, t_dev, in_dev = extract(lm, dev, words, batch_size)
    test_maps, t_test, in_test = extract(lm, test, words, batch_size)
    probe, t_train = timed(train_probe, train_maps, variant, epochs)
    result, t_score = timed(score_probe, probe, train_maps, test_maps, variant, epochs)
    return (t_dev + t_test, in_dev + in_test, t_train, t_score), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="sentences of each of EWT dev and test (default: all)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    import torch

    lm = load_model(DEFAULT_MODEL)
    dev, test = read_conllu(EWT_DEV)[: args.limit], read_conllu(EWT_TEST)[: args.limit]
    print(
        f"{DEFAULT_MODEL}: train on {len(dev)} EWT dev sentences, score on {len(test)} EWT test sentences, "
        f"batch size {args.batch_size}, {torch.get_num_threads()} torch threads, {args.epochs} epoch(s)\n"
    )
    pipeline(lm, dev[:32], test[:32], "words", 1, args.batch_size)  # warm-up (imports, allocator)
    _, forward_dev = timed(accumulate, lm, dev, [], args.batch_size)
    _, forward_test = timed(accumulate, lm, test, [], args.batch_size)
    forward = forward_dev + forward_test
    runs = {
        variant: pipeline(lm, dev, test, variant, args.epochs, args.batch_size) for variant in ("attention", "words")
    }
    _, forward_dev_again = timed(accumulate, lm, dev, [], args.batch_size)  # load drift check on a shared machine

    print(f"{'stage':42s} {'seconds':>8s} {'vs forward':>11s} {'same-run':>9s}")
    print(f"{'forward pass alone, dev + test':42s} {forward:8.2f} {1:10.3f}x")
    for variant, ((t_extract, in_add, t_train, t_score), _) in runs.items():
        own_forward = t_extract - in_add  # this run's time outside the probe: the forward pass, as it ran here
        whole = t_extract + t_train + t_score
        for stage, seconds in (
            ("extract dev + test", t_extract),
            ("  of which word maps (in add)", in_add),
            (f"train {args.epochs} epoch(s)", t_train),
            ("score test", t_score),
            ("whole result", whole),
        ):
            print(
                f"{variant + ': ' + stage:42s} {seconds:8.2f} {seconds / forward:10.3f}x {seconds / own_forward:8.3f}x"
            )
    print(
        f"\nforward pass over dev measured again at the end: {forward_dev_again:.2f} s "
        f"({forward_dev_again / forward_dev:.2f}x the first; a large change means the machine's load changed).\n"
        "'same-run' divides by the run's own time outside the probe (its forward pass, tokenizing, batching), which "
        "other load on the machine skews far less than 'vs forward', measured minutes apart."
    )
    print("Target: the attention-only whole result at most 2x the forward pass over both corpora.\n")

    for variant, (_, result) in runs.items():
        best = result.best_head
        print(
            f"{variant:9s} UAS {result.uas:.4f} on {result.n_words} test words (punct excluded); "
            f"best single head {best['layer'] + 1}-{best['head'] + 1} {best['direction']} "
            f"{result.best_head_accuracy:.4f}; best offset {result.baseline_offset:+d} {result.baseline_accuracy:.4f}; "
            f"a={result.root_weights['a']:.3f} b={result.root_weights['b']:.3f}; "
            f"skipped {result.n_skipped_train} train, {result.n_skipped_test} test"
        )
    top = runs["attention"][1].largest_weights(5)
    print(
        "largest attention-only weights (1-based layer-head, direction): "
        + ", ".join(f"{layer + 1}-{head + 1} {direction} {weight:.3f}" for layer, head, direction, weight in top)
    )
    print("UAS per relation (attention-only | words | best head | offset), 10 most frequent:")
    attention, words = runs["attention"][1].uas_by_relation, runs["words"][1].uas_by_relation
    for relation in list(attention)[:10]:
        a, w = attention[relation], words[relation]
        print(
            f"  {relation:12s} {a['count']:6d}  {a['uas']:.3f} | {w['uas']:.3f} | "
            f"{a['best_head_accuracy']:.3f} | {a['baseline_accuracy']:.3f}"
        )


if __name__ == "__main__":
    main()
