"""The report page and its own helpers."""
