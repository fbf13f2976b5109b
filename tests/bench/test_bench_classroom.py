"""The classroom benchmark's own helpers (no server, no browser): pages, summary figures, the table, peak memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchmarks.bench_classroom import (
    DRAWN,
    FIGURES,
    PAGES,
    PLOT,
    STABLE_MS,
    TABLE,
    PageCase,
    PageTimes,
    Visit,
    median_visit,
    page_and_query,
    summary,
    table,
    tree_high_water_mb,
    watch_script,
)


def test_every_page_and_every_tour_step_is_measured():
    from attnlib.present.tour import STEPS

    paths = [c.path for c in PAGES]
    steps = len(STEPS)
    assert paths[:steps] == [f"/tour?step={n}" for n in range(1, steps + 1)]
    pages = {
        "/",
        "/special-tokens",
        "/dependency-heads",
        "/local-global",
        "/head-importance",
        "/head-roles",
        "/predictions",
        "/queries-keys",
        "/report",
    }
    assert set(paths[steps:]) == pages
    assert len({c.name for c in PAGES}) == len(PAGES)
    by_name = {c.name: c.main for c in PAGES}
    assert by_name["tour-5"] == TABLE and by_name["dependency-heads"] == TABLE and by_name["special-tokens"] == PLOT


def test_each_of_the_crowd_waits_for_the_server_under_load_plus_its_own_browser():
    times = PageTimes("p", Visit(2.5), Visit(0.5), [Visit(4.0), Visit(2.0), Visit(None, "not finished"), Visit(9.0)])
    assert times.browser_share() == 2.0  # 2.5 s end to end, 0.5 s of it the server's run
    assert times.many_estimate() == [6.0, 4.0, 11.0]  # the unfinished session is left out
    assert summary(times) == (2.5, 9.0, 11.0, None)
    assert summary(PageTimes("q", Visit(None, "x"), Visit(1.0), [Visit(3.0)])) == (None, 3.0, None, None)


def test_table_stars_missed_targets_and_says_never():
    fast = PageTimes("fast", Visit(1.0), Visit(0.25), [Visit(2.0)] * 8)
    slow = PageTimes("slow", Visit(None, "x"), Visit(0.5), [Visit(12.0)])
    lines = table([fast, slow], 8).splitlines()
    assert "server, 8 at once max s" in lines[0] and "each of 8 max s" in lines[0] and "browsers" not in lines[0]
    assert lines[1].split() == ["fast", "1.00", "0.25", "2.00", "2.75"]
    assert lines[2].split() == ["slow", "never", "0.50", f"{12.0:.2f}*", "never"]
    crowd = PageTimes("crowd", Visit(1.0), Visit(0.5), [Visit(1.0)], [Visit(11.0)])
    assert table([crowd], 8).splitlines()[1].split()[-1] == f"{11.0:.2f}*"


def test_pages_are_asked_for_as_a_browser_names_them():
    assert page_and_query(PageCase("t", "/tour?step=3", PLOT)) == ("tour", "step=3")
    assert page_and_query(PageCase("l", "/", PLOT)) == ("", "")


def test_watch_script_embeds_the_selectors_as_javascript_strings():
    script = watch_script(".attn-table")
    selectors = f'const main = ".attn-table", stableMs = {STABLE_MS}, figures = {json.dumps(FIGURES)}, drawn = {json.dumps(DRAWN)};'
    assert selectors in script
    assert "%s" not in script and "%d" not in script


def _own_high_water_mb() -> float:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_high_water_counts_the_children():
    """A child that touches 200 MB adds at least that much to the tree's peak, beyond this process's own."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; b = bytearray(200 * 2**20); print('ok', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ok"
        tree = tree_high_water_mb(os.getpid())
        own = _own_high_water_mb()
        assert own >= psutil.Process().memory_info().rss / 2**20 * 0.99
        assert tree - own >= 200
    finally:
        child.kill()
        child.wait()


def test_one_visitor_is_the_median_of_the_visits_and_a_failed_visit_fails_the_page():
    assert median_visit([Visit(3.5), Visit(2.5), Visit(2.75)]) == Visit(2.75)
    assert median_visit([Visit(3.0), Visit(2.0)]) == Visit(2.5)
    broken = Visit(4.0, "exception box")
    assert median_visit([Visit(2.0), broken, Visit(None, "not finished: TimeoutError")]) == broken
