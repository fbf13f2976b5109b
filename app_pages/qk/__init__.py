"""The queries keys page and its own helpers."""
