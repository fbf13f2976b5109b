"""Benchmarks: run as `python -m benchmarks.<name>` from the repository root."""
