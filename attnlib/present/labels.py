"""The names the tables, figures and the report give the statistics of attnlib's analyses: attnlib.analyses.labels,
the one table, under its old path."""

from __future__ import annotations

from attnlib.analyses.labels import NORM_NAMES, SHARE_KEYS, STAT_NAMES

__all__ = ["NORM_NAMES", "SHARE_KEYS", "STAT_NAMES"]
