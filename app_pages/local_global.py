"""Local versus global: attention over relative position against Hidden Token Attribution (Pascual et al. 2021)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.attribution import DEFAULT_PROBES, Attribution, attribute
from attnlib.model import DEFAULT_MODEL
from attnlib.positions import CORRELATIONS, PositionOptions, PositionsResult, corpus_positions, positions_from_json
from attnlib.runner import InputError
from figures.positions import (
    center_of_mass_chart,
    correlation_heatmaps,
    example_rows_chart,
    median_correlation_chart,
    position_histograms,
)
from ui.corpus_picker import corpus_picker
from ui.downloads import download_figure, download_json, download_table
from ui.live_inputs import run_or_explain, text_inputs
from ui.model_sidebar import cached_model, current_model, local_models_allowed
from ui.result_file import loaded_result

ROOT = Path(__file__).resolve().parents[1]
PRECOMPUTED = ROOT / "data" / "precomputed" / f"positions_{DEFAULT_MODEL}_classroom.json"
MODE_LABELS = {"estimate": "estimate (random probes, fast)", "exact": "exact (forward mode, slow)"}
EXACT_SECONDS_AT_34_TOKENS = 32  # benchmarks/bench_hta.py: the default model on 2 CPU cores
EXACT_EXAMPLE_MAX_SECONDS = 600


def _exact_seconds(f, n: int) -> float:
    """Rough time of an exact attribution on 2 CPU cores: n * hidden directions, each costing ~ n * hidden^2 * layers."""
    return EXACT_SECONDS_AT_34_TOKENS * (n / 34) ** 2 * (f.hidden_size / 384) ** 3 * f.n_layers / 6


@st.cache_data(show_spinner=False)
def _precomputed() -> dict:
    """The shipped results for the default model on the classroom set (empty if the file is missing)."""
    return json.loads(PRECOMPUTED.read_text()) if PRECOMPUTED.is_file() else {}


def _shipped_result(
    model_name: str, fingerprint: str, n_inputs: int, options: PositionOptions
) -> PositionsResult | None:
    """The precomputed result when model, corpus content, size and options all match it.

    Keeping only inputs up to the head dimension changes nothing when no input is longer, so such a request
    is answered from the result over all inputs.
    """
    data = _precomputed()
    if model_name != data.get("model"):
        return None
    digest = fingerprint.split(":")[0]
    for entry in data.get("corpora", {}).values():
        if entry["sha1"] != digest or entry["n_total"] != n_inputs:
            continue
        for stored in entry["results"]:
            result = PositionsResult.from_dict(stored)
            same = replace(result.options, identifiable_only=options.identifiable_only) == options
            if result.options == options or (same and options.identifiable_only and result.n_longer == 0):
                result.options = options
                return result
    return None


@st.cache_data(max_entries=8, show_spinner=False)
def _corpus_result(model_name: str, fingerprint: str, options: tuple, _inputs, _progress=None) -> dict:
    """Position statistics of a corpus, once per (model, corpus, options)."""
    lm = cached_model(model_name, local_models_allowed())
    return corpus_positions(lm, _inputs, PositionOptions(*options), _progress).to_dict()


@st.cache_data(max_entries=4, show_spinner=False)
def _example_attribution(model_name: str, text_a: str, text_b: str) -> Attribution:
    """Exact Hidden Token Attribution of one sentence or pair."""
    lm = cached_model(model_name, local_models_allowed())
    return attribute(lm, text_a, text_b.strip() or None, mode="exact")


def _shipped_example(model_name: str, text_a: str, text_b: str) -> Attribution | None:
    """The precomputed exact example when model and texts match it."""
    ex = _precomputed().get("example")
    if not ex or model_name != _precomputed().get("model") or (text_a, text_b.strip()) != (ex["text_a"], ex["text_b"]):
        return None
    return Attribution(
        ex["tokens"], np.array(ex["input"], np.float32), np.array(ex["previous"], np.float32), "exact", None
    )


def _state(key: str, default, cast):
    """A widget value initialised from the URL once, then kept in session state."""
    if key not in st.session_state:
        try:
            st.session_state[key] = cast(st.query_params.get(key, default))
        except (TypeError, ValueError):
            st.session_state[key] = default
    return st.session_state[key]


def _flag(value) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def _options_sidebar(head_dim: int) -> PositionOptions:
    """Attribution and filtering options, kept in the URL."""
    _state("lg_mode", "estimate", lambda v: v if v in MODE_LABELS else "estimate")
    _state("lg_k", DEFAULT_PROBES, lambda v: min(max(int(v), 1), 256))
    _state("lg_drop", False, _flag)
    _state("lg_ident", False, _flag)
    with st.sidebar:
        st.subheader("Attribution")
        st.radio(
            "Mode for the corpus",
            list(MODE_LABELS),
            format_func=MODE_LABELS.get,
            key="lg_mode",
            help="Estimate: k random probes per token (METHODS §9). Exact: one forward-mode derivative per "
            "input coordinate (hidden size per token instead of k); with the default model and k = 12 "
            "about 20 times slower.",
        )
        st.number_input("Probes per token (k)", 1, 256, key="lg_k", disabled=st.session_state.lg_mode == "exact")
        st.checkbox(
            "Drop [CLS]/[SEP] from the histograms",
            key="lg_drop",
            help="Leaves special tokens out as queries and as keys of the histograms and centres of mass.",
        )
        st.checkbox(
            f"Keep only inputs of at most {head_dim} tokens",
            key="lg_ident",
            help="The head dimension: longer inputs have non-identifiable attention (Brunner et al. 2020). "
            "Pascual et al. kept only such inputs.",
        )
    for key in ("lg_mode", "lg_k", "lg_drop", "lg_ident"):
        st.query_params[key] = str(st.session_state[key])
    s = st.session_state
    probes = int(s.lg_k) if s.lg_mode == "estimate" else DEFAULT_PROBES  # k means nothing in exact mode
    return PositionOptions(
        mode=s.lg_mode, probes=probes, drop_special=bool(s.lg_drop), identifiable_only=bool(s.lg_ident)
    )


def _get_result(model_name: str, choice, options: PositionOptions) -> tuple[PositionsResult | None, str]:
    """The corpus result: shipped, already computed in this session, or computed on request."""
    key = (model_name, choice.fingerprint, tuple(vars(options).values()))
    done = st.session_state.setdefault("lg_done", set())
    shipped = _shipped_result(model_name, choice.fingerprint, len(choice.inputs), options)
    recompute = False
    if shipped is not None and key not in done:
        recompute = st.button(
            "Recompute",
            help="The result shown was precomputed by scripts/precompute_positions.py; this computes it again here.",
        )
        if not recompute:
            return shipped, "precomputed (scripts/precompute_positions.py)"
    if key not in done and not recompute:
        per_input = "a few seconds" if options.mode == "estimate" else "a minute or more"
        st.info(f"Each input needs its own attribution run ({per_input} per input on 2 CPU cores).")
        if not st.button(f"Compute for {len(choice.inputs)} inputs", type="primary"):
            return None, ""
    bar = st.progress(0.0, text="Running attribution…")

    def progress(done_inputs: int, total: int) -> None:
        bar.progress(done_inputs / total, text=f"{done_inputs} of {total} inputs")

    try:
        result = _corpus_result(model_name, choice.fingerprint, tuple(vars(options).values()), choice.inputs, progress)
    except (InputError, ValueError) as exc:  # ValueError: a model whose attention HTA cannot follow
        st.error(str(exc))
        return None, ""
    finally:
        bar.empty()
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


def _corpus_section(lm, r: PositionsResult, source: str, label: str) -> None:
    """Centres of mass, histograms and correlations of the corpus."""
    # the result's own sizes: a loaded result file may come from another model than the sidebar's
    f = SimpleNamespace(
        n_layers=r.attention_histograms.shape[0], n_heads=r.attention_histograms.shape[1], head_dim=r.head_dim
    )
    how = (
        f"estimate mode, k = {r.options.probes} random probes per token"
        if r.options.mode == "estimate"
        else "exact mode"
    )
    st.caption(f"{r.n_inputs} inputs of {label}; attribution in {how}; {source}.")
    if r.options.identifiable_only and r.n_skipped:
        st.caption(f"{r.n_skipped} inputs longer than {f.head_dim} tokens were left out.")
    elif r.n_longer:
        st.info(
            f"{r.n_longer} of {r.n_inputs} inputs are longer than the head dimension ({f.head_dim} tokens): for "
            "them attention is not identifiable, i.e. other attention rows would give the same output "
            "(Brunner et al. 2020). Tick *Keep only inputs of at most "
            f"{f.head_dim} tokens* in the sidebar to do as Pascual et al. did."
        )
    if r.options.drop_special:
        st.caption("[CLS] and [SEP] are left out of the histograms and centres of mass (not of the correlations).")
    if r.n_inputs == 0:
        st.warning("No input is left to analyse.")
        return

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
    fig = center_of_mass_chart(r.attention_center_of_mass, r.attribution_center_of_mass)
    st.plotly_chart(fig, key="lg_com")
    download_figure(fig, "centre_of_mass", key="lg_com_dl")
    table = _summary_table(r)
    st.dataframe(table, hide_index=True)
    download_table(table, "local_global_per_layer", key="lg_table_dl")

    st.subheader("Relative-position histograms")
    st.caption(
        "Local (attention) and global (input contribution) side by side, same axes. Each offset "
        "(key minus query) is divided by how often it occurs (METHODS §8)."
    )
    max_offset = int(r.offsets.max()) if len(r.offsets) else 1
    window = st.slider("Offsets shown (±)", 1, max(max_offset, 1), min(10, max(max_offset, 1)), key="lg_window")
    layer_means = (r.attention_histograms.mean(1), r.attribution_histograms.mean(1))
    fig = position_histograms(
        r.offsets,
        *layer_means,
        [f"layer {l + 1}" for l in range(f.n_layers)],
        max_offset=window,
        columns=min(f.n_layers, 3),
        title="Per layer (mean over heads)",
    )
    st.plotly_chart(fig, key="lg_hist_layers")
    download_figure(fig, "histograms_per_layer", key="lg_hist_layers_dl")
    layer = _state("lg_layer", 1, lambda v: min(max(int(v), 1), f.n_layers))
    st.select_slider("Layer for the per-head grid", list(range(1, f.n_layers + 1)), key="lg_layer")
    st.query_params["lg_layer"] = str(st.session_state.lg_layer)
    layer = st.session_state.lg_layer
    fig = position_histograms(
        r.offsets,
        r.attention_histograms[layer - 1],
        r.attribution_histograms[layer - 1],
        [f"{layer}-{h + 1}" for h in range(f.n_heads)],
        max_offset=window,
        title=f"Layer {layer}, every head (layer-head)",
    )
    st.plotly_chart(fig, key="lg_hist_heads")
    download_figure(fig, f"histograms_layer_{layer}", key="lg_hist_heads_dl")

    st.subheader("Attention against attribution")
    st.caption(
        "Per head, for every query row: the correlation between its attention row and its attribution row "
        "over the input tokens, averaged over rows and inputs (rows where either is constant are skipped)."
    )
    c = r.correlation
    fig = correlation_heatmaps(
        c["pearson_previous"],
        c["spearman_previous"],
        "Attention vs previous-layer contribution (local, Pascual Fig. 1)",
    )
    st.plotly_chart(fig, key="lg_corr_prev")
    download_figure(fig, "correlation_previous", key="lg_corr_prev_dl")
    fig = correlation_heatmaps(
        c["pearson_input"], c["spearman_input"], "Attention vs input contribution (global, Pascual Fig. 6)"
    )
    st.plotly_chart(fig, key="lg_corr_input")
    download_figure(fig, "correlation_input", key="lg_corr_input_dl")
    fig = median_correlation_chart(
        {name: r.median_correlation(name) for name in CORRELATIONS}, "Median over the heads of each layer"
    )
    st.plotly_chart(fig, key="lg_corr_median")
    download_figure(fig, "correlation_medians", key="lg_corr_median_dl")
    download_json(r.to_dict(), "local_global", key="lg_json_dl")


def _example_section(lm) -> None:
    """One sentence or pair: a head's attention row beside its attribution rows, exact mode."""
    f = lm.facts
    st.subheader("One example, exact mode")
    st.caption(
        "For one head and one query token: the attention row, and how much each input token contributes to "
        "that head's output there (input contribution) or to it from the layer's own input (previous-layer)."
    )
    text_a, text_b = text_inputs()
    run = run_or_explain(f.name, text_a, text_b)
    if run is None:
        return
    attribution = _shipped_example(f.name, text_a, text_b)
    if attribution is None:
        key = (f.name, text_a, text_b)
        done = st.session_state.setdefault("lg_examples", set())
        seconds = _exact_seconds(f, run.n)
        if seconds > EXACT_EXAMPLE_MAX_SECONDS:
            st.warning(
                f"Exact attribution of {run.n} tokens with {f.name} would take about {seconds / 60:.0f} minutes "
                f"on 2 CPU cores; this page stops at {EXACT_EXAMPLE_MAX_SECONDS // 60}. Shorten the text, or run "
                "`python -m attnlib hta --mode exact` from the command line."
            )
            return
        prompt = st.empty()  # the offer disappears once the attribution is there
        if key not in done:
            with prompt.container():
                st.info(
                    f"Exact attribution of these {run.n} tokens takes about {max(seconds, 1):.0f} s on 2 CPU "
                    "cores (it grows with the square of the length)."
                )
                if not st.button("Compute exact attribution", key="lg_example_go"):
                    return
        with st.spinner("Computing exact Hidden Token Attribution…"):
            try:
                attribution = _example_attribution(f.name, text_a, text_b)
            except (InputError, ValueError) as exc:
                st.error(str(exc))
                return
        done.add(key)
        prompt.empty()
    if run.n > f.head_dim:
        st.caption(
            f"This input has {run.n} tokens, more than the head dimension ({f.head_dim}): its attention rows "
            "are not identifiable (Brunner et al. 2020)."
        )
    c1, c2, c3 = st.columns(3)
    _state("lg_ex_layer", 1, lambda v: min(max(int(v), 1), f.n_layers))
    _state("lg_ex_head", 1, lambda v: min(max(int(v), 1), f.n_heads))
    _state("lg_ex_query", 0, lambda v: min(max(int(v), 0), run.n - 1))
    if st.session_state.lg_ex_query >= run.n:
        st.session_state.lg_ex_query = 0
    c1.number_input("Layer", 1, f.n_layers, key="lg_ex_layer")
    c2.number_input("Head", 1, f.n_heads, key="lg_ex_head")
    c3.selectbox("Query token", list(range(run.n)), format_func=lambda i: f"{i}: {run.tokens[i]}", key="lg_ex_query")
    for key in ("lg_ex_layer", "lg_ex_head", "lg_ex_query"):
        st.query_params[key] = str(st.session_state[key])
    l, h, j = st.session_state.lg_ex_layer - 1, st.session_state.lg_ex_head - 1, st.session_state.lg_ex_query
    fig = example_rows_chart(
        run.tokens,
        run.attentions[l, h, j],
        attribution.input[l, h, j],
        attribution.previous[l, h, j],
        f"Head {l + 1}-{h + 1}, query {j}: {run.tokens[j]!r}",
    )
    st.plotly_chart(fig, key="lg_example")
    download_figure(fig, f"example_{l + 1}-{h + 1}_{j}", key="lg_example_dl")
    download_json(
        {
            "tokens": attribution.tokens,
            "layer": l,
            "head": h,
            "query": j,
            "attention": run.attentions[l, h, j].tolist(),
            "input": attribution.input[l, h, j].tolist(),
            "previous": attribution.previous[l, h, j].tolist(),
        },
        "example",
        key="lg_example_json",
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
options = _options_sidebar(lm.facts.head_dim)
loaded = loaded_result("local_global", "positions", lambda record: positions_from_json(record.result))
choice = corpus_picker("local_global", default_limit=100) if loaded is None else None
if loaded is not None:
    record, result = loaded
    _corpus_section(lm, result, f"loaded from a result file ({record.model})", record.corpus.get("name", "?"))
elif choice is not None:
    result, source = _get_result(lm.facts.name, choice, options)
    if result is not None:
        _corpus_section(lm, result, source, choice.label)
st.divider()
_example_section(lm)
