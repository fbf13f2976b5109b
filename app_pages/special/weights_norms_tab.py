"""The Special tokens page's "Weights vs norms" tab: the share of attention weights against the share of value-weighted
norms per token class and layer, and the value norms by class (METHODS §11, Kobayashi et al. 2020 Fig. 2)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.special.special_views import KEY, ShownResult, models_difference, names_for, show_figure
from attnlib.analyses.labels import CLASS_NAMES
from attnlib.analyses.special import CLASS_KEYS, NORM_GAP_FACTOR, largest_weight_norm_gap
from attnlib.analyses.tables import layer_frame
from attnlib.views.norms import (
    value_norm_figure,
    value_norms_by_model,
    weights_vs_norms_by_model,
    weights_vs_norms_figure,
)
from ui.widgets.data_table import data_table
from ui.widgets.downloads import download_table
from ui.widgets.family_notes import unsupported_for
from ui.widgets.methods import cite_methods

GAP_VERDICTS = {
    "smaller": "its value vectors are small, so that attention moves little (a near no-op, as Kobayashi et al. found)",
    "larger": "its value vectors are large, so that attention carries more than its weight says",
    "similar": f"within a factor of {NORM_GAP_FACTOR:.0f}, so here weights and norms tell about the same story",
}  # by WeightNormGap.verdict


def weight_norm_table(views: list[ShownResult]) -> pd.DataFrame:
    """Per layer and model: the weight share and norm share of each class, and each class's value norm."""
    frames = []
    for v in views:
        assert v.norms is not None
        weights = {f"weight_{k}": v.special.layers[k] for k in CLASS_KEYS}
        norms = {f"norm_{k}": v.norms.layers[k] for k in CLASS_KEYS}
        frames.append(
            layer_frame(v.model, weights | norms | {k: v.norms.layers[k] for k in v.norms.layers if "value" in k})
        )
    return pd.concat(frames, ignore_index=True)


def weights_norms_caption(view: ShownResult) -> str:
    """What the figure shows: the largest gap between [CLS]/[SEP]'s (a decoder's first and end tokens') weight share
    and norm share."""
    assert view.norms is not None
    gap = largest_weight_norm_gap(view.special.layers, view.norms.layers)
    if gap is None:
        return "No layer has both a weight share and a norm share to compare."
    return (
        f"{view.model}: the largest gap is {names_for([view])[gap.key]} in layer {gap.layer + 1}: "
        f"{gap.weight_share:.2f} of the attention weights but {gap.norm_share:.2f} of the norms: "
        f"{GAP_VERDICTS[gap.verdict]}."
    )


def weights_norms_tab(views: list[ShownResult]) -> None:
    """Share of weights and share of norms per class and layer (Kobayashi Fig. 2), and value norms by class."""
    missing = [v for v in views if v.norms is None]
    reasons = [r for v in missing if not v.from_file and (r := unsupported_for(v.model, "norms"))]
    if reasons:  # a family attnlib has no layout for: the other tabs have its attention statistics
        st.info(" ".join(reasons))
        return
    if missing:
        files = [v.model for v in missing if v.from_file]
        st.info(
            f"{' and '.join(files)}: {'these result files have' if len(files) > 1 else 'the result file has'} no "
            "norms; run the command with --norms to include them."
            if files
            else "Switch on *Weights vs norms* in the sidebar: the value norms come from the same forward pass."
        )
        return
    names = names_for(views)
    labels = CLASS_NAMES | {key: names[key] for key in ("cls", "sep")}  # a decoder's first and end tokens (§18)
    st.markdown(
        f"Is the attention to {names['cls']} and {names['sep']} a no-op? A weight says how much of a token a head takes; the norm "
        "||α f(x)|| says how much that moves the output. Left: the share of attention *weights* to each class; "
        "right: the share of *value-weighted norms* (METHODS §11, Kobayashi et al. 2020, Fig. 2). Below: the mean "
        "value norm ||f(x)|| of each class's tokens."
    )
    for v in views:
        st.markdown(f"**What it shows.** {weights_norms_caption(v)}")
    shares = {v.model: ({k: v.special.heads[k] for k in CLASS_KEYS}, v.norms.heads) for v in views if v.norms}
    if len(views) == 1:
        weights, norms = shares[views[0].model]
        show_figure(
            weights_vs_norms_figure(weights, norms, "Share of weights and of norms per layer", labels),
            "weights_vs_norms",
        )
        show_figure(value_norm_figure(views[0].norms.heads, names=labels), "value_norms")  # type: ignore[union-attr]
    else:
        show_figure(
            weights_vs_norms_by_model(shares, "Share of weights and of norms per layer", labels), "weights_vs_norms"
        )
        per_layer = [{f"norm {k}": v.norms.layers[k] for k in CLASS_KEYS} for v in views if v.norms]
        models_difference(
            views,
            per_layer,
            [f"norm {k}" for k in CLASS_KEYS],
            {f"norm {k}": f"{names[k]} norm share" for k in CLASS_KEYS},
        )
        value_norms = {v.model: v.norms.heads for v in views if v.norms}
        show_figure(value_norms_by_model(value_norms, names=labels), "value_norms")
    table = weight_norm_table(views)
    data_table(table, key=f"{KEY}_weights_norms_table")
    download_table(table, "weights_vs_norms", key=f"{KEY}_weights_norms_csv")
    cite_methods(11)
