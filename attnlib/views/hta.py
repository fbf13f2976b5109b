"""The figures of an `hta` result: the last layer's Hidden Token Attribution as heatmaps."""

from __future__ import annotations

from attnlib.analyses.hta import TokenAttribution
from attnlib.views.drawing import draws
from attnlib.views.heatmap import attention_heatmap


@draws(TokenAttribution)
def hta_figures(attribution: TokenAttribution, model: str) -> list:
    """The last layer's attribution to the input tokens (mean over heads) and, when computed, its output's."""
    last = len(attribution.input)
    figures = [attention_heatmap(attribution.input[-1].mean(0), attribution.tokens, attribution.tokens,
                                 f"{model}: input attribution, layer {last} (mean over heads)")]  # fmt: skip
    if attribution.output is not None:
        title = f"{model}: layer-output attribution, layer {last}"
        figures.append(attention_heatmap(attribution.output[-1], attribution.tokens, attribution.tokens, title))
    return figures
