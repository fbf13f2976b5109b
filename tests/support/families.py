"""The text pair of the family tests (core/test_families.py)."""

from __future__ import annotations

TEXT_A, TEXT_B = "The cat sat on the mat because it was warm.", "It slept."
