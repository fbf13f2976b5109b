"""Benchmark the retrieval test (METHODS §20, issue 48) against the same greedy decoding without capture, and its peak
memory at 8,192 tokens through §19's block-wise attention.

Run: python -m benchmarks.bench_retrieval [--length 1024] [--long 8192] [--repeats 3] [--threads 1]
The model is a random Llama-shaped decoder (8 layers, 8 query heads and 4 key/value heads of 64, hidden 512,
feed-forward 1376, 16,384 positions: 23.5 M parameters) with the tests' byte-level BPE (support.models, 600 tokens);
the haystack is UD English EWT dev's text, the needle and question the analysis's defaults.
- time: the `retrieval` analysis's tests (each depth 0, 0.25, 0.5, 0.75, 1 at --length haystack tokens: block-wise
  prefill keeping its last row, one eager row per step, the copy check) against greedy_decode of the same inputs,
  the same number of steps, with no capture (the model's own eager prefill); greedy and forced; interleaved, best of
  the repeats. Target: within 1.3x.
- memory: a fresh process runs the analysis on one test (depth 0.5) of --long haystack tokens and prints its peak
  resident memory (VmHWM, model included) and the peak after loading the model alone. Target: within 1.5 GB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import peak_resident_mb  # noqa: E402

SIZE = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
            intermediate_size=1376, max_position_embeddings=16384)  # fmt: skip


def save_model(folder: Path) -> None:
    """The random Llama-shaped decoder and its tokenizer, saved in folder."""
    import torch
    import transformers as tf

    from support.models import tokenizer_for

    tokenizer = tokenizer_for("llama")
    tokenizer.model_max_length = SIZE["max_position_embeddings"]
    config = tf.LlamaConfig(**SIZE, vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                            eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def timings(lm, length: int, forced: bool, repeats: int) -> tuple[float, float, int]:
    """Best seconds of the analysis's tests and of plain greedy decoding of the same inputs; the input length."""
    from attnlib.analyses.retrieval import RetrievalOptions, run_tests
    from attnlib.core.decoding import greedy_decode
    from attnlib.stats.importance import mlm_head
    from benchmarks import ewt_dev

    sentences = ewt_dev()
    options = RetrievalOptions(lengths=str(length), forced=forced)
    sums = run_tests(lm, sentences, options)  # once before timing: the inputs, and one-off costs
    head = None if forced else mlm_head(lm)
    tests = [(t.input_ids, len(t.decoded_ids), t.input_ids[slice(*t.needle_span)]) for t in sums.tests]

    def plain() -> None:
        for ids, steps, needle in tests:
            greedy_decode(lm, ids, steps, needle if forced else None, head=head)

    best = {"retrieval": float("inf"), "plain": float("inf")}
    for _ in range(repeats):
        for name, once in (("retrieval", lambda: run_tests(lm, sentences, options)), ("plain", plain)):
            start = time.perf_counter()
            once()
            best[name] = min(best[name], time.perf_counter() - start)
    return best["retrieval"], best["plain"], len(tests[0][0])


def memory_child(folder: str, length: int) -> None:
    """The analysis on one test of `length` haystack tokens in this process; prints its peak memory as JSON."""
    import attnlib
    from attnlib.core.model import load_model
    from attnlib.results.shipped import EWT_DEV

    lm = load_model(folder)
    loaded = peak_resident_mb()
    start = time.perf_counter()
    run = attnlib.retrieval(lm, corpus=EWT_DEV, lengths=str(length), depths="0.5")
    seconds = time.perf_counter() - start
    test = run.result.tests[0]
    print(json.dumps({"n_tokens": len(test.input_ids), "loaded_mb": loaded, "max_rss_mb": peak_resident_mb(),
                      "seconds": seconds, "decoded": len(test.decoded_ids)}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1024, help="haystack tokens of the timed tests (default 1024)")
    parser.add_argument("--long", type=int, default=8192, help="haystack tokens of the memory run (default 8192)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: on a loaded 2-core machine two threads wait on each other)",
    )
    parser.add_argument("--memory-child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.memory_child is not None:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
        return
    import subprocess

    from attnlib.core.model import load_model

    with tempfile.TemporaryDirectory() as folder:
        save_model(Path(folder))
        lm = load_model(folder)
        print(f"random Llama-shaped decoder, {lm.facts.parameters / 1e6:.1f} M parameters, {lm.facts.n_layers} layers x "
              f"{lm.facts.n_heads} heads; {torch.get_num_threads()} torch threads, best of {args.repeats} interleaved "
              "runs\n")  # fmt: skip
        print(f"{'5 depths, haystack ' + str(args.length) + ' tokens':40s} {'retrieval s':>12s} {'plain s':>8s} "
              f"{'ratio':>6s} {'target':>6s}")  # fmt: skip
        for forced in (False, True):
            ours, plain, n = timings(lm, args.length, forced, args.repeats)
            name = f"{'forced' if forced else 'greedy'} ({n} input tokens)"
            print(f"{name:40s} {ours:12.2f} {plain:8.2f} {ours / plain:6.2f} {1.3:6.1f}")
        out = subprocess.run([sys.executable, __file__, "--memory-child", folder, str(args.long), "--threads",
                              str(args.threads)], capture_output=True, text=True, check=True)  # fmt: skip
    memory = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\none test at {args.long:,} haystack tokens ({memory['n_tokens']:,} input tokens, {memory['decoded']} "
          f"decoded), block-wise prefill: {memory['seconds']:.1f} s, peak {memory['max_rss_mb']:.0f} MB "
          f"(model loaded: {memory['loaded_mb']:.0f} MB; target within 1536 MB)")  # fmt: skip


if __name__ == "__main__":
    main()
