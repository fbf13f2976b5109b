"""The figure of a `retrieval` result: every head's retrieval score (drawn by views/roles.py, beside the head roles)."""

from __future__ import annotations

from attnlib.analyses.retrieval import RetrievalResult
from attnlib.views.drawing import draws
from attnlib.views.roles import retrieval_heatmap


@draws(RetrievalResult)
def retrieval_figures(result: RetrievalResult, model: str) -> list:
    """Every head's retrieval score (Wu et al. 2024)."""
    return [retrieval_heatmap(result.scores, result.threshold)]
