"""Figures of the aggregation analysis (Kobayashi et al.; GlobEnc): each measure's agreement with layer-output
attribution and its centre of mass per layer, of one model or two."""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go

from attnlib.analyses.aggregation import AggregationResult
from attnlib.stats.norms import MEASURES
from attnlib.views.drawing import draws
from attnlib.views.layers import model_lines
from attnlib.views.norms import MEASURE_NAMES, agreement_figure, measure_center_of_mass_figure


@draws(AggregationResult, compared=True)
def aggregation_figures(results: Mapping[str, AggregationResult]) -> list[go.Figure]:
    """Agreement of each measure with G_out and centres of mass (model -> result); for two models, lines of both per
    measure."""
    if len(results) > 1:
        centres = {**{m: MEASURE_NAMES[m] for m in MEASURES}, "attribution": MEASURE_NAMES["attribution"]}
        return [
            model_lines(
                {model: r.spearman for model, r in results.items()},
                {m: MEASURE_NAMES[m] for m in MEASURES},
                "Spearman correlation with layer-output attribution per layer",
                "correlation",
            ),
            model_lines(
                {model: r.center_of_mass for model, r in results.items()},
                centres,
                "Centre of mass per layer",
                "offset",
            ),
        ]
    r = next(iter(results.values()))
    return [
        agreement_figure(r.pearson, r.spearman, "Agreement with layer-output attribution per layer"),
        measure_center_of_mass_figure(r.center_of_mass, "Centre of mass per layer"),
    ]
