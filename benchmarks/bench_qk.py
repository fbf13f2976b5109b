"""Benchmark the qk analysis (issue 29) on the first 200 EWT dev sentences with the default model.

Run: python -m benchmarks.bench_qk [--limit N] [--repeats R] [--skip-projections]
Targets: collecting every head's queries and keys <= 1.1x the forward pass alone (side by side, interleaved, best of
the repeats); the PCA grid of every head (translation, scaling, PCA and fidelity of 72 heads) < 2 s; one t-SNE and
one UMAP of a head (2 x ~4,800 points) < 15 s each. UMAP's first call in a process also compiles its numba code
(cached on disk for the next process); both times are printed.
"""

from __future__ import annotations

import argparse
import os
import time

from attnlib.analyses.qk import QKCollector, QKOptions, qk_accumulators, qk_result
from attnlib.core.batches import accumulate
from benchmarks import default_model_on_ewt_dev

CONFIGS = ("forward only", "+ queries and keys of head 0-0", "+ queries and keys of every head")


def collectors(lm, config: str) -> list:
    """The accumulators of one configuration."""
    if config == CONFIGS[0]:
        return []
    return qk_accumulators(lm, QKOptions(all_heads=config == CONFIGS[2]))


def time_collecting(lm, sentences, repeats: int, batch_size: int) -> tuple[dict[str, float], QKCollector]:
    """Best wall time of each configuration over interleaved repeats, and the last every-head collector."""
    best: dict[str, float] = {}
    every = None
    for _ in range(repeats):
        for config in CONFIGS:
            accs = collectors(lm, config)
            start = time.perf_counter()
            accumulate(lm, sentences, accs, batch_size=batch_size)
            best[config] = min(best.get(config, float("inf")), time.perf_counter() - start)
            if config == CONFIGS[2]:
                every = accs[0]
    assert every is not None
    return best, every


def seconds(work) -> tuple[float, object]:
    start = time.perf_counter()
    out = work()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--skip-projections", action="store_true", help="only the collecting and the PCA grid")
    args = parser.parse_args()
    lm, sentences = default_model_on_ewt_dev(args.limit, args.batch_size, args.repeats)
    print(f"load average before: {os.getloadavg()[0]:.1f} (2 cores; timings on a busy machine are noisy)\n")
    best, every = time_collecting(lm, sentences, args.repeats, args.batch_size)
    base = best[CONFIGS[0]]
    print(f"{'configuration':<36}{'seconds':>9}{'ratio':>8}")
    for config in CONFIGS:
        print(f"{config:<36}{best[config]:>9.2f}{best[config] / base:>7.2f}x")
    n = sum(i.n for i in every.inputs)
    print(f"target: every head <= 1.1x the forward pass; {n} tokens, {2 * n} points per head\n")
    grid_s, _ = seconds(lambda: qk_result([every], QKOptions(all_heads=True)))
    print(
        f"PCA grid of all {len(every.heads)} heads (translation, scaling, PCA, fidelity): {grid_s:.2f} s (target < 2 s)"
    )
    if args.skip_projections:
        return
    head = every.heads.index((2, 0))
    for method in ("tsne", "umap", "umap"):
        took, picture = seconds(lambda method=method: every.picture(head, method))
        f = picture.fidelity  # type: ignore[attr-defined]
        print(
            f"{method} of head 3-1 ({2 * n} points): {took:.1f} s = {took / base:.2f}x the forward pass (target < 15 s); "
            f"fidelity: mean rank {f.mean_rank:.2f} (random {f.random_mean_rank:.2f}), top key nearest "
            f"{f.top_is_nearest:.1%}"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
