"""Hidden Token Attribution: exact forward mode against a plain per-output reverse-mode loop, and the estimate against exact.

Run: python -m benchmarks.bench_hta [--probes 8 12 16] [--sample 48]
The reverse loop makes one backward pass per output coordinate o(l,h)_j[c]; its cost is measured on a sample of
`--sample` coordinates per layer and per contribution (input, previous) and scaled to all n * hidden of each layer.
Exact mode runs twice: through the model's own layers (torch.func.jvp under vmap) and with each layer linearised
(the default: per-token Jacobians for the position-wise part). Two loops are timed: one keeps each layer's head outputs as their own tensor (a backward pass for layer l runs
through layers 1..l only), the other stacks every layer's outputs into one tensor (each backward pass then runs
through the whole graph, as autograd sends zeros down the other layers' branches).
Timings are the best of --repeats runs (the exact run is timed once); CPU time counts every thread of this process.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnlib.core.model import DEFAULT_MODEL, load_model
from attnlib.core.runner import encode
from attnlib.stats.hta import DEFAULT_PROBES, hidden_token_attribution
from attnlib.stats.reverse_mode import reverse_graphs

PAIR = (
    "The teacher said that she would grade all of the exams tonight.",
    "After a quick dinner, she sat at the kitchen table and carefully read every essay twice.",
)


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def best_of(fn, repeats: int):
    """(result, best wall seconds, best CPU seconds) over repeats."""
    runs = [timed(fn) for _ in range(repeats)]
    return runs[-1][0], min(r[1] for r in runs), min(r[2] for r in runs)


def reverse_loop_seconds(outputs, wrt, n, hidden, sample, rng, repeats):
    """Time one backward pass per sampled output coordinate of each layer; scale to all n * hidden per layer."""
    total_wall = total_cpu = 0.0
    per_layer = []
    for out, x in zip(outputs, wrt):
        coords = [(rng.randrange(n), rng.randrange(hidden)) for _ in range(sample)]

        def loop(coords=coords, out=out, x=x):
            for j, c in coords:
                torch.autograd.grad(out[0, j, c], x, retain_graph=True)

        loop()  # warm up
        _, wall, cpu = best_of(loop, repeats)
        scale = n * hidden / sample
        per_layer.append(wall / sample * 1000)
        total_wall += wall * scale
        total_cpu += cpu * scale
    return total_wall, total_cpu, per_layer


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--probes", type=int, nargs="+", default=[DEFAULT_PROBES])
    parser.add_argument("--sample", type=int, default=48, help="sampled output coordinates per layer and contribution")
    parser.add_argument("--repeats", type=int, default=2, help="timing repeats (best is kept)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    lm = load_model(args.model)
    enc = encode(lm, *PAIR)
    f = lm.facts
    print(
        f"model {f.name}: {f.n_layers} layers x {f.n_heads} heads, hidden {f.hidden_size}; input of n = {enc.n} tokens; "
        f"torch threads {torch.get_num_threads()}"
    )

    hidden_token_attribution(lm, encode(lm, "Warm up."), mode="exact")
    exact, exact_wall, exact_cpu = timed(lambda: hidden_token_attribution(lm, enc, mode="exact"))
    plain, plain_wall, plain_cpu = timed(lambda: hidden_token_attribution(lm, enc, mode="exact", linearise=False))

    rng = random.Random(0)
    (outs, wrt), (outs_prev, leaves) = reverse_graphs(lm, enc)
    n, hidden, reps = enc.n, f.hidden_size, args.repeats
    in_wall, in_cpu, in_layers = reverse_loop_seconds(outs, wrt, n, hidden, args.sample, rng, reps)
    prev_wall, prev_cpu, prev_layers = reverse_loop_seconds(outs_prev, leaves, n, hidden, args.sample, rng, reps)
    stacked = torch.stack(outs)[:, 0:1]  # [layers, 1, n, hidden] as one tensor
    st_wall, st_cpu, st_layers = reverse_loop_seconds(list(stacked), wrt, n, hidden, args.sample, rng, reps)

    print(
        f"\nReverse loops: {f.n_layers} x {n} x {hidden} = {f.n_layers * n * hidden} backward passes per contribution, "
        f"timed on {args.sample} sampled output coordinates per layer and scaled to all of them."
    )
    print("  ms per backward pass, layers 1..L")
    print("    input contribution, one tensor per layer:   " + " ".join(f"{t:6.2f}" for t in in_layers))
    print("    input contribution, layers stacked:         " + " ".join(f"{t:6.2f}" for t in st_layers))
    print("    previous-layer contribution:                " + " ".join(f"{t:6.2f}" for t in prev_layers))
    loops = [
        ("reverse loop, per-layer graphs", in_wall + prev_wall, in_cpu + prev_cpu),
        ("reverse loop, stacked outputs", st_wall + prev_wall, st_cpu + prev_cpu),
    ]
    rows = [(name, wall, cpu, None, None) for name, wall, cpu in loops]
    rows.append(
        (
            "exact, model's own layers (jvp)",
            plain_wall,
            plain_cpu,
            pearson(plain.input, exact.input),
            pearson(plain.previous, exact.previous),
        )
    )
    rows.append(("exact, linearised layers", exact_wall, exact_cpu, 1.0, 1.0))
    for k in args.probes:
        est, wall, cpu = best_of(lambda k=k: hidden_token_attribution(lm, enc, mode="estimate", probes=k), reps)
        rows.append(
            (f"estimate k={k}", wall, cpu, pearson(est.input, exact.input), pearson(est.previous, exact.previous))
        )

    ref_wall, ref_cpu = loops[0][1], loops[0][2]
    print(
        f"largest difference between the two exact paths: input {np.abs(plain.input - exact.input).max():.1e}, "
        f"previous {np.abs(plain.previous - exact.previous).max():.1e}"
    )
    print(
        f"\n{'method':31} {'wall s':>8} {'CPU s':>8} {'loop/x wall':>11} {'loop/x CPU':>10} {'exact/x wall':>12} "
        f"{'exact/x CPU':>11} {'r input':>8} {'r prev':>8}"
    )
    for name, wall, cpu, r_in, r_prev in rows:
        rs = f"{r_in:8.4f} {r_prev:8.4f}" if r_in is not None else f"{'':8} {'':8}"
        print(
            f"{name:31} {wall:8.2f} {cpu:8.2f} {ref_wall / wall:11.1f} {ref_cpu / cpu:10.1f} {exact_wall / wall:12.1f} "
            f"{exact_cpu / cpu:11.1f} {rs}"
        )
    print(
        f"\nloop/x: the per-layer-graph reverse loop's time over the row's time (stacked loop over exact: "
        f"{loops[1][1] / exact_wall:.1f}x wall, {loops[1][2] / exact_cpu:.1f}x CPU)."
    )
    print("\nr input / r prev: Pearson correlation with exact mode over every (layer, head, query, input token) value.")
    print("Targets: exact >= 8x faster than the reverse loop; estimate >= 15x faster than exact with r >= 0.99.")


if __name__ == "__main__":
    main()
