"""Benchmarks: run as `python -m benchmarks.<name>` from the repository root."""

from __future__ import annotations

from attnlib.shipped import EWT_DEV


def ewt_dev(limit: int | None = None) -> list:
    """The first `limit` sentences of UD English EWT dev (all when None), as the repository ships it."""
    from attnlib.corpus import read_conllu

    return read_conllu(EWT_DEV)[:limit]
