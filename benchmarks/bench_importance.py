"""Benchmark head ablation (METHODS §15) on EWT dev against the forward pass, and its peak memory.

Run: python -m benchmarks.bench_importance [--limit N] [--gradient-limit M] [--repeats R]
Targets (issue 27), for L layers and H heads (42 forward passes' worth for the default model's 6 x 12):
- every single-head ablation over the corpus (`importance`, the recording pass, the shares and the measures
  included) at most 1.1 x H (L + 1) / 2 forward passes over the same corpus;
- the two knockouts of every head (what `--knockout` adds) at most 1.1 x 2 x H (L + 1) / 2;
- Michel's gradient importance (forward and backward with the multipliers) at most 3 forward passes, timed on a
  masked-LM model of the default model's shape (the default model has no MLM head; the cost depends on shapes only,
  so its head is random);
- peak memory of the whole `importance --knockout` run under 1 GB (a fresh process, its VmHWM).
The configurations run side by side in one process, alternating batch by batch (best of the repeats per batch).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attnlib.analyses.importance import ImportanceOptions, importance_accumulators, importance_fill  # noqa: E402
from attnlib.core.engines import plan_batches  # noqa: E402
from attnlib.core.model import DEFAULT_MODEL, load_model  # noqa: E402
from attnlib.core.runner import encode, model_inputs  # noqa: E402
from attnlib.stats.importance import head_gradients, masked_batch  # noqa: E402
from benchmarks import child_report, default_model_on_ewt_dev, ewt_dev, peak_resident_mb  # noqa: E402


def batches_of(lm, sentences, batch_size: int) -> list[list]:
    """The encoded batches the importance pass forms (the engines' plan)."""
    return [[encode(lm, sentences[i].text_a) for i in b] for b in plan_batches(lm, sentences, batch_size)]


def forward_seconds(lm, batches) -> float:
    """One plain forward pass of the encoder over every batch (eager attention, no gradients)."""
    start = time.perf_counter()
    with torch.no_grad():
        for encoded in batches:
            lm.encoder(**model_inputs(lm, encoded))
    return time.perf_counter() - start


def importance_seconds(lm, sentences, batch_size: int, knockout: bool) -> float:
    options = ImportanceOptions(knockout=knockout)
    start = time.perf_counter()
    importance_fill(lm, sentences, importance_accumulators(lm, options), batch_size, None, options)
    return time.perf_counter() - start


def interleaved_seconds(lm, sentences, batch_size: int, repeats: int) -> dict[str, float]:
    """Batch by batch of the importance pass, side by side: the batch's forward pass (warm, as in a pass over the
    corpus), its single-head ablations and its `--knockout` run, each the best of the repeats, summed over the batches
    (the load of a shared machine moves within minutes, so the configurations alternate every few seconds)."""
    totals = dict.fromkeys(("forward", "importance (single-head ablation)", "importance --knockout"), 0.0)
    for indices in plan_batches(lm, sentences, batch_size):
        part = [sentences[i] for i in indices]
        encoded = [encode(lm, s.text_a) for s in part]
        best: dict[str, float] = {}
        for _ in range(repeats):
            forward_seconds(lm, [encoded])  # the forward pass that follows an ablation run starts cold
            timed = {
                "forward": forward_seconds(lm, [encoded]),
                "importance (single-head ablation)": importance_seconds(lm, part, batch_size, False),
                "importance --knockout": importance_seconds(lm, part, batch_size, True),
            }
            for name, seconds in timed.items():
                best[name] = min(best.get(name, float("inf")), seconds)
        for name, seconds in best.items():
            totals[name] += seconds
    return totals


def minilm_shaped_mlm():
    """A masked-LM model of the default model's shape: its encoder's weights, a random MLM head (timing only)."""
    from transformers import BertForMaskedLM

    lm = load_model(DEFAULT_MODEL)
    mlm = BertForMaskedLM(lm.encoder.config)
    mlm.bert.load_state_dict(lm.encoder.state_dict(), strict=False)
    mlm.eval()
    lm.mlm, lm.encoder = mlm, mlm.bert
    return lm


def gradient_configs(lm, batches) -> dict[str, float]:
    """A forward pass of the masked inputs against Michel's gradient on them."""
    masked = [masked_batch(lm, encoded, list(range(len(encoded))), 0) for encoded in batches]
    start = time.perf_counter()
    with torch.no_grad():
        for batch, _ in masked:
            lm.encoder(**batch)
    forward = time.perf_counter() - start
    start = time.perf_counter()
    for batch, labels in masked:
        head_gradients(lm, batch, labels)
    return {"forward (masked inputs)": forward, "gradient importance": time.perf_counter() - start}


def memory_child(limit: int, batch_size: int) -> None:
    """`importance --knockout` over the first `limit` sentences in this process; prints the peak memory as JSON."""
    lm = load_model(DEFAULT_MODEL)
    sentences = ewt_dev(limit)
    options = ImportanceOptions(knockout=True)
    importance_fill(lm, sentences, importance_accumulators(lm, options), batch_size, None, options)
    peak = peak_resident_mb()
    print(json.dumps({"limit": len(sentences), "max_rss_mb": peak}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=500, help="EWT dev sentences (default 500)")
    parser.add_argument("--gradient-limit", type=int, default=200, help="sentences for the gradient (default 200)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child, args.batch_size)
        return
    lm, sentences = default_model_on_ewt_dev(args.limit, args.batch_size, args.repeats)
    L, H = lm.facts.n_layers, lm.facts.n_heads
    passes = H * (L + 1) / 2
    best = interleaved_seconds(lm, sentences, args.batch_size, args.repeats)
    forward = best["forward"]
    ablation = best["importance (single-head ablation)"]
    knockouts = best["importance --knockout"] - ablation
    print(f"{'configuration':38s} {'seconds':>8s} {'forward passes':>15s} {'target':>8s}")
    print(f"{'forward':38s} {forward:8.1f} {1:15.1f}")
    print(f"{'every single-head ablation':38s} {ablation:8.1f} {ablation / forward:15.1f} {1.1 * passes:8.1f}")
    print(f"{'both knockouts of every head':38s} {knockouts:8.1f} {knockouts / forward:15.1f} {2.2 * passes:8.1f}")
    print(f"(H (L + 1) / 2 = {passes:.0f} forward passes for {L} layers x {H} heads)\n")
    mlm = minilm_shaped_mlm()
    gradient_batches = batches_of(mlm, sentences[: args.gradient_limit], args.batch_size)
    best_gradient: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, seconds in gradient_configs(mlm, gradient_batches).items():
            best_gradient[name] = min(best_gradient.get(name, float("inf")), seconds)
    base = best_gradient["forward (masked inputs)"]
    print(f"{'on ' + str(len(gradient_batches)) + ' batches, MLM model':38s} {'seconds':>8s} {'forward passes':>15s}")
    for name, seconds in best_gradient.items():
        print(
            f"{name:38s} {seconds:8.1f} {seconds / base:15.2f}"
            + ("   target 3" if name != "forward (masked inputs)" else "")
        )
    memory = child_report(__file__, args.limit, args.batch_size)
    print(f"\npeak memory of importance --knockout on {memory['limit']} sentences: {memory['max_rss_mb']:.0f} MB "
          "(target under 1024 MB)")  # fmt: skip


if __name__ == "__main__":
    main()
