"""Benchmark the norm measures on EWT dev: what they add to the forward pass, and aggregation against positions.

Run: python benchmarks/bench_norms.py [--limit N] [--attribution-limit M] [--repeats R]
Targets (issue 14): forward + everything of `special --norms` <= 1.3x the forward pass alone, and + every rolled-out
map <= 1.3x (it also times, alone, the matrix products every exact map needs: what the maps cannot go below); `aggregation` estimate (k = 12) <= 1.1x `positions` estimate on the same corpus. Also prints what
G_out (with_output=True) adds to an estimate-mode attribution.
Ratios are measured side by side in one run (configurations interleaved, best of the repeats).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.analyses.aggregation import AggregationOptions, accumulate_aggregation  # noqa: E402
from attnlib.analyses.positions import PositionOptions, accumulate_positions  # noqa: E402
from attnlib.core.batches import accumulate  # noqa: E402
from attnlib.core.hooks import NORMS, capture_set  # noqa: E402
from attnlib.core.runner import run_batches  # noqa: E402
from attnlib.stats.hta import hidden_token_attribution  # noqa: E402
from attnlib.stats.norms import NormShareStats, batch_norm_maps, norm_maps  # noqa: E402
from attnlib.stats.special import SpecialTokenStats  # noqa: E402
from benchmarks import default_model_on_ewt_dev  # noqa: E402

CONFIGS = ("forward only", "+ special --norms", "+ special --norms + rolled-out maps")


class EveryMap:
    """Computes every §11-13 map of each input (value and weighted norms, N, N_ResLN, both rollouts)."""

    captures = capture_set({"attn"}) | NORMS  # with the pass's batch_maps=batch_norm_maps (config_seconds)

    def add(self, result, item) -> None:
        norm_maps(result)


def accumulators(lm, config: str) -> list:
    """The accumulators of one configuration."""
    f = lm.facts
    special = [SpecialTokenStats(f.n_layers, f.n_heads), NormShareStats(f.n_layers, f.n_heads)]
    return [[], special, [*special, EveryMap()]][CONFIGS.index(config)]


def config_seconds(lm, sentences, config: str, batch_size: int) -> float:
    """Wall seconds of one engine pass with a configuration, its results made."""
    accs = accumulators(lm, config)
    start = time.perf_counter()
    every_map = any(isinstance(acc, EveryMap) for acc in accs)
    accumulate(lm, sentences, accs, batch_size=batch_size, batch_maps=batch_norm_maps if every_map else None)
    for acc in accs:
        if hasattr(acc, "result"):
            acc.result()
    return time.perf_counter() - start


def time_configs(lm, sentences, repeats: int, batch_size: int) -> dict[str, float]:
    """Best wall time of each configuration over interleaved repeats."""
    best: dict[str, float] = {}
    for _ in range(repeats):
        for config in CONFIGS:
            best[config] = min(best.get(config, float("inf")), config_seconds(lm, sentences, config, batch_size))
    return best


def time_map_products(lm, sentences, repeats: int, batch_size: int) -> float:
    """Best wall time of only the matrix products every exact §12 map needs, on the engine's batch shapes: f_h(x_j) =
    v W_O^h, the gram of the heads' vectors and that of the centred vectors with the residual (random values: the
    cost depends on shapes only). What the maps cannot go below with these products on this CPU."""
    import torch

    from attnlib.core.engines import plan_batches
    from attnlib.core.runner import encode

    f = lm.facts
    heads, hidden, layers = f.n_heads, f.hidden_size, f.n_layers
    out_weight = torch.randn(layers, heads, hidden // heads, hidden)
    lengths = [encode(lm, s.text_a, s.text_b).n for s in sentences]
    shapes = [(len(b), max(lengths[i] for i in b)) for b in plan_batches(lm, sentences, batch_size)]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for size, n in shapes:
            values = torch.randn(heads, size * n, hidden // heads)
            vectors = torch.randn(heads + 1, size * n, hidden)
            by_key = vectors.transpose(0, 1)  # as norm_batch lays them out
            for l in range(layers):
                torch.matmul(values, out_weight[l], out=vectors[:heads])
                torch.matmul(by_key[:, :heads], by_key[:, :heads].transpose(1, 2))
                torch.matmul(by_key, by_key.transpose(1, 2))
        best = min(best, time.perf_counter() - start)
    return best


def time_attribution(lm, sentences, repeats: int, probes: int) -> dict[str, float]:
    """Best wall time of attribution with and without G_out, and of `positions` and `aggregation` in estimate mode."""
    runs_ = list(run_batches(lm, ((s.text_a, s.text_b) for s in sentences)))
    runs = {
        "attribution without G_out": lambda: [hidden_token_attribution(lm, r, "estimate", probes) for r in runs_],
        "attribution with G_out": lambda: [
            hidden_token_attribution(lm, r, "estimate", probes, with_output=True) for r in runs_
        ],
        "positions estimate": lambda: accumulate_positions(lm, sentences, PositionOptions(probes=probes)).result(),
        "aggregation estimate": lambda: accumulate_aggregation(
            lm, sentences, AggregationOptions(probes=probes)
        ).result(),
    }
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="sentences of EWT dev (default: all 2001)")
    parser.add_argument("--attribution-limit", type=int, default=None, help="sentences for aggregation vs positions")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--probes", type=int, default=12)
    args = parser.parse_args()
    lm, sentences = default_model_on_ewt_dev(args.limit, args.batch_size, args.repeats)
    best = time_configs(lm, sentences, args.repeats, args.batch_size)
    base = best[CONFIGS[0]]
    print(f"{'configuration':40s} {'seconds':>8s} {'sent/s':>8s} {'vs forward':>11s}")
    for config in CONFIGS:
        print(f"{config:40s} {best[config]:8.2f} {len(sentences) / best[config]:8.1f} {best[config] / base:10.3f}x")
    products = time_map_products(lm, sentences, args.repeats, args.batch_size)
    print(f"{'(only the products every exact map needs)':40s} {products:8.2f} {'':8s} {products / base:10.3f}x extra")
    print("target: each at most 1.3x the forward pass\n")
    attributed = sentences[: args.attribution_limit or len(sentences)]
    timed = time_attribution(lm, attributed, args.repeats, args.probes)
    print(f"estimate mode, k = {args.probes}, on {len(attributed)} sentences")
    for name, seconds in timed.items():
        print(f"{name:40s} {seconds:8.2f} {len(attributed) / seconds:8.2f}")
    ratio = timed["aggregation estimate"] / timed["positions estimate"]
    print(f"aggregation / positions: {ratio:.3f}x (target: at most 1.1x)")
    cost = timed["attribution with G_out"] / timed["attribution without G_out"]
    print(f"attribution with G_out / without: {cost:.3f}x (what G_out would add to positions and hta)")


if __name__ == "__main__":
    main()
