"""The special tokens page and its own helpers."""
