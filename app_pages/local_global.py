"""Local versus global: attention over relative position against Hidden Token Attribution (Pascual et al. 2021)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.attribution import DEFAULT_PROBES, Attribution, attribute, exact_seconds
from attnlib.model import LoadedModel
from attnlib.positions import CORRELATIONS, PositionOptions, PositionsResult, corpus_positions, positions_from_json
from attnlib.precomputed import shipped_example, shipped_result
from attnlib.runner import InputError, RunResult
from figures.positions import (
    center_of_mass_chart,
    correlation_heatmaps,
    example_rows_chart,
    median_correlation_chart,
    position_histograms,
)
from ui.corpus_picker import CorpusChoice, corpus_picker
from ui.downloads import download_figure, download_json, download_table
from ui.live_inputs import run_or_explain, text_inputs
from ui.model_sidebar import current_model, model_named
from ui.page_state import Option, bind
from ui.progress import progress
from ui.result_file import loaded_result

KEY = "local_global"
MODE_LABELS = {"estimate": "estimate (random probes, fast)", "exact": "exact (forward mode, slow)"}
MODE = Option("lg_mode", "mode", "estimate", list(MODE_LABELS))
PROBES = Option("lg_k", "probes", DEFAULT_PROBES, lo=1, hi=256)
DROP = Option("lg_drop", "drop", False)
IDENT = Option("lg_ident", "ident", False)
EXACT_EXAMPLE_MAX_SECONDS = 600


@st.cache_data(max_entries=8, show_spinner=False)
def _corpus_result(model_name: str, fingerprint: str, options: tuple, _inputs, _progress=None) -> dict:
    """Position statistics of a corpus, once per (model, corpus, options)."""
    return corpus_positions(model_named(model_name), _inputs, PositionOptions(*options), _progress).to_dict()


@st.cache_data(max_entries=4, show_spinner=False)
def _example_attribution(model_name: str, text_a: str, text_b: str) -> Attribution:
    """Exact Hidden Token Attribution of one sentence or pair."""
    return attribute(model_named(model_name), text_a, text_b.strip() or None, mode="exact")


def options_sidebar(head_dim: int) -> PositionOptions:
    """Attribution and filtering options, kept in the URL."""
    values = bind([MODE, PROBES, DROP, IDENT])
    with st.sidebar:
        st.subheader("Attribution")
        st.radio(
            "Mode for the corpus",
            list(MODE_LABELS),
            format_func=MODE_LABELS.get,
            key=MODE.key,
            help="Estimate: k random probes per token (METHODS §9). Exact: one forward-mode derivative per "
            "input coordinate (hidden size per token instead of k); with the default model and k = 12 "
            "about 20 times slower.",
        )
        st.number_input("Probes per token (k)", 1, 256, key=PROBES.key, disabled=values["mode"] == "exact")
        st.checkbox(
            "Drop [CLS]/[SEP] from the histograms",
            key=DROP.key,
            help="Leaves special tokens out as queries and as keys of the histograms and centres of mass.",
        )
        st.checkbox(
            f"Keep only inputs of at most {head_dim} tokens",
            key=IDENT.key,
            help="The head dimension: longer inputs have non-identifiable attention (Brunner et al. 2020). "
            "Pascual et al. kept only such inputs.",
        )
    probes = int(values["probes"]) if values["mode"] == "estimate" else DEFAULT_PROBES  # k means nothing in exact
    return PositionOptions(
        mode=values["mode"], probes=probes, drop_special=values["drop"], identifiable_only=values["ident"]
    )


def _shipped(model_name: str, choice: CorpusChoice, options: PositionOptions) -> PositionsResult | None:
    """The shipped result for this model, corpus and options, if there is one."""
    record = shipped_result("positions", model_name, choice.sha1, choice.n_inputs, vars(options))
    return None if record is None else positions_from_json(record.result)


def _offer(choice: CorpusChoice, options: PositionOptions, shipped: bool) -> bool:
    """Buttons that start a computation: recompute a shipped result, or compute one; whether one was pressed."""
    if shipped:
        return st.button(
            "Recompute",
            help="The result shown was precomputed by scripts/precompute.py; this computes it again here.",
        )
    per_input = "a few seconds" if options.mode == "estimate" else "a minute or more"
    st.info(f"Each input needs its own attribution run ({per_input} per input on 2 CPU cores).")
    return st.button(f"Compute for {choice.n_inputs} inputs", type="primary")


def corpus_result(
    model_name: str, choice: CorpusChoice, options: PositionOptions
) -> tuple[PositionsResult | None, str]:
    """The corpus result: shipped, already computed in this session, or computed on request."""
    key = (model_name, choice.fingerprint, tuple(vars(options).values()))
    done = st.session_state.setdefault("lg_done", set())
    if key not in done:
        shipped = _shipped(model_name, choice, options)
        if not _offer(choice, options, shipped is not None):
            return shipped, "precomputed (scripts/precompute.py)"
    try:
        with progress("Running attribution") as report:
            result = _corpus_result(model_name, choice.fingerprint, key[2], choice.inputs, report)
    except (InputError, ValueError) as exc:  # ValueError: a model whose attention HTA cannot follow
        st.error(str(exc))
        return None, ""
    done.add(key)
    return PositionsResult.from_dict(result), "computed here"


def _summary_table(r: PositionsResult) -> pd.DataFrame:
    """Per layer (1-based): centres of mass and median correlations."""
    table = pd.DataFrame(
        {
            "layer": np.arange(1, len(r.attention_center_of_mass) + 1),
            "attention centre of mass": r.attention_center_of_mass,
            "input-contribution centre of mass": r.attribution_center_of_mass,
        }
    )
    for name in CORRELATIONS:
        table[f"median {name.replace('_', ' ')}"] = r.median_correlation(name)
    return table.round(4)


def _chart(fig, name: str, key: str) -> None:
    """A figure and its HTML download."""
    st.plotly_chart(fig, key=key)
    download_figure(fig, name, key=f"{key}_dl")


def corpus_notes(r: PositionsResult, source: str, label: str) -> None:
    """Where the result comes from and which inputs it covers."""
    how = (
        f"estimate mode, k = {r.options.probes} random probes per token"
        if r.options.mode == "estimate"
        else "exact mode"
    )
    st.caption(f"{r.n_inputs} inputs of {label}; attribution in {how}; {source}.")
    if r.options.identifiable_only and r.n_skipped:
        st.caption(f"{r.n_skipped} inputs longer than {r.head_dim} tokens were left out.")
    elif r.n_longer:
        st.info(
            f"{r.n_longer} of {r.n_inputs} inputs are longer than the head dimension ({r.head_dim} tokens): for "
            "them attention is not identifiable, i.e. other attention rows would give the same output "
            "(Brunner et al. 2020). Tick *Keep only inputs of at most "
            f"{r.head_dim} tokens* in the sidebar to do as Pascual et al. did."
        )
    if r.options.drop_special:
        st.caption("[CLS] and [SEP] are left out of the histograms and centres of mass (not of the correlations).")


def centre_of_mass_section(r: PositionsResult) -> None:
    """Centres of mass per layer, chart and table."""
    st.subheader("Centre of mass per layer")
    st.caption(
        "Negative: the heads look back at earlier tokens; positive: ahead. Mean over the heads of each layer "
        "(Pascual et al. Fig. 4 and 5)."
    )
    if not r.options.drop_special:
        st.caption(
            "Heads that park attention on [CLS] (or on the final [SEP]) pull the centre of mass far to the "
            "left (or right): a query at position i finds [CLS] at offset -i, the far offsets occur almost "
            "only between a special token and the other end of the input, and dividing each offset by how "
            "often it occurs gives them full weight. Tick *Drop [CLS]/[SEP]* in the sidebar to see the "
            "pattern among the words."
        )
    _chart(center_of_mass_chart(r.attention_center_of_mass, r.attribution_center_of_mass), "centre_of_mass", "lg_com")
    table = _summary_table(r)
    st.dataframe(table, hide_index=True)
    download_table(table, "local_global_per_layer", key="lg_table_dl")


def histogram_section(r: PositionsResult) -> None:
    """Relative-position histograms per layer and, for one layer, per head."""
    st.subheader("Relative-position histograms")
    st.caption(
        "Local (attention) and global (input contribution) side by side, same axes. Each offset "
        "(key minus query) is divided by how often it occurs (METHODS §8)."
    )
    n_layers, n_heads = r.attention_histograms.shape[:2]  # the result's own: a loaded file may be of another model
    widest = max(int(r.offsets.max()) if len(r.offsets) else 1, 1)
    window, layer = (
        Option("lg_window", "window", min(10, widest), lo=1, hi=widest),
        Option("lg_layer", "layer", 1, lo=1, hi=n_layers),
    )
    values = bind([window, layer])
    st.slider("Offsets shown (±)", 1, widest, key=window.key)
    means = (r.attention_histograms.mean(1), r.attribution_histograms.mean(1))
    layers = [f"layer {l + 1}" for l in range(n_layers)]
    fig = position_histograms(
        r.offsets,
        *means,
        layers,
        max_offset=values["window"],
        columns=min(n_layers, 3),
        title="Per layer (mean over heads)",
    )
    _chart(fig, "histograms_per_layer", "lg_hist_layers")
    st.select_slider("Layer for the per-head grid", list(range(1, n_layers + 1)), key=layer.key)
    l = values["layer"]
    heads = [f"{l}-{h + 1}" for h in range(n_heads)]
    maps = (r.attention_histograms[l - 1], r.attribution_histograms[l - 1])
    fig = position_histograms(
        r.offsets, *maps, heads, max_offset=values["window"], title=f"Layer {l}, every head (layer-head)"
    )
    _chart(fig, f"histograms_layer_{l}", "lg_hist_heads")


def correlation_section(r: PositionsResult) -> None:
    """Attention against attribution: correlations per head and their medians per layer."""
    st.subheader("Attention against attribution")
    st.caption(
        "Per head, for every query row: the correlation between its attention row and its attribution row "
        "over the input tokens, averaged over rows and inputs (rows where either is constant are skipped)."
    )
    c = r.correlation
    local = "Attention vs previous-layer contribution (local, Pascual Fig. 1)"
    _chart(
        correlation_heatmaps(c["pearson_previous"], c["spearman_previous"], local),
        "correlation_previous",
        "lg_corr_prev",
    )
    glob = "Attention vs input contribution (global, Pascual Fig. 6)"
    _chart(correlation_heatmaps(c["pearson_input"], c["spearman_input"], glob), "correlation_input", "lg_corr_input")
    medians = {name: r.median_correlation(name) for name in CORRELATIONS}
    _chart(
        median_correlation_chart(medians, "Median over the heads of each layer"),
        "correlation_medians",
        "lg_corr_median",
    )
    download_json(r.to_dict(), "local_global", key="lg_json_dl")


def corpus_section(r: PositionsResult, source: str, label: str) -> None:
    """Centres of mass, histograms and correlations of the corpus."""
    corpus_notes(r, source, label)
    if r.n_inputs == 0:
        st.warning("No input is left to analyse.")
        return
    centre_of_mass_section(r)
    histogram_section(r)
    correlation_section(r)


def example_attribution(lm: LoadedModel, run: RunResult, text_a: str, text_b: str) -> Attribution | None:
    """The shipped example, else exact attribution computed on request; None (with a message) until there is one."""
    f = lm.facts
    shipped = shipped_example(f.name, text_a, text_b)
    if shipped is not None:
        return shipped
    seconds = exact_seconds(f, run.n)
    if seconds > EXACT_EXAMPLE_MAX_SECONDS:
        st.warning(
            f"Exact attribution of {run.n} tokens with {f.name} would take about {seconds / 60:.0f} minutes "
            f"on 2 CPU cores; this page stops at {EXACT_EXAMPLE_MAX_SECONDS // 60}. Shorten the text, or run "
            "`python -m attnlib hta --mode exact` from the command line."
        )
        return None
    done = st.session_state.setdefault("lg_examples", set())
    prompt = st.empty()  # the offer disappears once the attribution is there
    if (f.name, text_a, text_b) not in done:
        with prompt.container():
            st.info(
                f"Exact attribution of these {run.n} tokens takes about {max(seconds, 1):.0f} s on 2 CPU "
                "cores (it grows with the square of the length)."
            )
            if not st.button("Compute exact attribution", key="lg_example_go"):
                return None
    try:
        with st.spinner("Computing exact Hidden Token Attribution…"):
            attribution = _example_attribution(f.name, text_a, text_b)
    except (InputError, ValueError) as exc:
        st.error(str(exc))
        return None
    done.add((f.name, text_a, text_b))
    prompt.empty()
    return attribution


def example_head(lm: LoadedModel, run: RunResult) -> tuple[int, int, int]:
    """The example's layer, head and query token (0-based), chosen in three widgets kept in the URL."""
    f = lm.facts
    layer = Option("lg_ex_layer", "ex_layer", 1, lo=1, hi=f.n_layers)
    head = Option("lg_ex_head", "ex_head", 1, lo=1, hi=f.n_heads)
    query = Option("lg_ex_query", "ex_query", 0, lo=0, hi=run.n - 1)
    values = bind([layer, head, query])
    c1, c2, c3 = st.columns(3)
    c1.number_input("Layer", 1, f.n_layers, key=layer.key)
    c2.number_input("Head", 1, f.n_heads, key=head.key)
    c3.selectbox("Query token", list(range(run.n)), format_func=lambda i: f"{i}: {run.tokens[i]}", key=query.key)
    return values["ex_layer"] - 1, values["ex_head"] - 1, values["ex_query"]


def example_section(lm: LoadedModel) -> None:
    """One sentence or pair: a head's attention row beside its attribution rows, exact mode."""
    f = lm.facts
    st.subheader("One example, exact mode")
    st.caption(
        "For one head and one query token: the attention row, and how much each input token contributes to "
        "that head's output there (input contribution) or to it from the layer's own input (previous-layer)."
    )
    text_a, text_b = text_inputs()
    run = run_or_explain(f.name, text_a, text_b)
    attribution = None if run is None else example_attribution(lm, run, text_a, text_b)
    if run is None or attribution is None:
        return
    if run.n > f.head_dim:
        st.caption(
            f"This input has {run.n} tokens, more than the head dimension ({f.head_dim}): its attention rows "
            "are not identifiable (Brunner et al. 2020)."
        )
    l, h, j = example_head(lm, run)
    rows = {
        "attention": run.attentions[l, h, j],
        "input": attribution.input[l, h, j],
        "previous": attribution.previous[l, h, j],
    }
    fig = example_rows_chart(run.tokens, *rows.values(), f"Head {l + 1}-{h + 1}, query {j}: {run.tokens[j]!r}")
    _chart(fig, f"example_{l + 1}-{h + 1}_{j}", "lg_example")
    as_lists = {name: row.tolist() for name, row in rows.items()}
    download_json(
        {"tokens": attribution.tokens, "layer": l, "head": h, "query": j, **as_lists}, "example", key="lg_example_json"
    )


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
lm = current_model()
options = options_sidebar(lm.facts.head_dim)
loaded = loaded_result(KEY, "positions", lambda record: positions_from_json(record.result))
if loaded is not None:
    corpus_section(loaded[1], f"loaded from a result file ({loaded[0].model})", loaded[0].corpus.get("name", "?"))
elif (choice := corpus_picker(KEY, default_limit=100)) is not None:
    result, source = corpus_result(lm.facts.name, choice, options)
    if result is not None:
        corpus_section(result, source, choice.label)
st.divider()
example_section(lm)
