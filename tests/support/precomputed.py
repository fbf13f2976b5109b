"""The shipped results by name (results/test_precomputed.py)."""

from __future__ import annotations

from attnlib.results.precomputed import shipped_results

ENTRIES = {e.name: e for e in shipped_results()}
