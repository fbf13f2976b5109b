"""The shipped results by name (test_precomputed.py, test_precomputed_slow.py)."""

from __future__ import annotations

from attnlib.results.precomputed import shipped_results

ENTRIES = {e.name: e for e in shipped_results()}
