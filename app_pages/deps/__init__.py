"""The dependency heads page and its own helpers."""
