"""The tabs of the pages that draw only their open tab (URL text -> label), kept apart from the pages so that tests
and links can name them (a page file runs when imported)."""

from __future__ import annotations

SPECIAL_TOKENS = {
    "shares": "Shares",
    "sep": "[SEP] as no-op",
    "sinks": "Sinks",
    "norms": "Weights vs norms",
    "offsets": "Offset heads",
    "entropy": "Entropy",
    "map": "Head map",
    "gradient": "Gradient importance",
    "tables": "Tables",
}
LOCAL_GLOBAL = {
    "com": "Centre of mass",
    "histograms": "Relative positions",
    "correlation": "Attention vs attribution",
    "aggregation": "Global aggregation",
    "example": "One example",
}
DEPENDENCY_HEADS = {"table": "Best head per relation", "probe": "All heads together"}
HEAD_IMPORTANCE = {
    "effects": "Effect per head",
    "noop": "No-op test",
    "pruning": "Pruning curve",
    "gradient": "Gradient importance",
    "tables": "Tables",
}
HEAD_ROLES = {
    "map": "Role map",
    "detect": "Detection",
    "causal": "Causal check",
    "retrieval": "Retrieval",
    "training": "Over training",
    "composition": "Composition",
    "tables": "Tables",
}
