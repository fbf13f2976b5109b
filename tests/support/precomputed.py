"""What test_precomputed.py and test_precomputed_slow.py both use."""

from __future__ import annotations

from attnlib.precomputed import shipped_results

ENTRIES = {e.name: e for e in shipped_results()}
