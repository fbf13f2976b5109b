"""Live page against bertviz on the default model: server time from a changed input to all views, and bytes sent.

Run: python -m benchmarks.bench_live [--lengths 20 128 512] [--repeats 3] [--bertviz-repeats 1]
bertviz is not an app dependency: `pip install --no-deps bertviz ipython` (ipython pulls small pure-Python packages;
torch stays as it is).
Targets (issue 3): at every length, our time and our head-view and model-view bytes at most bertviz's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attnlib.core.model import DEFAULT_MODEL, load_model  # noqa: E402
from attnlib.core.runner import encode, model_inputs, run  # noqa: E402
from attnlib.views.head_view import head_view_html  # noqa: E402
from attnlib.views.model_view import model_view_html  # noqa: E402
from attnlib.views.neuron_view import neuron_view_html  # noqa: E402

CLASSROOM = ROOT / "data" / "classroom_single.txt"


def text_of_length(lm, n_tokens: int) -> str:
    """Classroom sentences, word by word, until the input has exactly n tokens (or the model's maximum, truncated)."""
    words = " ".join(CLASSROOM.read_text().split("\n")).split()
    if n_tokens >= lm.facts.max_length:
        return " ".join(words * 2)  # longer than the model takes: truncated to its maximum, as on the page
    chosen: list[str] = []
    for word in words * 4:
        if encode(lm, " ".join(chosen + [word])).n <= n_tokens:
            chosen.append(word)
        if chosen and encode(lm, " ".join(chosen)).n == n_tokens:
            break
    return " ".join(chosen)


def forward_only(lm, text: str):
    """The encoder's forward pass with attentions, on an already tokenized input (what a notebook does)."""
    batch = model_inputs(lm, [encode(lm, text)])
    start = time.perf_counter()
    with torch.inference_mode():
        out = lm.encoder(**batch, output_attentions=True)
    return time.perf_counter() - start, out.attentions


def ours(lm, text: str) -> dict:
    """Our path from a changed input: run (queries and keys captured), then all three views built."""
    start = time.perf_counter()
    r = run(lm, text, capture_qk=True)
    t_run = time.perf_counter()
    head = head_view_html(r.attentions[0], r.tokens, list(range(lm.facts.n_heads)), 0)
    model = model_view_html(r.attentions, r.tokens, (0, 0))
    neuron = neuron_view_html(r.queries[0, 0], r.keys[0, 0], r.tokens, 0, 0, 0, r.attentions[0, 0, 0])
    end = time.perf_counter()
    every_layer = sum(
        len(head_view_html(r.attentions[layer], r.tokens, list(range(lm.facts.n_heads)), layer).encode())
        for layer in range(lm.facts.n_layers)
    )
    return {
        "total": end - start,
        "views": end - t_run,
        "n": r.n,
        "head_bytes": len(head.encode()),
        "head_all_layers_bytes": every_layer,
        "model_bytes": len(model.encode()),
        "neuron_bytes": len(neuron.encode()),
    }


def bertviz_path(lm, text: str) -> dict:
    """bertviz from a changed input: forward pass, then head_view and model_view with html_action='return'."""
    from bertviz import head_view, model_view

    start = time.perf_counter()
    _, attentions = forward_only(lm, text)
    tokens = encode(lm, text).tokens
    t_views = time.perf_counter()
    head = head_view(attentions, tokens, html_action="return").data
    model = model_view(attentions, tokens, html_action="return").data
    end = time.perf_counter()
    result = {
        "total": end - start,
        "views": end - t_views,
        "head_bytes": len(head.encode()),
        "model_bytes": len(model.encode()),
    }
    del head, model
    return result


def fastest(runs: list[dict]) -> dict:
    """The fastest of repeated runs (sizes are the same every time): on a shared machine the minimum is the least noisy."""
    return min(runs, key=lambda r: r["total"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[20, 128, 512])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--bertviz-repeats",
        type=int,
        default=3,
        help="bertviz takes about a minute per view at 512 tokens; it runs at most twice there",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 keeps timings stable on a shared machine: with every core busy, "
        "two threads can make one forward pass 50 times slower)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import bertviz  # noqa: F401
    except ImportError:
        sys.exit("bertviz is not installed: pip install --no-deps bertviz ipython (benchmark only).")
    lm = load_model(DEFAULT_MODEL)
    print(
        f"model {DEFAULT_MODEL}: {lm.facts.n_layers} layers x {lm.facts.n_heads} heads; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    ours(lm, "Warm up the model.")
    rows = []
    for n in args.lengths:
        text = text_of_length(lm, n)
        forwards, mine, theirs = [], [], []
        for r in range(max(args.repeats, args.bertviz_repeats)):  # interleaved, so load changes hit all three alike
            if r < args.repeats:
                forwards.append(forward_only(lm, text)[0])
                mine.append(ours(lm, text))
            if r < (min(args.bertviz_repeats, 2) if n >= 512 else args.bertviz_repeats):
                theirs.append(bertviz_path(lm, text))
        rows.append((mine[0]["n"], min(forwards), fastest(mine), fastest(theirs)))
        print(f"  measured {mine[0]['n']} tokens", flush=True)

    ms, kb = 1000.0, 1024.0
    print()
    print("Time from a changed input to all views built (server side, fastest of the repeats), ms")
    print(
        f"{'tokens':>6} {'forward':>9} {'ours':>9} {'(views)':>9} {'bertviz':>10} {'(views)':>10} {'ours/bertviz':>13}"
    )
    for n, forward, mine, theirs in rows:
        print(
            f"{n:>6} {forward * ms:>9.1f} {mine['total'] * ms:>9.1f} {mine['views'] * ms:>9.1f} "
            f"{theirs['total'] * ms:>10.1f} {theirs['views'] * ms:>10.1f} {mine['total'] / theirs['total']:>13.4f}"
        )
    print()
    print("Bytes sent to the browser, KiB (bertviz also loads require.js, d3 and jQuery from a CDN: not counted)")
    print(
        f"{'tokens':>6} {'head ours':>10} {'bertviz':>12} {'ratio':>8} {'head, all layers':>17} {'ratio':>8} "
        f"{'model ours':>11} {'bertviz':>12} {'ratio':>8} {'neuron ours':>12}"
    )
    for n, _, mine, theirs in rows:
        print(
            f"{n:>6} {mine['head_bytes'] / kb:>10.1f} {theirs['head_bytes'] / kb:>12.1f} "
            f"{mine['head_bytes'] / theirs['head_bytes']:>8.4f} {mine['head_all_layers_bytes'] / kb:>17.1f} "
            f"{mine['head_all_layers_bytes'] / theirs['head_bytes']:>8.4f} {mine['model_bytes'] / kb:>11.1f} "
            f"{theirs['model_bytes'] / kb:>12.1f} {mine['model_bytes'] / theirs['model_bytes']:>8.4f} "
            f"{mine['neuron_bytes'] / kb:>12.1f}"
        )
    met = all(
        m["total"] <= t["total"] and m["head_bytes"] <= t["head_bytes"] and m["model_bytes"] <= t["model_bytes"]
        for _, _, m, t in rows
    )
    print()
    print("ours: run() with queries and keys + head view (one layer, every head) + model view + neuron view.")
    print("'head, all layers': our head-view bytes summed over every layer (bertviz sends all layers at once).")
    print(f"targets met (time and bytes at most bertviz's at every length): {'yes' if met else 'NO'}")


if __name__ == "__main__":
    main()
