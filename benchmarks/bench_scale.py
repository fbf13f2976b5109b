"""Benchmark the scale-out engines on EWT dev: the local engine against 1 and 2 local Ray workers (`special` statistics).

Run: python -m benchmarks.bench_scale [--limit N] [--batch-size B] [--repeats R]
Every configuration runs the same statistic over the same sentences in one process; the configurations take turns in
each repeat and the best wall time of each is kept. Ray starts once (timed apart); each Ray run includes starting its
workers and loading one model in each.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.analyses.special import SPECIAL, SpecialOptions  # noqa: E402
from attnlib.core.engines import ray_runtime_env, run_accumulators  # noqa: E402
from attnlib.core.model import DEFAULT_MODEL  # noqa: E402
from attnlib.stats.special import STAT_KEYS  # noqa: E402
from benchmarks import ewt_dev  # noqa: E402


def run_local(sentences, batch_size: int, threads: int):
    """The local engine with torch limited to `threads`."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return run_accumulators(
            DEFAULT_MODEL,
            sentences,
            SPECIAL.make_accumulators(SpecialOptions()),
            batch_size=batch_size,
        )
    finally:
        torch.set_num_threads(before)


def run_ray(sentences, batch_size: int, workers: int, cpus_per_worker: float):
    return run_accumulators(
        DEFAULT_MODEL,
        sentences,
        SPECIAL.make_accumulators(SpecialOptions()),
        engine="ray",
        workers=workers,
        batch_size=batch_size,
        cpus_per_worker=cpus_per_worker,
    )


def max_difference(a, b) -> float:
    ra, rb = a.accumulators[0].result(), b.accumulators[0].result()
    return max(float(np.nanmax(np.abs(ra.heads[k] - rb.heads[k]))) for k in STAT_KEYS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="sentences of EWT dev (default: all)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each configuration; the fastest is kept")
    args = parser.parse_args()
    import ray

    sentences = ewt_dev(args.limit)
    cores = os.cpu_count()
    print(
        f"EWT dev, {len(sentences)} sentences, {DEFAULT_MODEL}, `special` statistics, batch size {args.batch_size}; "
        f"{cores} CPU cores, torch {torch.__version__} with {torch.get_num_threads()} threads by default\n"
    )

    threads = torch.get_num_threads()
    configs = {  # name -> (torch threads per model, run)
        f"local engine ({threads} torch threads)": (threads, partial(run_local, threads=threads)),
        "local engine (1 torch thread)": (1, partial(run_local, threads=1)),
    }
    for workers, cpus in ((1, 1), (2, 1), (1, min(2, cores))):
        if workers * cpus <= cores:
            name = f"Ray, {workers} worker{'s' if workers > 1 else ''} x {cpus} CPU"
            configs[name] = (cpus, partial(run_ray, workers=workers, cpus_per_worker=cpus))
    run_local(sentences[:64], args.batch_size, threads)  # warm-up: imports, first model load, file caches

    start = time.perf_counter()
    ray.init(
        num_cpus=cores,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
        runtime_env=ray_runtime_env(),
    )
    ray_start = time.perf_counter() - start
    best: dict[str, object] = {}
    load = [os.getloadavg()[0]]
    try:
        for _ in range(args.repeats):
            for name, (_, run) in configs.items():
                result = run(sentences, args.batch_size)
                if name not in best or result.seconds < best[name].seconds:
                    best[name] = result
    finally:
        ray.shutdown()
    load.append(os.getloadavg()[0])
    rows = [(name, configs[name][0], best[name]) for name in configs]
    local_default, local_one = rows[0][2], rows[1][2]

    base = local_default.seconds
    header = f"{'configuration':<34} {'wall s':>8} {'vs local':>9} {'in shards s':>12} {'max |diff| vs local, same threads':>34}"
    print(header)
    print("-" * len(header))
    for name, threads, run in rows:
        reference = {1: local_one, torch.get_num_threads(): local_default}.get(threads)
        shards = f"{sum(run.ray.shard_seconds):.1f}" if run.ray else "-"
        diff = "-" if reference is None or run is reference else f"{max_difference(run, reference):.1e}"
        print(f"{name:<34} {run.seconds:>8.1f} {run.seconds / base:>8.2f}x {shards:>12} {diff:>34}")
    print(
        f"\nBest of {args.repeats} runs each. Load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after, "
        f"on {cores} cores: other processes share the CPUs."
    )
    print(f"Starting Ray itself (ray.init, once per job): {ray_start:.1f} s, not included above.")
    print(
        "Each Ray wall time includes tokenizing on the driver to plan the batches, starting the workers, loading a "
        "model in each, and merging; 'in shards' is the time the workers spent running their shards (summed)."
    )


if __name__ == "__main__":
    main()
