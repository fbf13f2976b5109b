"""Many users: 8 browser sessions at once against one `streamlit run`, each typing its own sentence and switching pages.

Checks: no exception box anywhere, the default model loaded once by the server process, every cache bounded.
Prints the server's peak resident memory (also written to test-output/load-test.json)."""

from __future__ import annotations

import ast
import json
import re
import threading
import time
from pathlib import Path

import psutil
from playwright.sync_api import expect

from attnlib.model import DEFAULT_MODEL
from attnlib.shipped import ROOT
from support.browser import IDLE
from ui.model_sidebar import LOAD_LOG_LINE

SESSIONS = 8
PAGES = ["Special tokens", "Dependency heads", "Local vs global", "Live attention"]
MAIN_CONTENT = ".js-plotly-plot, .attn-table, [data-testid='stTable'], iframe, [data-testid='stAlert']"
ANIMALS = ["cat", "dog", "fox", "owl", "bee", "cow", "hen", "elk"]


def _sentence(i: int) -> str:
    return f"Student {i + 1} saw the {ANIMALS[i % len(ANIMALS)]} cross the road at noon."


def server_process(url: str) -> psutil.Process:
    """The `streamlit run` process started by the streamlit_server fixture (a child of this process)."""
    port = url.rsplit(":", 1)[1]
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "streamlit" in " ".join(cmd) and port in cmd:
            return p
    raise RuntimeError(f"no streamlit process on port {port}")


def peak_rss_mb(process: psutil.Process) -> float:
    """The process's peak resident set size so far (VmHWM), in MB."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return process.memory_info().rss / 2**20


class RssSampler(threading.Thread):
    """Samples a process's resident memory every 100 ms; `peak_mb` is the largest seen."""

    def __init__(self, process: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.process, self.peak_mb, self.running = process, 0.0, True

    def run(self) -> None:
        while self.running:
            try:
                self.peak_mb = max(self.peak_mb, self.process.memory_info().rss / 2**20)
            except psutil.Error:
                return
            time.sleep(0.1)

    def stop(self) -> float:
        self.running = False
        self.join(timeout=2)
        return self.peak_mb


def _wait_idle(page, timeout: float = 240_000) -> None:
    page.locator(MAIN_CONTENT).first.wait_for(state="visible", timeout=timeout)
    page.wait_for_function(IDLE, timeout=timeout)


def _assert_no_exception(page, where: str) -> None:
    assert page.locator("[data-testid='stException']").count() == 0, f"an exception box is shown ({where})"


def test_eight_sessions_type_and_switch_pages(streamlit_server, browser, screenshot_dir):
    server = server_process(streamlit_server)
    log = ROOT / "test-output" / "streamlit-server.log"
    sampler = RssSampler(server)
    sampler.start()
    started = time.time()
    contexts = [browser.new_context(viewport={"width": 1300, "height": 900}) for _ in range(SESSIONS)]
    pages = [c.new_page() for c in contexts]
    try:
        for page in pages:  # every session connects before any finishes
            page.goto(f"{streamlit_server}/", wait_until="domcontentloaded")
        for page in pages:  # Streamlit mounts a text area empty and gives it its value a moment later
            expect(page.locator("textarea").first).not_to_have_value("", timeout=120_000)
        for i, page in enumerate(pages):  # all eight reruns are queued before we wait for any
            area = page.locator("textarea").first
            area.fill(_sentence(i))
            area.press("Control+Enter")
        for i, page in enumerate(pages):
            page.wait_for_function(
                "(s) => decodeURIComponent(location.search.replace(/\\+/g, ' ')).includes(s)",
                arg=_sentence(i),
                timeout=120_000,
            )
            _wait_idle(page)
            _assert_no_exception(page, f"session {i + 1}, live page")
            expect(page.locator("textarea").first).to_have_value(_sentence(i), timeout=30_000)
        for i, page in enumerate(pages):  # each session switches to another page, all at once
            page.locator("[data-testid='stSidebarNav']").get_by_text(PAGES[i % len(PAGES)], exact=True).click()
        for i, page in enumerate(pages):
            title = re.compile("^" + PAGES[i % len(PAGES)].split()[0])  # the nav says "Local vs global", the title more
            page.get_by_role("heading", name=title).first.wait_for(timeout=240_000)
            _wait_idle(page)
            _assert_no_exception(page, f"session {i + 1}, {PAGES[i % len(PAGES)]}")
        for page in pages:  # and back to the live page, where its own sentence is still there
            page.locator("[data-testid='stSidebarNav']").get_by_text("Live attention", exact=True).click()
        for i, page in enumerate(pages):
            page.get_by_role("heading", name="Live attention").first.wait_for(timeout=120_000)
            _wait_idle(page)
            _assert_no_exception(page, f"session {i + 1}, back on the live page")
            area = page.locator("textarea").first
            expect(area, "the typed sentence was lost").to_have_value(_sentence(i), timeout=30_000)
        pages[0].screenshot(path=str(screenshot_dir / "load-session-1.png"), full_page=True)
    finally:
        for c in contexts:
            c.close()
        peak_during = sampler.stop()
    elapsed = time.time() - started
    loads = log.read_text(errors="replace").count(f"{LOAD_LOG_LINE} {DEFAULT_MODEL}\n")
    report = {
        "sessions": SESSIONS,
        "seconds": round(elapsed, 1),
        "peak_rss_mb_during_test": round(peak_during),
        "peak_rss_mb_server_lifetime": round(peak_rss_mb(server)),
        "default_model_loads": loads,
    }
    (ROOT / "test-output" / "load-test.json").write_text(json.dumps(report, indent=1))
    print(f"\nload test: {report}")
    assert loads == 1, f"the default model was loaded {loads} times by the server"


# ---------- bounded caches -----------------------------------------------------------------------------------------


def _cache_decorators():
    """(file, function, keyword names) of every st.cache_data / st.cache_resource in ui/ and app_pages/."""
    for folder in ("ui", "app_pages"):
        for path in sorted((ROOT / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for deco in node.decorator_list:
                    call = deco if isinstance(deco, ast.Call) else None
                    target = call.func if call else deco
                    name = ast.unparse(target)
                    if name.endswith(("cache_data", "cache_resource")):
                        keywords = {k.arg for k in call.keywords} if call else set()
                        if not node.args.args:  # no argument, so one entry at most
                            keywords.add("no arguments")
                        yield f"{folder}/{path.name}", node.name, keywords


def test_every_cache_is_bounded():
    found = list(_cache_decorators())
    assert len(found) >= 5
    unbounded = [(f, fn) for f, fn, keys in found if not keys & {"max_entries", "ttl", "no arguments"}]
    assert unbounded == []


def test_live_run_cache_is_small():
    """A 512-token run holds about 85 MB (attention, queries and keys of 6 x 12 heads), and every visitor shares it."""
    keys = {fn: kw for f, fn, kw in _cache_decorators()}
    assert "cached_run" in keys
    source = (ROOT / "ui" / "live_inputs.py").read_text()
    tree = ast.parse(source)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "cached_run")
    entries = next(
        k.value.value
        for d in fn.decorator_list
        if isinstance(d, ast.Call)
        for k in d.keywords
        if k.arg == "max_entries"
    )
    assert entries * 85 <= 500, f"cached_run may hold {entries} x 85 MB"


def test_server_leaves_collection_to_python():
    """Streamlit's default full collection after every run holds the GIL for about 0.4 s with torch loaded, stalling
    every visitor's page (bench_classroom); the config turns it off (Python's own collector still runs)."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False


def test_server_does_not_watch_its_files():
    """Streamlit's file watcher (watchdog) slowed every visit by 1-2.5 s here, following the files the server opens;
    the config turns it off, so `streamlit run app.py` serves as the benchmark's server does."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"


# ---------- one model shared by many threads -----------------------------------------------------------------------


def test_concurrent_runs_on_one_model_do_not_mix(minilm):
    """Streamlit runs each visitor in its own thread on the one cached model; hooks must record only their own run."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from attnlib.runner import run, run_batches

    texts = [_sentence(i) * (1 + i % 3) for i in range(SESSIONS)]  # different lengths, so a mix-up cannot hide
    alone = [run(minilm, t) for t in texts]

    def job(i: int):
        if i % 2:
            return next(iter(run_batches(minilm, [(texts[i], None)])))
        return run(minilm, texts[i])

    for _ in range(3):
        with ThreadPoolExecutor(SESSIONS) as pool:
            together = list(pool.map(job, range(SESSIONS)))
        for i, (a, b) in enumerate(zip(alone, together)):
            np.testing.assert_allclose(b.attentions, a.attentions, atol=1e-5, err_msg=f"input {i}")
            if i % 2 == 0:
                np.testing.assert_allclose(b.queries, a.queries, atol=1e-4, err_msg=f"input {i}")
                np.testing.assert_allclose(b.keys, a.keys, atol=1e-4, err_msg=f"input {i}")
