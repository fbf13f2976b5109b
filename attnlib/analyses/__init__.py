"""One module per analysis (its options, accumulators and result); `ANALYSES` and `analyse` live in `registry`."""

from typing import Any


def __getattr__(name: str) -> Any:
    # Lazy, so that importing one analysis (or `base`) does not import every analysis first.
    if name in ("ANALYSES", "analyse"):
        from attnlib.analyses import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'attnlib.analyses' has no attribute {name!r}")
