"""The report tests' input sizes (present/test_report.py, browser/test_browser_report.py, conftest.py)."""

from __future__ import annotations

N_INPUTS = 6  # of each file


MIN_COUNT = 5
