"""The long view of an 8,192-token input in Chromium (issue 36: an 8,192-token head view draws in under 3 s), against
today's head view of 512 tokens, side by side in one run.

The views are the library's own HTML (attnlib.views), opened from files in headless Chromium, each round in a new
page; a view is drawn at its first animation frame after the long view's `drawMs` mark (long_view.js) or, for the
head view, after its load event. Its maps are ModernBERT-base's shape (12 heads) of seeded random attention: a local
band (+-64 tokens) and a few far spikes per row, every row summing to 1, max-pooled by attnlib.core.blockwise.reduce_map
block by block as the app does; the 256-row window holds the exact rows. Prints each view's page size and the median
of its draw times (navigation start to drawn).

Run from the repository root: `.venv/bin/python -m benchmarks.bench_long_view [--rounds 5] [--heads 12]`."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.core.blockwise import cell_size, reduce_map  # noqa: E402
from attnlib.views.head_view import head_view_html  # noqa: E402
from attnlib.views.long_view import MAP_WIDTH, MAX_WINDOW, long_view_html  # noqa: E402
from benchmarks.bench_deploy import BROWSER_ARGS, CHROMIUM  # noqa: E402

N = 8192
TARGET_MS = 3000
DRAWN = """async () => {
  if (document.getElementById('map')) {
    while (document.body.dataset.drawMs === undefined) await new Promise(r => setTimeout(r, 5));
  }
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now();
}"""


def rows_of(rng: np.random.Generator, heads: int, first: int, count: int, n: int) -> np.ndarray:
    """Attention-like rows [heads, count, n]: a band of +-64 tokens around the query and 4 far spikes, summing to 1."""
    out = np.full((heads, count, n), 1e-6, np.float32)
    for i in range(count):
        q = first + i
        lo, hi = max(0, q - 64), min(n, q + 65)
        out[:, i, lo:hi] += rng.random((heads, hi - lo), dtype=np.float32) * 0.05
        out[:, i, rng.integers(0, n, (4,))] += 0.2
    return out / out.sum(-1, keepdims=True)


def long_pages(heads: int) -> dict[str, str]:
    """The long view of N tokens: the reduced map alone, and with a window of MAX_WINDOW rows."""
    rng = np.random.default_rng(0)
    cell = cell_size(N, MAP_WIDTH)
    pooled = np.zeros((heads, N // cell, N // cell), np.float32)
    block = 512
    for first in range(0, N, block):  # block by block, as reduced_maps does
        pooled[:, first // cell : (first + block) // cell] = reduce_map(
            rows_of(rng, heads, first, block, N), MAP_WIDTH
        )[0]
    labels = [f"tok{i}" for i in range(N)]
    start = N // 2
    window = rows_of(np.random.default_rng(1), heads, start, MAX_WINDOW, N)
    every = list(range(heads))
    return {
        f"long view, {N} tokens, map": long_view_html(pooled, cell, labels, every, 0),
        f"long view, {N} tokens, map + {MAX_WINDOW}-row window": long_view_html(
            pooled, cell, labels, every, 0, window, (start, start + MAX_WINDOW)
        ),
    }


def head_page(heads: int, n: int = 512) -> dict[str, str]:
    """Today's head view of n tokens, every head."""
    maps = rows_of(np.random.default_rng(2), heads, 0, n, n)
    return {f"head view, {n} tokens": head_view_html(maps, [f"tok{i}" for i in range(n)], list(range(heads)), 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heads", type=int, default=12, help="heads drawn (ModernBERT-base: 12)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    pages = head_page(args.heads) | long_pages(args.heads)
    folder = Path(tempfile.mkdtemp(prefix="bench-long-view-"))
    files = {}
    for k, (name, html) in enumerate(pages.items()):
        files[name] = folder / f"view{k}.html"
        files[name].write_text(html, encoding="utf-8")
    times: dict[str, list[float]] = {name: [] for name in pages}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        for _ in range(args.rounds):
            for name, path in files.items():  # in turns, so that load on the machine falls on each alike
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(path.as_uri(), wait_until="load")
                times[name].append(page.evaluate(DRAWN))
                page.close()
        browser.close()
    print(f"{args.heads} heads, {args.rounds} rounds, median of navigation start to drawn (target {TARGET_MS} ms)")
    print(f"{'view':<48} {'page KB':>8} {'ms':>8}")
    for name, html in pages.items():
        print(f"{name:<48} {len(html.encode()) / 1024:>8.0f} {statistics.median(times[name]):>8.0f}")


if __name__ == "__main__":
    main()
