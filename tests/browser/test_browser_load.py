"""Many users: 8 browser sessions at once against one `streamlit run`, each typing its own sentence and switching pages.

Checks: no exception box anywhere, the default model loaded once by the server process, every cache bounded.
Prints the server's peak resident memory (also written to test-output/load-test.json).

The browser test; app/test_load.py holds the quick checks of the server's settings and caches."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import expect

from attnlib.core.model import DEFAULT_MODEL
from attnlib.results.shipped import ROOT
from support.browser import IDLE, server_log
from support.load import SESSIONS, _sentence
from ui.sources.model_sidebar import LOAD_LOG_LINE

pytestmark = [pytest.mark.browser, pytest.mark.slow]


PAGES = ["Special tokens", "Dependency heads", "Local vs global", "Live attention"]


MAIN_CONTENT = ".js-plotly-plot, .attn-table, [data-testid='stTable'], iframe, [data-testid='stAlert']"


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
    log = server_log()
    line = f"{LOAD_LOG_LINE} {DEFAULT_MODEL}\n"
    before = log.read_text(errors="replace").count(line)  # other tests on this server may have loaded (and evicted) it
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
    loads = log.read_text(errors="replace").count(line) - before
    report = {
        "sessions": SESSIONS,
        "seconds": round(elapsed, 1),
        "peak_rss_mb_during_test": round(peak_during),
        "peak_rss_mb_server_lifetime": round(peak_rss_mb(server)),
        "default_model_loads": loads,
    }
    (ROOT / "test-output" / "load-test.json").write_text(json.dumps(report, indent=1))
    print(f"\nload test: {report}")
    assert loads <= 1, f"the default model was loaded {loads} times by the server for 8 sessions"
