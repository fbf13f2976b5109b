"""Local versus global: attention over relative position against Hidden Token Attribution (Pascual et al. 2021)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.local_global.aggregation_tab import (
    NO_COMMON_LAYER,
    aggregation_options,
    aggregation_section,
    causal_offsets_text,
    per_input_cost,
)
from app_pages.local_global.attribution_example import example_section
from attnlib.analyses.aggregation import AggregationOptions, AggregationResult
from attnlib.analyses.positions import (
    CORRELATIONS,
    LongAttributionReport,
    PositionOptions,
    PositionsResult,
    reporting_long_attribution,
)
from attnlib.core.families import unsupported_reason
from attnlib.core.model import LoadedModel
from attnlib.present.tables import layer_values
from attnlib.views.positions import (
    center_of_mass_chart,
    compared_heatmaps,
    compared_lines,
    correlation_heatmaps,
    median_correlation_chart,
    position_histograms,
)
from ui.sources.compare import difference_line
from ui.sources.corpus_page import CorpusPage, Shown, T, one_corpus
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import AnalysisForm, Option, bind, field_option, lazy_tabs
from ui.sources.result_source import Bar, FromFile, run_in_file
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.family_notes import encoder_part_notes, local_layers_note
from ui.widgets.methods import cite_methods
from ui.widgets.page_tabs import LOCAL_GLOBAL
from ui.widgets.progress import estimated

KEY = "local_global"
MODE_LABELS = {"estimate": "estimate (random probes, fast)", "exact": "exact (forward mode, slow)"}
DEFAULTS = PositionOptions()
FIELDS = {
    "mode": field_option(DEFAULTS, "mode", "lg_mode", "mode", choices=list(MODE_LABELS)),
    "probes": field_option(DEFAULTS, "probes", "lg_k", "probes", lo=1, hi=256),
    "drop_special": field_option(DEFAULTS, "drop_special", "lg_drop", "drop"),
    "identifiable_only": field_option(DEFAULTS, "identifiable_only", "lg_ident", "ident"),
}
FORM = AnalysisForm(DEFAULTS, FIELDS, "lg", fixed=("seed",))  # the seed stays the command's: aggregation shares it
TABS = LOCAL_GLOBAL
TAB = Option("lg_tab", "tab", TABS["com"], TABS, omit_default=True)


@contextmanager
def long_attribution_reported() -> Iterator[None]:
    """While a corpus runs: a long input's sampled attribution says how long it takes and shows how far it is."""
    with estimated("Sampled attribution") as (say, rows), reporting_long_attribution(LongAttributionReport(say, rows)):
        yield


def options_sidebar(head_dim: int, attribution_refused: bool = False) -> PositionOptions:
    """Attribution and filtering options, kept in the URL."""
    options = FORM.bind()
    with st.sidebar:
        st.subheader("Attribution")
        if attribution_refused:
            st.caption("Not available for this model's family: the mode and probes are not used.")
        st.radio(
            "Mode for the corpus",
            list(MODE_LABELS),
            format_func=MODE_LABELS.get,
            key=FIELDS["mode"].key,
            help="Estimate: k random probes per token (METHODS §9). Exact: one forward-mode derivative per "
            "input coordinate (hidden size per token instead of k); with the default model and k = 12 "
            "about 20 times slower.",
        )
        st.number_input("Probes per token (k)", 1, 256, key=FIELDS["probes"].key, disabled=options.mode == "exact")
        st.checkbox(
            "Drop [CLS]/[SEP] from the histograms",
            key=FIELDS["drop_special"].key,
            help="Leaves special tokens out as queries and as keys of the histograms and centres of mass.",
        )
        st.checkbox(
            f"Keep only inputs of at most {head_dim} tokens",
            key=FIELDS["identifiable_only"].key,
            help="The head dimension: longer inputs have non-identifiable attention (Brunner et al. 2020). "
            "Pascual et al. kept only such inputs.",
        )
        FORM.other_widgets()
    return options if options.mode == "estimate" else replace(options, probes=DEFAULTS.probes)  # no k in exact


Results = dict[str, PositionsResult]  # model name -> its result, first model first, as the views draw them


def positions_cost(lm: LoadedModel, choice: CorpusChoice, options: PositionOptions) -> str:
    """What computing the positions of a corpus costs, said before it starts."""
    name = lm.facts.name
    if lm.facts.causal and unsupported_reason(lm.encoder.config, "hta") is not None:
        return f"{name}: attention histograms of the corpus (a decoder: no attribution)."
    return f"{name}: each input needs its own attribution run ({per_input_cost(options.mode)} per input)."


def loaded(found: FromFile[T]) -> Shown[T]:
    """A result file's result, said to be loaded from it, with the run it holds."""
    return Shown(
        found.model,
        found.value,
        found.corpus,
        f"loaded from {found.name}",
        run=run_in_file(found.record, read=found.value),
    )


def positions_file(found: FromFile[PositionsResult], options: PositionOptions) -> Shown[PositionsResult]:
    """A `positions` result file's statistics."""
    return loaded(found)


POSITIONS_PAGE: CorpusPage[PositionOptions, Shown[PositionsResult]] = CorpusPage(
    KEY,
    "positions",
    options=lambda lm, from_file: options_sidebar(
        lm.facts.head_dim, unsupported_reason(lm.encoder.config, "hta") is not None
    ),
    from_file=positions_file,
    default_limit=100,
    section="positions",
    first_needed=False,  # the second model's result is shown while the first waits for its Compute button
    bar=Bar("Running attribution ({model})", around=long_attribution_reported),
    ask_first=positions_cost,
    refusal="{model}: {error}",
)


def aggregation_cost(lm: LoadedModel, choice: CorpusChoice, options: AggregationOptions) -> str:
    """What computing the aggregation of a corpus costs, said before it starts."""
    return (
        f"{lm.facts.name}: layer-output attribution of every layer needs its own run per input "
        f"({per_input_cost(options.mode)} per input on 2 CPU cores)."
    )


def aggregation_result(
    lm: LoadedModel, choice: CorpusChoice, options: PositionOptions
) -> Shown[AggregationResult] | None:
    """One model's aggregation result (the skeleton's: shipped, computed earlier, or computed when asked), its inputs
    and source said."""
    shown = AGGREGATION_PAGE.on_corpus(lm, choice, options)
    if shown is not None:
        st.caption(f"{shown.model}: {shown.result.n_inputs} inputs of {choice.label}; {shown.source}.")
    return shown


def aggregation_file(found: FromFile[AggregationResult], options: PositionOptions) -> Shown[AggregationResult]:
    """An `aggregation` result file's statistics, where they come from said."""
    st.caption(f"{found.model}: {found.value.n_inputs} inputs of {found.corpus}; loaded from {found.name}.")
    return loaded(found)


AGGREGATION_PAGE: CorpusPage[PositionOptions, Shown[AggregationResult]] = CorpusPage(
    "aggregation",
    "aggregation",
    options=lambda lm, from_file: PositionOptions(),  # never drawn: the tab takes Local vs global's options
    result=aggregation_result,
    from_file=aggregation_file,
    analysis_options=aggregation_options,
    section="aggregation",
    first_needed=False,
    bar=Bar("Running the model and layer-output attribution ({model})"),
    ask_first=aggregation_cost,
    refusal="{model}: {error}",
)


def summary_table(results: Results) -> pd.DataFrame:
    """The per-layer table of every model, a `model` column first."""
    tables = [r.shown_frame().assign(model=name) for name, r in results.items()]
    table = pd.concat(tables, ignore_index=True)
    return table[["model", *(c for c in table.columns if c != "model")]]


def positions_comparable(r: PositionsResult) -> dict[str, dict[str, float]]:
    """What the largest-difference line compares: centres of mass and median correlations per layer."""
    stats = {"attention centre of mass": r.attention_center_of_mass}
    if r.attribution_note:
        return {name: layer_values(values) for name, values in stats.items()}
    stats["input-contribution centre of mass"] = r.attribution_center_of_mass
    stats |= {f"median {name.replace('_', ' ')}": r.median_correlation(name) for name in CORRELATIONS}
    return {name: layer_values(values) for name, values in stats.items()}


def corpus_notes(r: PositionsResult, source: str, label: str, model: str = "") -> None:
    """Where the result comes from and which inputs it covers."""
    how = (
        f"estimate mode, k = {r.options.probes} random probes per token"
        if r.options.mode == "estimate"
        else "exact mode"
    )
    what = "attention only, no attribution" if r.attribution_note else f"attribution in {how}"
    st.caption(f"{model + ': ' if model else ''}{r.n_inputs} inputs of {label}; {what}; {source}.")
    if r.sampled and not r.attribution_note:
        st.caption(
            f"{model + ': ' if model else ''}attribution of {r.attribution_inputs_sampled} long inputs from "
            f"{r.attribution_rows_sampled} sampled query rows (METHODS §19): the input-contribution bars carry ±1 "
            "standard error."
        )
    if r.causal:
        st.info(causal_offsets_text(model))
    if r.attribution_note:
        st.info(
            f"{model + ': ' if model else ''}no attribution (input contribution, correlations): {r.attribution_note}"
        )
    if r.n_truncated:
        st.warning(f"{r.n_truncated} inputs were longer than the model takes and were truncated to its maximum length.")
    if r.options.identifiable_only and r.n_skipped:
        st.caption(f"{r.n_skipped} inputs longer than {r.head_dim} tokens were left out.")
    elif r.n_longer:
        st.info(
            f"{r.n_longer} of {r.n_inputs} inputs are longer than the head dimension ({r.head_dim} tokens): for "
            "them attention is not identifiable, i.e. other attention rows would give the same output "
            "(Brunner et al. 2020). Tick *Keep only inputs of at most "
            f"{r.head_dim} tokens* in the sidebar to do as Pascual et al. did."
        )


def centre_of_mass_section(results: Results) -> None:
    """Centres of mass per layer, chart and table (one line per model and quantity when two are compared)."""
    st.subheader("Centre of mass per layer")
    st.caption(
        "Negative: the heads look back at earlier tokens; positive: ahead. Mean over the heads of each layer "
        "(Pascual et al. Fig. 4 and 5)."
    )
    if not next(iter(results.values())).options.drop_special:
        st.caption(
            "Heads that park attention on [CLS] (or on the final [SEP]) pull the centre of mass far to the "
            "left (or right): a query at position i finds [CLS] at offset -i, the far offsets occur almost "
            "only between a special token and the other end of the input, and dividing each offset by how "
            "often it occurs gives them full weight. Tick *Drop [CLS]/[SEP]* in the sidebar to see the "
            "pattern among the words."
        )
    if len(results) == 1:
        r = next(iter(results.values()))
        fig = center_of_mass_chart(
            r.attention_center_of_mass, None if r.attribution_note else r.attribution_center_of_mass
        )
    else:
        titles = {"attention": "attention", "attribution": "input contribution (HTA)"}
        lines = {
            m: {"attention": r.attention_center_of_mass}
            | ({} if r.attribution_note else {"attribution": r.attribution_center_of_mass})
            for m, r in results.items()
        }
        fig = compared_lines(lines, titles, "centre of mass (offset)", columns=2)
    chart(fig, "centre_of_mass", "lg_com")
    table = summary_table(results)
    data_table(table, key="lg_table")
    download_table(table, "local_global_per_layer", key="lg_table_dl")


def histogram_options(results: Results) -> tuple[int, int]:
    """The offset window and the layer of the per-head grid, kept in the URL."""
    n_layers = max(r.attention_histograms.shape[0] for r in results.values())  # a loaded file may be of another model
    widest = max(max(int(np.abs(r.offsets).max()) if len(r.offsets) else 1, 1) for r in results.values())
    window, layer = (
        Option("lg_window", "window", min(10, widest), lo=1, hi=widest),
        Option("lg_layer", "layer", 1, lo=1, hi=n_layers),
    )
    values = bind([window, layer])
    st.slider("Offsets shown (±)", 1, widest, key=window.key)
    st.select_slider("Layer for the per-head grids", list(range(1, n_layers + 1)), key=layer.key)
    return values["window"], values["layer"]


def model_histograms(r: PositionsResult, window: int, layer: int, model: str, key: str) -> None:
    """One model's histograms per layer (mean over heads) and per head of one layer."""
    n_layers, n_heads = r.attention_histograms.shape[:2]
    prefix = f"{model}: " if model else ""
    layers = [f"layer {l + 1}" for l in range(n_layers)]
    means = (r.attention_histograms.mean(1), None if r.attribution_note else r.attribution_histograms.mean(1))
    errors = r.attribution_stderr if r.sampled and not r.attribution_note else None
    title = f"{prefix}per layer (mean over heads)"
    local = r.windows  # local layers (ModernBERT): attention stops at the window
    # the mean of the heads' standard errors bounds the standard error of their mean (the heads share the rows)
    fig = position_histograms(
        r.offsets,
        *means,
        layers,
        window,
        min(n_layers, 3),
        title,
        windows=local,
        attribution_errors=None if errors is None else errors.mean(1),
    )
    chart(fig, "histograms_per_layer", f"{key}_layers")
    l = min(layer, n_layers)
    heads = [f"{l}-{h + 1}" for h in range(n_heads)]
    maps = (r.attention_histograms[l - 1], None if r.attribution_note else r.attribution_histograms[l - 1])
    title = f"{prefix}layer {l}, every head (layer-head)"
    fig = position_histograms(
        r.offsets,
        *maps,
        heads,
        max_offset=window,
        title=title,
        windows=[r.window(l - 1)] * n_heads,
        attribution_errors=None if errors is None else errors[l - 1],
    )
    chart(fig, f"histograms_layer_{l}", f"{key}_heads")


def histogram_section(results: Results) -> None:
    """Relative-position histograms per layer and, for one layer, per head; one set per model."""
    st.subheader("Relative-position histograms")
    st.caption(
        "Local (attention) and global (input contribution) side by side, same axes. Each offset "
        "(key minus query) is divided by how often it occurs (METHODS §8)."
    )
    if next(iter(results.values())).options.drop_special:
        st.caption("[CLS] and [SEP] are left out of the histograms and centres of mass (not of the correlations).")
    window, layer = histogram_options(results)
    for i, (model, r) in enumerate(results.items()):
        model_histograms(r, window, layer, model if len(results) > 1 else "", f"lg_hist{i}")


def correlation_figures(results: Results) -> None:
    """Per-head correlations (two heatmaps per model side by side when compared) and their medians per layer; a model
    without attribution is named and left out."""
    for model, r in results.items():
        if r.attribution_note:
            st.info(f"{model}: no correlations: {r.attribution_note}")
    results = {m: r for m, r in results.items() if not r.attribution_note}
    if not results:
        return
    local = "Attention vs previous-layer contribution (local, Pascual Fig. 1)"
    glob = "Attention vs input contribution (global, Pascual Fig. 6)"
    if len(results) == 1:
        c = next(iter(results.values())).correlation
        for side, title in (("previous", local), ("input", glob)):
            fig = correlation_heatmaps(c[f"pearson_{side}"], c[f"spearman_{side}"], title)
            chart(fig, f"correlation_{side}", f"lg_corr_{side}")
        medians = {name: next(iter(results.values())).median_correlation(name) for name in CORRELATIONS}
        chart(median_correlation_chart(medians, "Median over the heads of each layer"), "medians", "lg_corr_median")
        return
    for name in CORRELATIONS:
        title = f"{name.split('_')[0].title()}: {local if name.endswith('previous') else glob}"
        fig = compared_heatmaps({m: r.correlation[name] for m, r in results.items()}, title)
        chart(fig, f"correlation_{name}", f"lg_corr_{name}")
    lines = {m: {name: r.median_correlation(name) for name in CORRELATIONS} for m, r in results.items()}
    titles = {name: name.replace("_", " ") for name in CORRELATIONS}
    fig = compared_lines(lines, titles, "median over heads", title="Median over the heads of each layer", columns=2)
    chart(fig, "correlation_medians", "lg_corr_median")


def correlation_section(results: Results) -> None:
    """Attention against attribution: correlations per head and their medians per layer."""
    st.subheader("Attention against attribution")
    st.caption(
        "Per head, for every query row: the correlation between its attention row and its attribution row "
        "over the input tokens, averaged over rows and inputs (rows where either is constant are skipped)."
    )
    correlation_figures(results)
    data = next(iter(results.values())).to_json() if len(results) == 1 else {m: r.to_json() for m, r in results.items()}
    download_json(data, "local_global", key="lg_json_dl")


def corpus_summary(views: list[Shown[PositionsResult]]) -> Results:
    """Where each result comes from and, for two models, where they differ most; the results that have inputs."""
    if not views:
        return {}
    for v in views:
        corpus_notes(v.result, v.source, v.corpus, v.model if len(views) > 1 else "")
    results = {v.model: v.result for v in views if v.result.n_inputs}
    if not results:
        st.warning("No input is left to analyse.")
    if len(results) == 2:
        a, b = (positions_comparable(r) for r in results.values())
        difference_line(list(results), a, b, NO_COMMON_LAYER)
    return results


st.title("Local versus global")
st.markdown(
    "Attention shows what a head does **locally**, with the hidden vectors it is given; gradient attribution back "
    "to the input (Hidden Token Attribution) shows what it aggregates **globally**, from the input tokens. "
    "Pascual et al. (2021) found the two agree within a layer and drift apart with depth."
)
st.caption(
    'Layers and heads are numbered from 1 on this page ("layer-head", as in Clark et al. 2019); '
    "the library and its JSON count from 0. Definitions: METHODS §8 and §9."
)
cite_methods(8, 9)
CORPUS_SECTIONS = {
    TABS["com"]: centre_of_mass_section,
    TABS["histograms"]: histogram_section,
    TABS["correlation"]: correlation_section,
}
lm = current_model()
local_layers_note(lm.facts)
encoder_part_notes()
given, given_aggregation = one_corpus(lm, [POSITIONS_PAGE, AGGREGATION_PAGE])
results = corpus_summary(POSITIONS_PAGE.results(lm, given, POSITIONS_PAGE.second(lm, given)))
second_aggregation = AGGREGATION_PAGE.second(lm, given_aggregation)  # drawn on every run: an uploaded file stays
label, tab = lazy_tabs(TAB, list(TABS.values()))
with tab:
    if label == TABS["example"]:
        example_section(lm)
    elif label == TABS["aggregation"]:
        aggregation_section(AGGREGATION_PAGE, lm, given_aggregation, second_aggregation)
    elif results:
        CORPUS_SECTIONS[label](results)
