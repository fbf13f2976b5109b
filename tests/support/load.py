"""The load test's visitors and their sentences (app/test_load.py, browser/test_browser_load.py)."""

from __future__ import annotations

SESSIONS = 8


ANIMALS = ["cat", "dog", "fox", "owl", "bee", "cow", "hen", "elk"]


def _sentence(i: int) -> str:
    return f"Student {i + 1} saw the {ANIMALS[i % len(ANIMALS)]} cross the road at noon."
