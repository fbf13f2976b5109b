"""The example notebook the packaging and browser tests run."""

from __future__ import annotations

from attnlib.results.shipped import ROOT

EXAMPLE_NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


LIMIT = 10  # inputs of each corpus: enough for every cell, quick
