"""The figures of one run (AnalysisRun.show): the report's figures for the analyses the report holds, and the pages'
figures of the one-input analyses, of queries and keys and of gradient importance; each shows itself in a notebook."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnlib.analyses.ablate import InputAblation
from attnlib.analyses.attention import AttentionMaps
from attnlib.analyses.base import AnalysisRun
from attnlib.analyses.gradient import GradientImportance
from attnlib.analyses.hta import TokenAttribution
from attnlib.analyses.norms import InputNorms
from attnlib.analyses.qk import QKResult
from attnlib.analyses.retrieval import RetrievalResult
from attnlib.analyses.roles import SCORE_KEYS, RolesResult
from attnlib.present.roles import checkpoint_table
from attnlib.present.runs import part_result
from attnlib.views.display import View
from attnlib.views.figure import as_figure
from attnlib.views.head_view import head_view
from attnlib.views.heatmap import attention_heatmap
from attnlib.views.qk import picture_figure
from attnlib.views.report_page import PART_FIGURES
from attnlib.views.roles import (
    causal_bars,
    retrieval_heatmap,
    role_map,
    role_thresholds,
    score_heatmap,
    training_figure,
)
from attnlib.views.special import gradient_figure

Drawn = Any  # a Figure (plotly) or a View (the head view)


def attention_figures(model: str, maps: AttentionMaps) -> list[Drawn]:
    """The head view of self-attention; the first map kept as a heatmap otherwise (a selection, cross-attention)."""
    n_rows, n_keys = maps.attentions.shape[2:]
    if maps.selection is None and n_rows == n_keys:
        pair_start = maps.segments.index(1) if 1 in maps.segments else None
        return [head_view(maps.attentions, maps.tokens, pair_start, title=model)]
    chosen = maps.selection or {}
    first = chosen.get("rows", (0, n_rows))[0]
    keys = (maps.encoder_decoder or {}).get("key_tokens") or maps.tokens
    layer, head = chosen.get("layers", [0])[0], chosen.get("heads", [0])[0]
    title = f"{model}: layer {layer + 1}, head {head + 1}"
    return [attention_heatmap(maps.attentions[0, 0], maps.tokens[first : first + n_rows], keys, title)]


def hta_figures(model: str, found: TokenAttribution) -> list[Drawn]:
    """The last layer's attribution to the input tokens (mean over heads) and, when computed, its output's."""
    last = len(found.input)
    figures = [attention_heatmap(found.input[-1].mean(0), found.tokens, found.tokens,
                                 f"{model}: input attribution, layer {last} (mean over heads)")]  # fmt: skip
    if found.output is not None:
        title = f"{model}: layer-output attribution, layer {last}"
        figures.append(attention_heatmap(found.output[-1], found.tokens, found.tokens, title))
    return figures


def norms_figures(model: str, found: InputNorms) -> list[Drawn]:
    """Both rollouts at the last layer (METHODS §12-13); cross-attention, which has none: its last layer's norms
    ||sum_h A f_h(x_j)|| (METHODS §11-12), target tokens to source tokens."""
    if found.attention_rollout is None or found.residual_ln_rollout is None:
        title = f"{model}: ‖Σ_h α f(x)‖, layer {len(found.layer_norm)}"
        return [attention_heatmap(found.layer_norm[-1], found.tokens, found.key_tokens, title)]
    return [
        attention_heatmap(found.attention_rollout[-1], found.tokens, found.tokens, f"{model}: attention rollout"),
        attention_heatmap(
            found.residual_ln_rollout[-1], found.tokens, found.tokens, f"{model}: residual+LayerNorm rollout"
        ),
    ]


def ablate_figures(model: str, found: InputAblation) -> list[Drawn]:
    """Nothing to draw: one input's three numbers are its table."""
    return []


def qk_figures(model: str, found: QKResult) -> list[Drawn]:
    """The asked head's picture of its queries and keys."""
    title = f"{model}: queries and keys of head {found.layer + 1}-{found.head + 1}"
    return [picture_figure(found, found.layer, found.head, found.method, title=title)]


def gradient_figures(model: str, found: GradientImportance) -> list[Drawn]:
    """Clark Fig. 3: mean |dLoss/dA| per layer, to [SEP] and to all tokens."""
    return [gradient_figure(found.layers["sep"], found.layers["all"])]


def roles_figures(model: str, found: RolesResult) -> list[Drawn]:
    """The role map, the induction score, the causal check's bars (with a next-token loss) and, with checkpoints,
    the lines of each score's largest value and the in-context gain over training."""
    scores = {key: found.scores.of(key) for key in SCORE_KEYS}
    figures = [role_map(scores, role_thresholds(found.thresholds), f"Head roles: {model}"),
               score_heatmap(found.scores.induction, "induction")]  # fmt: skip
    if found.causal:
        figures.append(causal_bars({r: c.to_json() for r, c in found.causal.items()}, found.in_context_gain))
    if found.checkpoints:
        figures.append(training_figure(model, checkpoint_table(found)))
    return figures


def retrieval_figures(model: str, found: RetrievalResult) -> list[Drawn]:
    """Every head's retrieval score (Wu et al. 2024)."""
    return [retrieval_heatmap(found.scores, found.threshold)]


FIGURES: dict[str, Callable[[str, Any], list[Drawn]]] = {
    "attention": attention_figures,
    "hta": hta_figures,
    "norms": norms_figures,
    "ablate": ablate_figures,
    "qk": qk_figures,
    "gradient": gradient_figures,
    "roles": roles_figures,
    "retrieval": retrieval_figures,
}


def run_figures(run: AnalysisRun) -> list[Drawn]:
    """The run's figures, each showing itself in a notebook."""
    shown = part_result(run)
    drawn = FIGURES[run.analysis.name](run.model, run.result) if shown is None else PART_FIGURES[shown.part]([shown])
    return [d if isinstance(d, View) else as_figure(d) for d in drawn]
