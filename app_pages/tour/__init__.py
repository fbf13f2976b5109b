"""The tour page and its own helpers."""
