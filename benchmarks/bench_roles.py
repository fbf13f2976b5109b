"""Benchmark the head roles of METHODS §20 on a random decoder of GPT-2 small's shape (12 layers, 12 heads, hidden 768,
vocabulary 50,257: 124M parameters), side by side in one run.

Run: python -m benchmarks.bench_roles [--repeats R] [--threads T]
- probe: the default probe (10 sequences of b + 2 x 50 tokens) through the model and its LM head, batched, plain
  (what any score needs), against `probe_pass` (the same passes capturing every attention map, then the induction,
  duplicate-token and previous-token scores, first_share and the per-position losses). Target: <= 1.3x.
- copying: every head's OV copying score from the weights (`ov_weights` then `copying_scores`, 144 heads). Target:
  < 2 s.
Interleaved, best of the repeats (the machine is shared)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import best_of_interleaved, saved_decoder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    import torch

    from attnlib.analyses.roles import RolesOptions, _forward, _lm_head, make_probe, probe_pass, token_losses
    from attnlib.core.hooks import ATTENTION, hooks
    from attnlib.core.ov_circuit import ov_weights
    from attnlib.stats.roles import copying_scores, probe_scores

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        lm = saved_decoder(Path(folder))
        probe = make_probe(lm, RolesOptions())
        head = _lm_head(lm)

        def plain() -> None:
            with torch.inference_mode():
                _forward(lm, probe.ids, head)

        def scored() -> None:
            probe_pass(lm, probe)

        with hooks(lm, ATTENTION) as cache, torch.inference_mode():
            logits = _forward(lm, probe.ids, head)
        captured = list(cache.attn)

        def extra() -> None:  # what probe_pass adds to a pass that captures the maps: stack, scores, losses
            maps = torch.stack(captured, dim=1).float().cpu().numpy()
            probe_scores(maps, probe)
            token_losses(logits, probe.ids)

        def copying() -> None:
            weights = ov_weights(lm)
            copying_scores(weights.circuit, weights.values, weights.outputs)

        runs = {"probe: plain forward + LM head": plain, "probe: probe_pass (maps, scores, losses)": scored,
                "probe: its extra work alone (stack, scores, losses)": extra, "copying: every head (144)": copying}  # fmt: skip
        plain()  # warm-up
        best = best_of_interleaved(runs, args.repeats)
    print(f"GPT-2 small's shape (random), {torch.get_num_threads()} torch threads, best of {args.repeats} interleaved")
    print(
        f"probe: {probe.ids.shape[0]} sequences x {probe.ids.shape[1]} tokens (s = {probe.repeat_length}, b = {probe.b})"
    )
    for name, seconds in best.items():
        print(f"{name:52s} {seconds:8.3f} s")
    ratio = best["probe: probe_pass (maps, scores, losses)"] / best["probe: plain forward + LM head"]
    print(f"probe scores / plain probe passes: {ratio:.2f}x (target <= 1.3x)")
    bound = 1 + best["probe: its extra work alone (stack, scores, losses)"] / best["probe: plain forward + LM head"]
    print(f"plain passes + the extra work alone: {bound:.2f}x (the ratio without the load's noise)")
    print(f"copying score of every head: {best['copying: every head (144)']:.2f} s (target < 2 s)")


if __name__ == "__main__":
    main()
