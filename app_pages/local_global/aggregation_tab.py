"""The Local vs global page's "Global aggregation" tab: each measure of METHODS §11-13 (attention, the norms N and
N_ResLN, their rollouts) against layer-output attribution per layer, for one or two models."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnlib.analyses.aggregation import ATTRIBUTION, MEASURES, AggregationOptions, AggregationResult
from attnlib.analyses.positions import PositionOptions
from attnlib.core.model import LoadedModel
from attnlib.present.tables import layer_values
from attnlib.views.norms import (
    MEASURE_NAMES,
    agreement_comparison_figure,
    agreement_figure,
    center_of_mass_comparison_figure,
    measure_center_of_mass_figure,
)
from attnlib.views.positions import position_histograms
from ui.sources.compare import Second, difference_line
from ui.sources.corpus_page import CorpusPage, Inputs, Shown
from ui.sources.page_state import Option, bind
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.methods import cite_methods

AGG_MEASURE = Option("lg_agg_measure", "agg_measure", "attention", list(MEASURES))
NO_COMMON_LAYER = "The two models have no layer in common to compare."


def causal_offsets_text(model: str = "") -> str:
    """What a decoder's relative-position histograms show (METHODS §18), prefixed with the model's name if given."""
    return (
        f"{model + ': ' if model else ''}a decoder (METHODS §18): each token attends only to itself and earlier "
        "tokens, so the histograms show offsets k <= 0 only, each divided by the number of (input, query) pairs "
        "with i + k >= 0."
    )


def per_input_cost(mode: str) -> str:
    """What attribution costs per input in this mode on 2 CPU cores, in words."""
    return "a few seconds" if mode == "estimate" else "a minute or more"


def aggregation_options(options: PositionOptions) -> AggregationOptions:
    """The tab's options: the page's attribution mode, probes and seed (the other tabs')."""
    return AggregationOptions(mode=options.mode, probes=options.probes, seed=options.seed)


Aggregations = dict[str, AggregationResult]  # model name -> its result


def aggregation_table(results: Aggregations) -> pd.DataFrame:
    """Long table: model, layer (1-based), measure, Spearman, Pearson, centre of mass, and attribution's centre."""
    rows = [
        {
            "model": model,
            "layer": l + 1,
            "measure": measure,
            "spearman": r.spearman[measure][l],
            "pearson": r.pearson[measure][l],
            "centre of mass": r.center_of_mass[measure][l],
            "attribution centre of mass": r.center_of_mass[ATTRIBUTION][l],
        }
        for model, r in results.items()
        for measure in MEASURES
        for l in range(len(r.center_of_mass[ATTRIBUTION]))
    ]
    return pd.DataFrame(rows).round(4)


def aggregation_comparable(r: AggregationResult) -> dict[str, dict[str, float]]:
    """Spearman agreement and centre of mass of each measure per layer, for the largest-difference line."""
    stats = {f"{MEASURE_NAMES[m]} Spearman": r.spearman[m] for m in MEASURES}
    stats |= {f"{MEASURE_NAMES[m]} centre of mass": r.center_of_mass[m] for m in (*MEASURES, ATTRIBUTION)}
    return {name: layer_values(values) for name, values in stats.items()}


def aggregation_figures(results: Aggregations) -> None:
    """Agreement lines and centres of mass: one model's measures together, or a panel per measure for two."""
    if len(results) == 1:
        r = next(iter(results.values()))
        agreement = agreement_figure(r.pearson, r.spearman, "Agreement with layer-output attribution")
        com = measure_center_of_mass_figure(r.center_of_mass, "Centre of mass per layer")
    else:
        a, b = (aggregation_comparable(r) for r in results.values())
        difference_line(list(results), a, b, NO_COMMON_LAYER)
        pearson = {m: r.pearson for m, r in results.items()}
        spearman = {m: r.spearman for m, r in results.items()}
        agreement = agreement_comparison_figure(pearson, spearman, "Agreement with layer-output attribution")
        com = center_of_mass_comparison_figure({m: r.center_of_mass for m, r in results.items()}, "Centre of mass")
    chart(agreement, "aggregation_agreement", "lg_agg_agreement")
    chart(com, "aggregation_centre_of_mass", "lg_agg_com")


def aggregation_histograms(results: Aggregations, measure: str) -> None:
    """Per layer: the chosen measure's relative-position histogram beside attribution's, one grid per model."""
    window = int(st.session_state.get("lg_window", 10))
    for i, (model, r) in enumerate(results.items()):
        if not r.histograms:
            st.caption(f"{model}: this result has no histograms (written before they were kept); recompute it.")
            continue
        if r.causal:
            st.caption(causal_offsets_text(model if len(results) > 1 else ""))
        layers = [f"layer {l + 1}" for l in range(len(r.histograms[ATTRIBUTION]))]
        names = (MEASURE_NAMES[measure], MEASURE_NAMES[ATTRIBUTION])
        title = f"{model + ': ' if len(results) > 1 else ''}{names[0]} and layer-output attribution per layer"
        fig = position_histograms(
            r.offsets, r.histograms[measure], r.histograms[ATTRIBUTION], layers, window, 3, title, names
        )
        chart(fig, f"aggregation_histograms_{measure}", f"lg_agg_hist{i}")


def aggregation_section(
    page: CorpusPage[PositionOptions, Shown[AggregationResult]],
    lm: LoadedModel,
    given: Inputs[PositionOptions],
    second: Second,
) -> None:
    """Issue 14: each measure's agreement with layer-output attribution per layer, centres of mass, histograms."""
    st.subheader("Global aggregation")
    st.caption(
        "Raw attention, the value-weighted norms N and N_ResLN, and their rollouts, each compared per layer with "
        "layer-output attribution (how much each input token contributes to the layer's output vectors): "
        "Spearman solid, Pearson dashed, mean over query rows and inputs (METHODS §13). Same mode and probes as the other tabs."
    )
    cite_methods(13)
    results = {v.model: v.result for v in page.results(lm, given, second)}
    if not results:
        if given.choice is None and given.loaded is None:
            st.info(
                "Nothing to show here yet: choose a corpus in the sidebar (a loaded positions result file "
                "switches the corpus off), or load an aggregation result file."
            )
        return
    aggregation_figures(results)
    table = aggregation_table(results)
    data_table(table, key="lg_agg_table")
    download_table(table, "aggregation_per_layer", key="lg_agg_table_dl")
    measure = bind([AGG_MEASURE])["agg_measure"]
    st.selectbox("Measure for the histograms", list(MEASURES), format_func=MEASURE_NAMES.get, key=AGG_MEASURE.key)
    aggregation_histograms(results, measure)
    download_json({m: r.to_json() for m, r in results.items()}, "aggregation", key="lg_agg_json_dl")
