"""plotly.js for pages that open offline (a figure's download, the report): the bundle the app serves."""

from __future__ import annotations

from functools import cache

from attnlib.results.shipped import PLOTLY_BUNDLE


@cache
def plotly_js() -> str:
    """The bundle's source, read once (1.2 MB, where the `plotly` package's full plotly.js is 4.8 MB)."""
    return PLOTLY_BUNDLE.read_text()
