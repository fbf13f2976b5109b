"""The classroom benchmark (issue 15): every page finished for one new visitor, and for 8 arriving at once, with the
server pinned to one CPU (`taskset -c 0`); the server's peak resident memory with 8 visitors on every page.

Targets (after the model has loaded): <= 3 s for one visitor, <= 10 s for each of 8, peak RSS < 1 GB.
- One visitor: a new Chromium context (no cache), free to use both CPUs as on a student's laptop (`--pin-browser` keeps
  it on CPU 1, off the server's CPU: about twice as slow here, Chromium's processes then share one CPU); the median of
  `--repeat` such visits (3). A page is finished when its main figure or table is on screen, every figure on the first
  screen is drawn and Streamlit's status widget is gone (all true for 0.5 s, timed from the start of that stable
  stretch); the time runs from navigation start (`performance.now()` in the page).
- Eight visitors: in a classroom each student's browser runs on their own machine and only the server is shared.
  Eight new sessions open the page at once over Streamlit's own websocket protocol (a BackMsg rerun per session, as a
  browser sends), and each is timed until its script_finished message: the server's share under that load. Each of
  the 8 then waits that long plus the browser's own share of a single visit (end-to-end minus the server's run alone),
  which the table prints as the estimate. `--browser-crowd` also opens 8 Chromium pages at once on this 2-CPU machine
  (they then share one CPU: a measure of this machine, not of a classroom).
Exits non-zero only on errors (an exception box, a page that never finished), not on missed targets.

Run from the repository root: `.venv/bin/python -m benchmarks.bench_classroom [--visitors 8] [--only tour-1 live]`.
Writes the figures to benchmarks/results/classroom.json as well."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from benchmarks.bench_deploy import BROWSER_ARGS, CHROMIUM, ROOT, Server

BROWSER_ON_CPU_1 = Path(__file__).with_name("chromium_on_cpu1.sh")  # --pin-browser: the browser off the server's CPU

TARGET_ONE_S = 3.0
TARGET_EIGHT_S = 10.0
TARGET_RSS_MB = 1024.0
STABLE_MS = 500  # the finished state must hold this long (Streamlit may show its status widget a moment late)
PLOT, TABLE, HEAD_VIEW, BUTTON = ".js-plotly-plot", ".attn-table", "iframe", "[data-testid='stButton']"
FIGURES = "[data-testid='stMain'] .stBidiComponent"  # the page's figures and tables (ui/plotly_figure, ui/data_table)
DRAWN = ".js-plotly-plot[data-drawn], .attn-table table, canvas[data-drawn], .attn-nothing-to-draw"  # in one of them once it is drawn


@dataclass(frozen=True)
class PageCase:
    """One page as a new visitor opens it: a name, its path and query, and the CSS selector of its main element."""

    name: str
    path: str
    main: str


TOUR_MAIN = {
    1: HEAD_VIEW,
    2: PLOT,
    3: PLOT,
    4: PLOT,
    5: TABLE,
    6: PLOT,
    7: PLOT,
    8: PLOT,
    9: PLOT,
}  # app_pages/tour/page.py, render_* per step
PAGES: tuple[PageCase, ...] = (
    *(PageCase(f"tour-{n}", f"/tour?step={n}", main) for n, main in TOUR_MAIN.items()),
    PageCase("live", "/", HEAD_VIEW),
    PageCase("special-tokens", "/special-tokens", PLOT),
    PageCase("dependency-heads", "/dependency-heads", TABLE),
    PageCase("local-global", "/local-global", PLOT),
    PageCase("head-importance", "/head-importance", PLOT),
    PageCase("head-roles", "/head-roles", PLOT),  # the role map
    PageCase("predictions", "/predictions", PLOT),  # the route graph (the default model has no LM head: routes alone)
    PageCase("queries-keys", "/queries-keys", "canvas"),  # the grid of every head (one canvas) on the first screen
    PageCase("report", "/report", BUTTON),  # builds on request: its first screen is the choice of parts
)

# Injected into every new page: poll until the main element is laid out, every figure on the first screen is drawn
# (ui/widgets/plotly_figure.js marks a drawn plot; it draws the figures below the screen as they come near) and no status
# widget shows, and keep the moment that state began once it has held STABLE_MS; `window.__benchFinished` is then ms
# since navigation start.
FINISH_WATCH = """
(() => {
  const main = %s, stableMs = %d, figures = %s, drawn = %s;
  const onScreen = (el) => { const r = el.getBoundingClientRect(); return r.top < innerHeight && r.bottom >= 0; };
  const pending = () => [...document.querySelectorAll(figures)].some(
    (el) => onScreen(el) && el.querySelector(drawn) === null);
  let since = null;
  const tick = () => {
    const el = document.querySelector(main);
    const shown = el !== null && el.getBoundingClientRect().height > 0;
    const running = document.querySelector('[data-testid="stStatusWidget"]') !== null;
    if (shown && !running && !pending()) {
      if (since === null) since = performance.now();
      if (performance.now() - since >= stableMs) { window.__benchFinished = since; return; }
    } else {
      since = null;
    }
    setTimeout(tick, 25);
  };
  tick();
})();
"""


def watch_script(main: str) -> str:
    """FINISH_WATCH for one page's main-element selector."""
    return FINISH_WATCH % (json.dumps(main), STABLE_MS, json.dumps(FIGURES), json.dumps(DRAWN))


FINISHED = "() => window.__benchFinished !== undefined"
EXCEPTION = "[data-testid='stException']"


@dataclass
class Visit:
    """One visitor's page: seconds from navigation start to finished (None if it never finished), and any problem."""

    seconds: float | None
    problem: str | None = None


@dataclass
class PageTimes:
    """A page's figures: one visitor in a browser; the server's run alone and for each of several at once."""

    name: str
    one: Visit  # browser, end to end
    server_one: Visit = field(default_factory=lambda: Visit(None, "not measured"))
    server_many: list[Visit] = field(default_factory=list)
    crowd: list[Visit] = field(default_factory=list)  # --browser-crowd: that many browsers at once on this machine

    def browser_share(self) -> float | None:
        """Seconds of a single visit that the browser, not the server, takes (JavaScript, layout, figures)."""
        if self.one.seconds is None or self.server_one.seconds is None:
            return None
        return max(self.one.seconds - self.server_one.seconds, 0.0)

    def many_estimate(self) -> list[float]:
        """Each of the crowd: the server's run under that load plus the browser's share of a single visit."""
        share = self.browser_share()
        return [] if share is None else [v.seconds + share for v in self.server_many if v.seconds is not None]


def median_visit(visits: list[Visit]) -> Visit:
    """The median of repeated visits to one page (a single visit on this shared machine varies by about 1 s); a visit
    that did not finish makes the page's result that visit."""
    failed = [v for v in visits if v.seconds is None or v.problem is not None]
    if failed:
        return failed[0]
    return Visit(statistics.median(v.seconds for v in visits if v.seconds is not None))


def _max(visits: list[Visit]) -> float | None:
    done = [v.seconds for v in visits if v.seconds is not None]
    return max(done) if done else None


def summary(times: PageTimes) -> tuple[float | None, float | None, float | None, float | None]:
    """(one visitor s, the server's max over the crowd s, each of the crowd estimated max s, browsers here max s)."""
    estimate = times.many_estimate()
    return times.one.seconds, _max(times.server_many), max(estimate) if estimate else None, _max(times.crowd)


def tree_high_water_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process plus that of each of its children, in MB."""
    process = psutil.Process(pid)
    total_kb = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            status = Path(f"/proc/{p.pid}/status").read_text()
        except OSError:
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return total_kb / 1024


def _cell(value: float | None, target: float) -> str:
    if value is None:
        return f"{'never':>8}  "
    return f"{value:>8.2f}{'*' if value > target else ' '} "


def table(rows: list[PageTimes], visitors: int) -> str:
    """The table: page, 1 visitor s, server with N at once max s, each of N estimated max s (and N browsers here)."""
    crowd = any(row.crowd for row in rows)
    head = f"{'page':<18}{'1 visitor s':>12}{'server alone s':>15}{f'server, {visitors} at once max s':>28}"
    head += f"{f'each of {visitors} max s':>18}" + (f"{f'{visitors} browsers here max s':>26}" if crowd else "")
    lines = [head]
    for row in rows:
        one, server_many, estimate, browsers = summary(row)
        line = f"{row.name:<18}{_cell(one, TARGET_ONE_S):>12}{_cell(row.server_one.seconds, TARGET_ONE_S):>15}"
        line += f"{_cell(server_many, TARGET_EIGHT_S):>28}{_cell(estimate, TARGET_EIGHT_S):>18}"
        lines.append(line + (f"{_cell(browsers, TARGET_EIGHT_S):>26}" if crowd else ""))
    return "\n".join(lines)


# ---------- the browser ------------------------------------------------------------------------------------------


def open_visitor(browser, url: str, case: PageCase):
    """A new browser context (a new visitor, no cookies, no session) navigating to the page; returns (context, page)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(watch_script(case.main))
    page = context.new_page()
    page.goto(url + case.path, wait_until="commit")
    return context, page


def finish(page, timeout_s: float) -> Visit:
    """Wait until the page is finished; its seconds from navigation start, and an exception box if one shows."""
    try:
        page.wait_for_function(FINISHED, timeout=timeout_s * 1000, polling=100)
    except Exception as exc:  # Playwright's TimeoutError and a crashed page alike: never finished
        shown = page.locator(EXCEPTION).count() if not page.is_closed() else 0
        return Visit(None, "exception box" if shown else f"not finished: {type(exc).__name__}")
    seconds = page.evaluate("window.__benchFinished") / 1000
    return Visit(seconds, "exception box" if page.locator(EXCEPTION).count() else None)


def visit_together(browser, url: str, case: PageCase, visitors: int, timeout_s: float) -> list[Visit]:
    """`visitors` new visitors navigate to the page one right after another, then each is waited for."""
    opened = [open_visitor(browser, url, case) for _ in range(visitors)]
    try:
        return [finish(page, timeout_s) for _, page in opened]
    finally:
        for context, _ in opened:
            context.close()


# ---------- the server alone, over Streamlit's websocket protocol --------------------------------------------------


def page_and_query(case: PageCase) -> tuple[str, str]:
    """The page name and query string a browser sends for a case's path ("" is the default page)."""
    path, _, query = case.path.partition("?")
    return path.strip("/"), query


async def server_visit(ws_url: str, case: PageCase, timeout_s: float) -> Visit:
    """A new session asks for the page as a browser does (one rerun BackMsg); seconds until its script_finished."""
    import websockets
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    page, query = page_and_query(case)
    async with websockets.connect(ws_url, subprotocols=["streamlit"], max_size=None) as ws:
        request = BackMsg()
        request.rerun_script.query_string, request.rerun_script.page_name = query, page
        start = time.perf_counter()
        await ws.send(request.SerializeToString())
        problem = None
        while True:
            message = ForwardMsg()
            message.ParseFromString(await asyncio.wait_for(ws.recv(), timeout_s))
            kind = message.WhichOneof("type")
            if kind == "delta" and message.delta.new_element.WhichOneof("type") == "exception":
                problem = f"exception: {message.delta.new_element.exception.message}"
            if kind == "script_finished" and message.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                return Visit(time.perf_counter() - start, problem)  # a run cut short by a rerun is not the end


def server_visits(url: str, case: PageCase, visitors: int, timeout_s: float) -> list[Visit]:
    """`visitors` new sessions asking for the page at once, each timed until its run ends."""
    ws_url = url.replace("http", "ws", 1) + "/_stcore/stream"

    async def together() -> list[Visit]:
        return list(await asyncio.gather(*(server_visit(ws_url, case, timeout_s) for _ in range(visitors))))

    with ThreadPoolExecutor(1) as thread:  # Playwright's sync API keeps an event loop running in this thread
        return thread.submit(asyncio.run, together()).result()


def measure(
    url: str,
    cases: list[PageCase],
    visitors: int,
    timeout_s: float,
    log,
    browser_crowd: bool = False,
    pin_browser: bool = False,
    repeat: int = 3,
) -> list[PageTimes]:
    """Warm the model with one uncounted visit; each page for one browser visitor and for the server alone (each the
    median of `repeat` visits); then the server with `visitors` sessions at once (and, with browser_crowd, that many browsers
    here)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        executable = str(BROWSER_ON_CPU_1) if pin_browser else CHROMIUM
        browser = p.chromium.launch(executable_path=executable, headless=True, args=BROWSER_ARGS)
        try:
            warm = visit_together(browser, url, PageCase("warm-up", "/", HEAD_VIEW), 1, timeout_s)[0]
            log(f"warm-up (Live attention, model load, not counted): {warm.seconds} s {warm.problem or ''}")
            rows = []
            for case in cases:
                ones = [visit_together(browser, url, case, 1, timeout_s)[0] for _ in range(repeat)]
                row = PageTimes(case.name, median_visit(ones))
                row.server_one = median_visit([server_visits(url, case, 1, timeout_s)[0] for _ in range(repeat)])
                rows.append(row)
                log(f"{case.name}: 1 visitor {[v.seconds for v in ones]}, the server alone {row.server_one}")
            for row, case in zip(rows, cases):
                row.server_many = server_visits(url, case, visitors, timeout_s)
                log(f"{case.name}: the server with {visitors} at once {[v.seconds for v in row.server_many]}")
                if browser_crowd:
                    row.crowd = visit_together(browser, url, case, visitors, timeout_s)
                    log(f"{case.name}: {visitors} browsers here {[v.seconds for v in row.crowd]}")
        finally:
            browser.close()
    return rows


# ---------- the exact attribution example --------------------------------------------------------------------------


def exact_added_mb(n_tokens: int) -> tuple[int, float]:
    """(tokens, MB of resident memory added) by an exact attribution with the default model, in this process.

    Each phase runs only its first 2 chunks of directions: a chunk's tensors and the per-token Jacobians are as large
    as in a full run (the running sums are [n, layers, n, heads] floats), so the peak is the same in seconds, not hours.
    """
    import itertools
    import threading

    import attnlib.stats.hta.every_row as attribution
    from attnlib.core.model import DEFAULT_MODEL, load_model
    from attnlib.core.runner import run

    lm = load_model(DEFAULT_MODEL)
    words = ("the committee approved a new budget after a long debate and everyone went home early " * 40).split()
    text = " ".join(words[: n_tokens - 2])
    n = run(lm, text).n
    whole = attribution.direction_chunks
    attribution.direction_chunks = lambda *a, **k: itertools.islice(whole(*a, **k), 2)
    process = psutil.Process()
    base = peak = process.memory_info().rss
    sampling = True

    def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        attribution.attribute(lm, text, mode="exact")
        time.sleep(0.05)
    finally:
        sampling = False
        sampler.join()
        attribution.direction_chunks = whole
    return n, (peak - base) / 2**20


def exact_memory_report(lengths: list[int]) -> None:
    """Each length in a fresh process (so one run's freed memory does not hide the next one's)."""
    from attnlib.core.model import DEFAULT_MODEL, load_model
    from attnlib.stats.hta import exact_seconds

    facts = load_model(DEFAULT_MODEL).facts
    print(f"{'tokens':>7}{'added MB':>10}{'exact_seconds':>15}")
    for length in lengths:
        code = f"from benchmarks.bench_classroom import exact_added_mb; print(*exact_added_mb({length}))"
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        n, added = out.stdout.split()
        print(f"{n:>7}{float(added):>10.0f}{exact_seconds(facts, int(n)):>15.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--visitors", type=int, default=8, help="visitors arriving at once per page (default 8)")
    parser.add_argument("--only", nargs="+", choices=[c.name for c in PAGES], help="measure only these pages")
    parser.add_argument("--repeat", type=int, default=3, help="visits of one visitor per page, the median shown")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds a page may take before it counts as an error"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin the server to CPU 0")
    parser.add_argument(
        "--browser-crowd", action="store_true", help="also open that many Chromium pages at once on this machine"
    )
    parser.add_argument("--pin-browser", action="store_true", help="keep Chromium on CPU 1, off the server's CPU")
    parser.add_argument(
        "--exact-memory",
        type=int,
        nargs="+",
        metavar="TOKENS",
        help="only the memory an exact example of each length adds",
    )
    args = parser.parse_args()
    if args.exact_memory:
        exact_memory_report(args.exact_memory)
        return 0
    cases = [c for c in PAGES if not args.only or c.name in args.only]
    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    pin = () if args.no_pin else ("taskset", "-c", "0")
    server = Server(out_dir / "classroom-server.log", prefix=pin)
    try:
        server.health_seconds()
        rows = measure(
            server.url, cases, args.visitors, args.timeout, log, args.browser_crowd, args.pin_browser, args.repeat
        )
        time.sleep(0.5)
        high_water = tree_high_water_mb(server.proc.pid)
        sampled = server.peak_mb
    finally:
        server.stop()
    problems = [
        f"{row.name}: {visit.problem}"
        for row in rows
        for visit in [row.one, row.server_one, *row.server_many, *row.crowd]
        if visit.problem is not None
    ]
    report = {
        "commit": commit.stdout.strip(),
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
        "server": " ".join(pin) or "not pinned",
        "browser": "CPU 1" if args.pin_browser else "both CPUs",
        "visitors": args.visitors,
        "repeat": args.repeat,
        "pages": [asdict(row) for row in rows],
        "peak_rss_mb_vmhwm": high_water,
        "peak_rss_mb_sampled": sampled,
        "problems": problems,
    }
    (out_dir / "classroom.json").write_text(json.dumps(report, indent=1))
    print(
        f"\nClassroom benchmark at {report['commit']} ({report['machine']}; server {report['server']}; browser on {report['browser']})"
    )
    print(f"targets: 1 visitor <= {TARGET_ONE_S:.0f} s, each of {args.visitors} <= {TARGET_EIGHT_S:.0f} s (* = over)")
    print(f"1 visitor: the median of {args.repeat} visits, each in a new browser context")
    print(table(rows, args.visitors))
    print(f"peak RSS, server and children (VmHWM): {high_water:.0f} MB (target < {TARGET_RSS_MB:.0f} MB)")
    print(f"peak RSS, sampled every 50 ms:        {sampled:.0f} MB")
    for problem in problems:
        print(f"error: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
