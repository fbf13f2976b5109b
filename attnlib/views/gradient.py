"""The figure of a `gradient` result: Clark et al.'s Fig. 3 (drawn by views/special.py, beside their other figures)."""

from __future__ import annotations

from attnlib.analyses.gradient import GradientImportance
from attnlib.views.drawing import draws
from attnlib.views.special import gradient_figure


@draws(GradientImportance)
def gradient_figures(importance: GradientImportance, model: str) -> list:
    """Clark Fig. 3: mean |dLoss/dA| per layer, to [SEP] and to all tokens."""
    return [gradient_figure(importance.layers["sep"], importance.layers["all"])]
