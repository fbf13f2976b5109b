"""Benchmark corpus search (METHODS §16) on EWT dev: building the index against one forward pass over the same
sentences, one query over the index (p50/p95 of 100 queries: search alone, and with the query's own forward pass),
the index's memory, and exact search with NumPy against faiss-cpu (when installed) at EWT dev's size and 10x it.

Run: python -m benchmarks.bench_search [--limit N] [--repeats R] [--layer L]
     python -m benchmarks.bench_search --browser [--limit N]: the Live page on a server pinned to one CPU (as the
     classroom server), Chromium clicking tokens of the head view once the index is built: click to matches on screen.
Targets (issue 28): building at most 1.2x the forward pass; a query under 50 ms (p95 of 100); float16, one layer:
about positions x 384 x 2 bytes.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from attnlib.core.batches import accumulate
from attnlib.search.by_example import CorpusIndex, IndexOptions, build_index, cosine_scores, query_of, top_k
from benchmarks import default_model_on_ewt_dev

QUERIES = [  # (text, token): a teacher's queries, cycled over the 100
    ("The cat sat on the mat.", 1),
    ("She read the book yesterday.", 4),
    ("We walked to the station in the rain.", 3),
    ("He bought a new car.", 3),
    ("They painted the house blue.", 4),
]


def time_build(lm, sentences, layer: int, repeats: int, batch_size: int) -> dict[str, float]:
    """Best wall time of the forward pass alone (the engine's batched pass, no statistic) and of building the
    index in mode hidden and mode heads (every head), interleaved."""
    best: dict[str, float] = {}
    runs = {
        "forward pass (engine, no statistic)": lambda: accumulate(lm, sentences, [], batch_size=batch_size),
        f"index: layer {layer} output (hidden)": lambda: build_index(lm, sentences, IndexOptions(layer=layer)),
        f"index: layer {layer}, every head (heads)": lambda: build_index(
            lm, sentences, IndexOptions(layer=layer, heads="all")
        ),
    }
    indexes = {}
    for _ in range(repeats):
        for name, make in runs.items():
            start = time.perf_counter()
            made = make()
            seconds = time.perf_counter() - start
            best[name] = min(best.get(name, np.inf), seconds)
            if isinstance(made, CorpusIndex):
                indexes[name] = made
    return best, indexes


def time_queries(lm, index, n: int = 100) -> dict[str, np.ndarray]:
    """Milliseconds of n searches over the index: the search alone (scores, top 20, summaries) and with the query's
    forward pass."""
    alone, whole = [], []
    queries = [query_of(lm, text, None, token, index.options) for text, token in QUERIES]
    for i in range(n):
        start = time.perf_counter()
        index.search(queries[i % len(queries)], k=20)
        alone.append(time.perf_counter() - start)
        text, token = QUERIES[i % len(QUERIES)]
        start = time.perf_counter()
        index.search(query_of(lm, text, None, token, index.options), k=20)
        whole.append(time.perf_counter() - start)
    return {"search alone": np.array(alone) * 1e3, "query's forward pass + search": np.array(whole) * 1e3}


def time_exact_against_faiss(vectors: np.ndarray, query: np.ndarray, repeats: int = 30) -> list[tuple]:
    """ms per query (median) of NumPy's exact scores + top 20 against faiss's exact flat indexes (float32 and
    float16 storage), on these vectors and on 10x as many; faiss's top 20 checked against NumPy's."""
    try:
        import faiss
    except ImportError:
        return []
    rows = []
    q = query[None].astype(np.float32)
    for scale in (1, 10):
        noise = np.random.default_rng(0).normal(0, 1e-3, (len(vectors) * scale, vectors.shape[1])) if scale > 1 else 0
        x16 = (np.tile(vectors, (scale, 1)) + noise).astype(np.float16)  # 10x: the rows again, a little moved
        x32 = x16.astype(np.float32)
        flat = faiss.IndexFlatIP(x32.shape[1])
        flat.add(x32)
        sq = faiss.IndexScalarQuantizer(x32.shape[1], faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        sq.train(x32[:1000])
        sq.add(x32)
        expected = top_k(cosine_scores(x16, query), 20)
        cases = {
            "numpy, float16 rows (widened per block)": lambda x=x16: top_k(cosine_scores(x, query), 20),
            "numpy, float32 rows": lambda x=x32: top_k(cosine_scores(x, query), 20),
            "faiss IndexFlatIP (float32)": lambda f=flat: f.search(q, 20)[1][0],
            "faiss ScalarQuantizer fp16": lambda f=sq: f.search(q, 20)[1][0],
        }
        for name, fn in cases.items():
            got = fn()
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            same = len(set(map(int, got)) & set(map(int, expected)))
            rows.append((len(x16), name, float(np.median(times)) * 1e3, same))
    return rows


CLICK_TO_MATCHES = """([piece, k]) => !document.querySelector('[data-testid="stStatusWidget"]')
  && new URLSearchParams(location.search).get('token') === String(piece)
  && (k === 0 || ([...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
      .some(c => c.innerText.startsWith(`Query: piece ${piece} `))
    && document.querySelectorAll('.attn-strip').length === k))"""


def head_view_frame(page, timeout_s: float = 300):
    """The head view's frame once its canvas is there."""
    from playwright.sync_api import Error

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for frame in page.frames:
            try:
                if frame != page.main_frame and frame.query_selector("#cv"):
                    return frame
            except Error:  # a rerun replaced the frame while it was read
                continue
        page.wait_for_timeout(200)
    raise RuntimeError("the head view never appeared")


def click_tokens(page, pieces: range, k: int) -> list[float]:
    """Seconds from a click on each piece (1-based) in the head view until the page has finished (k > 0: until its
    k matches are drawn)."""
    seconds = []
    for piece in pieces:
        frame = head_view_frame(page)
        start = time.perf_counter()
        frame.locator("#cv").click(position={"x": 20, "y": 4 + 18 * (piece - 1) + 9})
        page.wait_for_function(CLICK_TO_MATCHES, arg=[piece, k], timeout=120_000)
        seconds.append(time.perf_counter() - start)
    return seconds


def browser_queries(limit: int | None, clicks: int = 8, k: int = 20) -> None:
    """Seconds from a click on a token in the head view to its k matches drawn, the server on one CPU (taskset -c 0),
    after a first search built the index; and the server's peak resident memory."""
    from playwright.sync_api import sync_playwright

    from benchmarks.bench_deploy import BROWSER_ARGS, CHROMIUM, ROOT, Server

    text = "The children played in the park after school because the sun was finally shining."
    query = f"a={text.replace(' ', '+')}&b=&layer=3&find=1&corpus=ewt-dev&limit={limit or 100000}&k={k}&token=2"
    server = Server(ROOT / "test-output" / "bench-search-server.log", prefix=("taskset", "-c", "0"))
    try:
        server.health_seconds()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 2400})
            start = time.perf_counter()
            page.goto(f"{server.url}/?{query}")
            page.wait_for_function(CLICK_TO_MATCHES, arg=[2, k], timeout=1_800_000)
            built = time.perf_counter() - start
            seconds = click_tokens(page, range(3, 3 + clicks), k)
            plain = browser.new_page(viewport={"width": 1400, "height": 2400})  # the same clicks, the search off
            plain.goto(f"{server.url}/?{query.replace('find=1', 'find=0')}")
            plain.wait_for_function(CLICK_TO_MATCHES, arg=[2, 0], timeout=600_000)
            baseline = click_tokens(plain, range(3, 3 + clicks), 0)
            browser.close()
    finally:
        server.stop()
    print(f"Live page, server on one CPU, EWT dev ({limit or 'all'} sentences), k = {k}:")
    print(f"first search (loads the model's page, builds the index): {built:.1f} s")
    print(f"click on a token to its matches drawn: median {np.median(seconds):.2f} s, max {max(seconds):.2f} s "
          f"over {len(seconds)} clicks ({', '.join(f'{x:.2f}' for x in seconds)})")  # fmt: skip
    print(f"the same clicks with the search off (the page's own rerun): median {np.median(baseline):.2f} s; "
          f"the search adds {np.median(seconds) / np.median(baseline):.2f}x")  # fmt: skip
    print(f"server peak resident memory: {server.peak_mb:.0f} MB (with its children)")


def query_table(lm, indexes: dict) -> None:
    """p50 and p95 of 100 queries over each index (and of a 3-head subset of a heads index)."""
    print("\n| one query over the index (100 queries, k = 20) | p50 ms | p95 ms |\n|---|---|---|")
    for mode, index in indexes.items():
        for name, ms in time_queries(lm, index).items():
            print(f"| {mode}: {name} | {np.percentile(ms, 50):.1f} | {np.percentile(ms, 95):.1f} |")
        if index.heads:
            subset = query_of(lm, QUERIES[0][0], None, QUERIES[0][1], index.options)
            times = []
            for _ in range(100):
                start = time.perf_counter()
                index.search(subset, k=20, heads=[1, 4, 7])
                times.append((time.perf_counter() - start) * 1e3)
            print(f"| {mode}, heads 1,4,7 of it: search alone | {np.percentile(times, 50):.1f} | "
                  f"{np.percentile(times, 95):.1f} |")  # fmt: skip


def queries_over_files(paths: list[str]) -> None:
    """Queries over saved indexes: their size on disk and in memory, then query_table."""
    from pathlib import Path

    from attnlib.core.model import load_model

    lm = load_model()
    indexes = {}
    print("| index file | positions | file (MB) | vectors in memory (MB) | all in memory (MB) |\n|---|---|---|---|---|")
    for path in paths:
        index = CorpusIndex.load(path)
        indexes[index.options.describe()] = index
        print(f"| {Path(path).name} | {len(index)} | {Path(path).stat().st_size / 1e6:.1f} | "
              f"{index.vectors.nbytes / 1e6:.1f} | {index.nbytes / 1e6:.1f} |")  # fmt: skip
    query_table(lm, indexes)
    faiss_table(lm, next(iter(indexes.values())))


def faiss_table(lm, index: CorpusIndex) -> None:
    """Exact search with NumPy against faiss-cpu's flat indexes, when faiss is installed."""
    query = query_of(lm, QUERIES[0][0], None, QUERIES[0][1], index.options).vector
    rows = time_exact_against_faiss(index.vectors, query)
    if not rows:
        print("\n(faiss-cpu is not installed: `pip install faiss-cpu` adds its timings)")
        return
    print("\n| positions | exact top 20 by | ms per query (median) | same top 20 as NumPy |\n|---|---|---|---|")
    for n, name, ms, same in rows:
        print(f"| {n} | {name} | {ms:.1f} | {same}/20 |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="EWT dev sentences (default: all 2001)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--layer", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--browser", action="store_true", help="the Live page on one CPU, in Chromium (see above)")
    parser.add_argument("--index", nargs="+", default=None, help="index files (`attnlib index --out`): queries only")
    args = parser.parse_args()
    if args.browser:
        browser_queries(args.limit)
        return
    if args.index:
        queries_over_files(args.index)
        return
    lm, sentences = default_model_on_ewt_dev(args.limit, args.batch_size, args.repeats)
    best, indexes = time_build(lm, sentences, args.layer, args.repeats, args.batch_size)
    forward = best["forward pass (engine, no statistic)"]
    print("| run | seconds | ratio to the forward pass |\n|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.1f} | {seconds / forward:.2f}x |")
    hidden, heads = indexes.values()
    print(f"\nindex: {len(hidden)} positions of {hidden.n_inputs} inputs, {hidden.vectors.shape[1]} dimensions")
    print("\n| index | vectors (MB) | everything else (MB) | in memory (MB) |\n|---|---|---|---|")
    for name, index in indexes.items():
        total = index.nbytes / 1e6
        print(f"| {name} | {index.vectors.nbytes / 1e6:.1f} | {total - index.vectors.nbytes / 1e6:.1f} | {total:.1f} |")
    query_table(lm, {"hidden": hidden, "heads, every head": heads})
    faiss_table(lm, hidden)


if __name__ == "__main__":
    main()
