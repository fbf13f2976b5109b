"""The Local vs global page's tabs, as the positions tests (analyses/test_positions.py) open them."""

from __future__ import annotations

from ui.widgets.page_tabs import LOCAL_GLOBAL

TABS = LOCAL_GLOBAL
