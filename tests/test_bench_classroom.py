"""The classroom benchmark's own helpers (no server, no browser): pages, summary figures, the table, peak memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchmarks.bench_classroom import (
    PAGES,
    PLOT,
    STABLE_MS,
    TABLE,
    PageTimes,
    Visit,
    summary,
    table,
    tree_high_water_mb,
    watch_script,
)


def test_every_page_and_every_tour_step_is_measured():
    paths = [c.path for c in PAGES]
    assert paths[:6] == [f"/tour?step={n}" for n in range(1, 7)]
    assert set(paths[6:]) == {"/", "/special-tokens", "/dependency-heads", "/local-global"}
    assert len({c.name for c in PAGES}) == len(PAGES)
    by_name = {c.name: c.main for c in PAGES}
    assert by_name["tour-5"] == TABLE and by_name["dependency-heads"] == TABLE and by_name["special-tokens"] == PLOT


def test_summary_is_one_visitor_then_max_and_median_of_the_many():
    times = PageTimes("p", Visit(1.5), [Visit(4.0), Visit(2.0), Visit(None, "not finished"), Visit(9.0)])
    assert summary(times) == (1.5, 9.0, 4.0)  # the unfinished visitor is left out of max and median
    assert summary(PageTimes("q", Visit(None, "x"), [])) == (None, None, None)


def test_table_stars_missed_targets_and_says_never():
    rows = [PageTimes("fast", Visit(1.0), [Visit(2.0)] * 8), PageTimes("slow", Visit(None, "x"), [Visit(12.0)])]
    lines = table(rows, 8).splitlines()
    assert "8 visitors max s" in lines[0]
    assert lines[1].split() == ["fast", "1.00", "2.00", "2.00"]
    assert lines[2].split() == ["slow", "never", f"{12.0:.2f}*", f"{12.0:.2f}*"]


def test_watch_script_embeds_the_selector_as_a_javascript_string():
    script = watch_script("[data-testid='stDataFrame']")
    assert f"const main = \"[data-testid='stDataFrame']\", stableMs = {STABLE_MS};" in script
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
