"""Benchmark activation patching, attribution patching and composition (METHODS §22) on a random decoder of GPT-2
small's shape (12 layers, 12 heads, hidden 768, vocabulary 50,257), one pair of 64 tokens, side by side in one run.

Run: python -m benchmarks.bench_patching [--repeats R] [--threads T] [--tokens N]
- heads: every head patched (144 patched runs, batched: one head a row) against 144 plain forward passes of the model
  (its own forward with its LM head, one input at a time). Target: <= 1.2x. Also against the same 144 rows run as the
  patching batches them without any edit (what the edits themselves cost).
- attribution: the forward pass with gradients and the backward pass for every head at once; and end to end, the two
  runs' passes that capture the context vectors (prepare_pair, the corrupted one differentiable) and the backward
  pass, against one plain forward pass. Target: <= 3x.
- composition: the processed weights and every pair's Q, K and V scores. Target: < 2 s.
Interleaved, best of the repeats (the machine is shared)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from benchmarks import best_of_interleaved, saved_decoder

PLAIN, UNEDITED, HEADS = ("{} plain forward passes (model + LM head)", "{} rows batched as patching, no edit",
                          "every head patched ({} patched runs)")  # fmt: skip
ONE, ATTRIBUTION = "one plain forward pass", "attribution: forward with gradients + backward"
ATTRIBUTION_RUNS, COMPOSITION = "attribution end to end: both runs + backward", "composition: weights + all pairs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    import numpy as np
    import torch

    from attnlib.core.ov_circuit import head_weights
    from attnlib.stats import patching
    from attnlib.stats.composition import composition_scores

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        lm = saved_decoder(Path(folder))
        rng = np.random.default_rng(0)
        vocabulary = [t for t in lm.tokenizer.get_vocab() if t.startswith("Ġ") and t[1:].isalpha()]
        words = [w[1:] for w in rng.choice(vocabulary, 2 * args.tokens)]
        clean = " " + " ".join(words[: args.tokens])  # one token a word, each with its space
        corrupted = " " + " ".join(words[args.tokens : 2 * args.tokens])
        if patching.encode(lm, clean).n != patching.encode(lm, corrupted).n:
            raise SystemExit("the two random texts tokenize to different lengths; try another --tokens")
        pair = patching.prepare_pair(lm, clean, corrupted, metric="logprob")  # a random model's top tokens may tie
        n_heads = lm.facts.n_layers * lm.facts.n_heads
        one = pair.inputs["clean"]

        def plain_passes() -> None:
            with torch.inference_mode():
                for _ in range(n_heads):
                    lm.causal_lm(**one)

        def batched_unedited() -> None:
            size = patching._rows_per_batch(pair)
            with torch.inference_mode():
                for first in range(0, n_heads, size):
                    rows = min(size, n_heads - first)
                    patching.logits_at(lm, patching._repeated(one, rows), pair.position)

        def every_head() -> None:
            patching.head_scores(pair, "denoise")

        def one_pass() -> None:
            with torch.inference_mode():
                lm.causal_lm(**one)

        def attribution() -> None:
            patching.attribution_scores(pair, "denoise")

        def attribution_with_runs() -> None:
            found = patching.prepare_pair(
                lm, clean, corrupted, attribution="denoise"
            )  # its corrupted run differentiable
            patching.attribution_scores(found, "denoise")

        def composition() -> None:
            composition_scores(head_weights(lm))

        runs = {
            PLAIN.format(n_heads): plain_passes,
            UNEDITED.format(n_heads): batched_unedited,
            HEADS.format(n_heads): every_head,
            ONE: one_pass,
            ATTRIBUTION: attribution,
            ATTRIBUTION_RUNS: attribution_with_runs,
            COMPOSITION: composition,
        }
        one_pass()  # warm-up
        every_head()
        best = best_of_interleaved(runs, args.repeats)
    print(f"GPT-2 small's shape (random), {pair.n} tokens, {torch.get_num_threads()} torch threads, best of "
          f"{args.repeats} interleaved")  # fmt: skip
    for name, seconds in best.items():
        print(f"{name:52s} {seconds:8.3f} s")
    plain, heads = best[PLAIN.format(n_heads)], best[HEADS.format(n_heads)]
    print(f"every head patched / {n_heads} plain passes: {heads / plain:.2f}x (target <= 1.2x)")
    print(f"every head patched / the same rows batched, no edit: {heads / best[UNEDITED.format(n_heads)]:.2f}x")
    forward = plain / n_heads  # one pass, as the mean of the 144 (a single pass's best of R is the load's noise)
    print(f"attribution / one forward pass: {best[ATTRIBUTION] / forward:.2f}x; with both runs' passes: "
          f"{best[ATTRIBUTION_RUNS] / forward:.2f}x (target <= 3x)")  # fmt: skip
    print(f"composition of every head pair: {best[COMPOSITION]:.2f} s (target < 2 s)")


if __name__ == "__main__":
    main()
