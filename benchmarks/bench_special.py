"""Benchmark the special-token statistics on EWT dev: speed against the batched forward pass alone, and peak memory.

Run: python benchmarks/bench_special.py [--limit N] [--repeats R]
Targets (issue 4): all statistics add at most 25% to the forward pass; peak memory for 500 and 2001 sentences within 10%.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import tracemalloc
from pathlib import Path
from unittest import mock

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.core.batches import accumulate  # noqa: E402
from attnlib.core.model import DEFAULT_MODEL, load_model  # noqa: E402
from attnlib.stats import head_distances  # noqa: E402
from attnlib.stats.head_distances import TILE_COLUMNS, HeadDistances, threaded_sum  # noqa: E402
from attnlib.stats.special import SpecialTokenStats  # noqa: E402
from benchmarks import child_report, default_model_on_ewt_dev, ewt_dev, peak_resident_mb  # noqa: E402

CONFIGS = ("forward only", "+ special-token stats", "+ special stats + JS head distances")
BASELINE = "  same, JS with numpy's log (before)"  # the JS pass before attnlib.stats.js_kernel, timed side by side


def _numpy_tile_pair_sums(p: np.ndarray) -> np.ndarray:
    """Upper triangle [K, K] of sum_j s ln s, s = p_a + p_b, over one tile p [K, W] with numpy's float32 log."""
    k, width = p.shape
    out = np.zeros((k, k))
    both = np.empty((k - 1, width), np.float32)
    logs = np.empty_like(both)
    for a in range(k - 1):
        s, lg = both[: k - a - 1], logs[: k - a - 1]
        np.add(p[a + 1 :], p[a], out=s)
        np.log(s, out=lg)
        np.multiply(lg, s, out=lg)
        out[a, a + 1 :] = lg.sum(axis=1)
    return out


def numpy_pairwise_block(p: np.ndarray, columns: int) -> np.ndarray:
    """attnlib.stats.head_distances._pairwise_block as it was before the numba kernel (the baseline of BASELINE)."""
    p = p[:, :columns]
    plogp = (p * np.log(p)).sum(axis=1, dtype=np.float64)
    mass = p.sum(axis=1, dtype=np.float64)
    starts = range(0, columns, TILE_COLUMNS)
    s_log_s = threaded_sum(lambda start: _numpy_tile_pair_sums(p[:, start : start + TILE_COLUMNS]), starts)
    m_log_m = 0.5 * s_log_s - np.log(2) * 0.5 * (mass[:, None] + mass[None, :])
    return np.maximum(np.triu(0.5 * (plogp[:, None] + plogp[None, :]) - m_log_m, 1), 0.0)


class Timed:
    """Wraps an accumulator and adds up the seconds spent in its add()."""

    def __init__(self, inner) -> None:
        self.inner, self.seconds, self.cpu_seconds = inner, 0.0, 0.0
        self.captures = inner.captures

    def add(self, result, item) -> None:
        start, cpu = time.perf_counter(), time.process_time()
        self.inner.add(result, item)
        self.seconds += time.perf_counter() - start
        self.cpu_seconds += time.process_time() - cpu


def accumulators(lm, config: str) -> list:
    """The accumulators of one configuration."""
    f = lm.facts
    if config == CONFIGS[0]:
        return []
    if config == CONFIGS[1]:
        return [SpecialTokenStats(f.n_layers, f.n_heads)]
    return [SpecialTokenStats(f.n_layers, f.n_heads), HeadDistances(f.n_layers, f.n_heads)]


def finish(accs: list) -> None:
    """Make each accumulator produce its result (the head distances flush their buffer here)."""
    for acc in accs:
        acc.inner.result()


def cpu_seconds() -> float:
    """CPU seconds of this process (all its threads): unlike wall time, not inflated by other load on the machine."""
    return time.process_time()


def time_configs(lm, sentences, repeats: int, batch_size: int) -> dict[str, dict[str, float]]:
    """Wall time of each configuration (best of the repeats, run interleaved) and the time inside add()."""
    best: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        for config in (*CONFIGS, BASELINE):
            accs = [Timed(a) for a in accumulators(lm, config)]
            before = mock.patch.object(head_distances, "_pairwise_block", numpy_pairwise_block)
            with before if config == BASELINE else contextlib.nullcontext():
                start, cpu_start = time.perf_counter(), cpu_seconds()
                accumulate(lm, sentences, accs, batch_size=batch_size)
                finish_start, finish_cpu = time.perf_counter(), cpu_seconds()
                finish(accs)
                end, cpu_end = time.perf_counter(), cpu_seconds()
            in_stats = sum(a.seconds for a in accs) + (end - finish_start)
            cpu_in_stats = sum(a.cpu_seconds for a in accs) + (cpu_end - finish_cpu)
            if config not in best or end - start < best[config]["wall"]:
                best[config] = {"wall": end - start, "in_stats": in_stats}
            row = best[config]
            row["cpu"] = min(row.get("cpu", float("inf")), cpu_end - cpu_start)
            row["cpu_in_stats"] = min(row.get("cpu_in_stats", float("inf")), cpu_in_stats)
    return best


def memory_child(limit: int, batch_size: int) -> None:
    """Run every statistic over the first `limit` sentences and print the peak memory as JSON."""
    lm = load_model(DEFAULT_MODEL)
    sentences = ewt_dev(limit)
    accs = accumulators(lm, CONFIGS[2])
    tracemalloc.start()
    accumulate(lm, sentences, accs, batch_size=batch_size)
    for acc in accs:
        acc.result()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(
        json.dumps(
            {
                "limit": len(sentences),
                "max_rss_mb": peak_resident_mb(),
                "numpy_python_peak_mb": traced_peak / 2**20,
                "longest_input": max(len(s.words) for s in sentences),
            }
        )
    )


def measure_memory(limits: list[int], batch_size: int) -> list[dict]:
    """Peak memory of a fresh process per corpus size."""
    return [child_report(__file__, limit, batch_size) for limit in limits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="sentences of EWT dev (default: all 2001)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--memory-sizes", default="500,2001", help="corpus sizes of the memory runs ('' for none)")
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child is not None:
        memory_child(args.memory_child, args.batch_size)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    lm, sentences = default_model_on_ewt_dev(args.limit, args.batch_size, args.repeats)
    start = time.perf_counter()
    head_distances.pairwise_js(np.full((1, 2, 2, 2), 0.5, np.float32))
    print(
        f"first JS call (numba's import, the kernel compiled or read from its cache): {time.perf_counter() - start:.2f} s\n"
    )
    best = time_configs(lm, sentences, args.repeats, args.batch_size)
    base = best[CONFIGS[0]]["wall"]
    print(
        f"{'configuration':40s} {'seconds':>8s} {'sent/s':>8s} {'vs forward':>11s} {'in stats':>9s} {'stats/forward':>14s}"
        f" {'CPU s':>7s} {'CPU in stats':>13s} {'CPU stats/forward':>18s}"
    )
    cpu_base = best[CONFIGS[0]]["cpu"]
    for config in (*CONFIGS, BASELINE):
        b = best[config]
        print(
            f"{config:40s} {b['wall']:8.2f} {len(sentences) / b['wall']:8.1f} {b['wall'] / base:10.3f}x "
            f"{b['in_stats']:8.2f}s {b['in_stats'] / base:13.1%} {b['cpu']:7.2f} {b['cpu_in_stats']:12.2f}s "
            f"{b['cpu_in_stats'] / cpu_base:17.1%}"
        )
    print(
        "\n'in stats' is the time inside the accumulators' add() and result(); 'stats/forward' divides it by the "
        "forward-only wall time. The CPU columns count the CPU seconds of all the process's threads instead (best of "
        "the repeats), which other load on a shared machine does not inflate; with --threads 1 their ratio is the cost "
        "per core. Target: at most 25%.\n"
    )
    sizes = [int(s) for s in args.memory_sizes.split(",") if s]
    if not sizes:
        return
    rows = measure_memory(sizes, args.batch_size)
    print(f"{'sentences':>9s} {'peak RSS MB':>12s} {'numpy+python peak MB':>21s} {'longest (words)':>16s}")
    for row in rows:
        print(
            f"{row['limit']:9d} {row['max_rss_mb']:12.1f} {row['numpy_python_peak_mb']:21.1f} {row['longest_input']:16d}"
        )
    if len(rows) == 2:
        rss = rows[1]["max_rss_mb"] / rows[0]["max_rss_mb"] - 1
        print(f"\npeak RSS {sizes[1]} vs {sizes[0]}: {rss:+.1%} (target: within 10%)")


if __name__ == "__main__":
    main()
