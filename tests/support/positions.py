"""The Local vs global page's tabs, as its tests (app/test_local_global_page.py) open them."""

from __future__ import annotations

from ui.widgets.page_tabs import LOCAL_GLOBAL

TABS = LOCAL_GLOBAL
