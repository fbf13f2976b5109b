"""The local global page and its own helpers."""
