"""Benchmark what the prediction-level analyses (METHODS §21) cost on a random decoder of GPT-2 small's shape (12
layers, 12 heads, hidden 768, 2,048 positions), built from transformers' GPT2Config in this process; ratios side by side
in one run, each against the plain forward pass of the same input.

Run: python -m benchmarks.bench_predictions [--repeats R] [--threads T] [--sections routes ...]
Sections (SECTIONS; one function each, so another part adds its own):
- routes: the whole route graph of a 128-token input (attnlib.analyses.routes.input_graph: one pass capturing every
  layer's parts, every attention and feed-forward node's contributions, the graph above tau) against its forward pass,
  target <= 3x, with the L1 kernel that ran (compiled: torch.compile's fused kernel, its first compilation timed apart;
  plain: the same arithmetic in torch); the corpus route frequency (every position's route of every input) of 40 EWT
  dev sentences against the same inputs' forward passes, target <= 4x; and the peak resident memory of the route graph
  of one 2,048-token input in a fresh process (block-wise, METHODS §19), target <= 1.5 GB, beside the model's own eager
  forward pass of it in another.
- lens: the whole `lens` analysis of a 128-token input (every node's table, every component's attribution and every
  head's readout at the last position, the prediction) against the model's own forward pass with its LM head at every
  position, target <= 2x.
Interleaved, best of the repeats (the machine is shared)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import best_of_interleaved, ewt_dev, peak_resident_mb, saved_decoder  # noqa: E402

POSITIONS = 2048  # the decoder takes the memory measure's 2,048 tokens


def encoded_of_length(lm, n: int):
    """An Encoded input of exactly n tokens: EWT dev's text, tokenized and cut."""
    from dataclasses import replace

    from attnlib.core.runner import encode

    text = " ".join(" ".join(s.text_a) for s in ewt_dev(400))
    e = encode(lm, text)
    assert e.n >= n, f"EWT dev gives only {e.n} tokens"
    cut = {k: getattr(e, k)[:n] for k in ("input_ids", "tokens", "segments", "word_ids", "cls_mask", "sep_mask",
                                          "special_mask")}  # fmt: skip
    return replace(e, **cut)


def forward(lm, encoded) -> Callable[[], None]:
    """One plain forward pass of the input (the base model, as the graph's pass runs it)."""
    import torch

    from attnlib.core.runner import model_inputs

    batch = model_inputs(lm, [encoded])

    def run() -> None:
        with torch.inference_mode():
            lm.encoder(**batch)

    return run


def routes_section(lm, args) -> None:
    """The routes' three targets (module docstring)."""
    import torch

    from attnlib.analyses.routes import RoutesOptions, fill_routes, input_graph, route_accumulators, route_work
    from attnlib.core.blockwise import BLOCKWISE_FROM
    from attnlib.core.corpus import CorpusInput
    from attnlib.core.runner import encode
    from attnlib.stats.routes import choose_kernel

    encoded = encoded_of_length(lm, 128)
    start = time.perf_counter()
    made = input_graph(lm, encoded, 0.04, "renormalise", "auto")  # the first call compiles the kernel where it can
    first = time.perf_counter() - start
    print(f"route graph, 128 tokens: kernel {made.kernel}; first call (compilation included) {first:.1f} s")
    runs = {
        "forward pass": forward(lm, encoded),
        "route graph": lambda: input_graph(lm, encoded, 0.04, "renormalise", "auto"),
        "route graph, plain kernel": lambda: input_graph(lm, encoded, 0.04, "renormalise", "plain"),
    }
    best = best_of_interleaved(runs, args.repeats)
    base = best["forward pass"]
    for name, seconds in best.items():
        print(f"  {name:<28} {seconds:8.3f} s  {seconds / base:6.2f}x")
    print(f"  target: route graph <= 3x the forward pass ({'met' if best['route graph'] <= 3 * base else 'NOT met'})")

    sentences = [CorpusInput(" ".join(s.text_a)) for s in ewt_dev(args.corpus)]
    encoded_all = [encode(lm, s.text_a) for s in sentences]
    options = RoutesOptions()
    total = sum(e.n for e in encoded_all)
    work = sum(route_work(lm, e.n) for e in encoded_all)
    passes = [forward(lm, e) for e in encoded_all]

    def corpus_forward() -> None:
        for run in passes:
            run()

    def corpus_routes() -> None:
        fill_routes(lm, sentences, route_accumulators(lm, options), 32, None, options)

    best = best_of_interleaved({"forward passes": corpus_forward, "route frequency": corpus_routes}, args.repeats)
    ratio = best["route frequency"] / best["forward passes"]
    print(f"\ncorpus route frequency, {len(sentences)} EWT dev sentences ({total} tokens, one pass each; kernel "
          f"{choose_kernel('auto', work)}, chosen once for the corpus):")  # fmt: skip
    for name, seconds in best.items():
        print(f"  {name:<28} {seconds:8.3f} s  {seconds / best['forward passes']:6.2f}x")
    print(f"  target: <= 4x the forward passes ({'met' if ratio <= 4 else 'NOT met'})")

    def child(measure: str) -> dict:
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", "2048", "--measure", measure, "--folder", args.folder,
             "--threads", str(torch.get_num_threads())],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(out.stdout.strip().splitlines()[-1])

    graph, forward_alone = child("routes"), child("forward")
    print(f"\nroute graph of one 2,048-token input (block-wise above {BLOCKWISE_FROM} tokens), a fresh process: peak "
          f"resident {graph['peak_mb']:.0f} MB; before it: the loaded model {graph['model_mb']:.0f} MB, the kernel "
          f"compiled on a 32-token input {graph['compiled_mb']:.0f} MB; {graph['seconds']:.1f} s (kernel "
          f"{graph['kernel']}), {graph['edges']} attention edges above tau")  # fmt: skip
    print(f"  the model's own eager forward pass of the same input, another fresh process: peak resident "
          f"{forward_alone['peak_mb']:.0f} MB (the loaded model {forward_alone['model_mb']:.0f} MB)")  # fmt: skip
    print(
        f"  target: <= 1.5 GB ({'met' if graph['peak_mb'] <= 1536 else 'NOT met'}; the graph's own: "
        f"{graph['peak_mb'] - graph['compiled_mb']:.0f} MB over the loaded model and compiled kernel)"
    )


def memory_child(n: int, folder: str, measure: str) -> None:
    """In a fresh process: the peak resident memory of the saved decoder loaded, then of the route graph of one n-token
    input (measure "routes", after compiling its kernel on a 32-token input) or of the model's own eager forward pass
    of it (measure "forward"); one JSON line."""
    from attnlib.analyses.routes import input_graph
    from attnlib.core.model import load_model

    lm = load_model(folder)
    model_mb = peak_resident_mb()
    encoded = encoded_of_length(lm, n)
    if measure == "forward":
        forward(lm, encoded)()
        print(json.dumps(dict(peak_mb=peak_resident_mb(), model_mb=model_mb)))
        return
    input_graph(lm, encoded_of_length(lm, 32), 0.04, "renormalise", "compiled")  # the kernel compiled (or loaded)
    compiled_mb = peak_resident_mb()
    start = time.perf_counter()
    made = input_graph(lm, encoded, 0.04, "renormalise", "auto")
    seconds = time.perf_counter() - start
    edges = sum(len(layer.attention.weight) for layer in made.graph.layers)
    print(json.dumps(dict(peak_mb=peak_resident_mb(), model_mb=model_mb, compiled_mb=compiled_mb, seconds=seconds,
                          kernel=made.kernel, edges=edges)))  # fmt: skip


def lens_section(lm, args) -> None:
    """The lens's target (module docstring)."""
    import torch

    from attnlib.analyses.lens import LensOptions, compute_lens
    from attnlib.core.corpus import CorpusInput
    from attnlib.core.runner import model_inputs

    encoded = encoded_of_length(lm, 128)
    batch = model_inputs(lm, [encoded])
    item = CorpusInput(lm.tokenizer.decode(encoded.input_ids))

    def forward_with_head() -> None:
        with torch.inference_mode():
            lm.causal_lm(**batch, use_cache=False)

    def lens() -> None:
        compute_lens(lm, item, LensOptions())

    forward_with_head(), lens()  # warm up
    best = best_of_interleaved({"forward pass": forward_with_head, "lens": lens}, args.repeats)
    ratio = best["lens"] / best["forward pass"]
    print(f"lens at {encoded.n} tokens: forward pass {best['forward pass']:.3f} s, lens (every node's table, every "
          f"component's attribution, every head's readout) {best['lens']:.3f} s: {ratio:.2f}x (target <= 2x)")  # fmt: skip


SECTIONS: dict[str, Callable] = {"routes": routes_section, "lens": lens_section}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--corpus", type=int, default=40, help="EWT dev sentences of the corpus measure")
    parser.add_argument("--sections", nargs="*", default=list(SECTIONS), choices=list(SECTIONS))
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--folder", default=None, help=argparse.SUPPRESS)  # the memory child's saved decoder
    parser.add_argument("--measure", default="routes", help=argparse.SUPPRESS)  # the memory child's: routes, forward
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child is not None:
        memory_child(args.memory_child, args.folder, args.measure)
        return
    with tempfile.TemporaryDirectory() as folder:
        lm = saved_decoder(Path(folder), POSITIONS)
        args.folder = folder
        print(f"random GPT-2-small-shaped decoder (12 x 12, hidden 768), {torch.get_num_threads()} torch threads, "
              f"best of {args.repeats} interleaved runs\n")  # fmt: skip
        for name in args.sections:
            print(f"== {name}")
            SECTIONS[name](lm, args)


if __name__ == "__main__":
    main()
