"""What test_positions.py and test_positions_slow.py both use."""

from __future__ import annotations

from ui.page_tabs import LOCAL_GLOBAL

TABS = LOCAL_GLOBAL
