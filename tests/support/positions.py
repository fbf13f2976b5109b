"""The Local vs global page's tabs, as the positions tests (test_positions.py, test_positions_slow.py) open them."""

from __future__ import annotations

from ui.widgets.page_tabs import LOCAL_GLOBAL

TABS = LOCAL_GLOBAL
