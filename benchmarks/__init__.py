"""Benchmarks: run as `python -m benchmarks.<name>` from the repository root."""

from __future__ import annotations

import sys
from pathlib import Path

EWT_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "UD_English-EWT" / "en_ewt-ud-dev.conllu"


def ewt_dev(limit: int | None = None) -> list:
    """The first `limit` sentences of UD English EWT dev (all when None); exits with a message when it is absent."""
    if not EWT_DEV.is_file():
        sys.exit(f"{EWT_DEV} is absent.")
    from attnlib.corpus import read_conllu

    return read_conllu(EWT_DEV)[:limit]
