"""The live page and its own helpers."""
