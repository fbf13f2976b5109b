"""The head importance page and its own helpers."""
