"""The Local vs global page's "One example" tab: one head's attention row beside its exact Hidden Token Attribution
rows for a sentence or pair (shipped for the default examples, else computed on request within a time cap)."""

from __future__ import annotations

import streamlit as st

from attnlib.analyses.hta import Attribution, attribute, exact_seconds
from attnlib.core.families import unsupported_reason
from attnlib.core.model import LoadedModel
from attnlib.core.runner import RunResult
from attnlib.results.precomputed import shipped_example
from attnlib.views.positions import example_rows_chart
from ui.sources.live_inputs import run_or_explain, text_inputs
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, bind
from ui.sources.result_source import REFUSED
from ui.widgets.downloads import chart, download_json

# 120 s caps the default model at 65 tokens, which add about 410 MB resident (bench_classroom --exact-memory 65):
# with a server under 1 GB the exact example keeps it under 1.5 GB (issue 15); 600 s allowed 147 tokens, about 0.9 GB.
EXACT_EXAMPLE_MAX_SECONDS = 120


@st.cache_data(max_entries=4, show_spinner=False)
def _example_attribution(model_name: str, text_a: str, text_b: str) -> Attribution:
    """Exact Hidden Token Attribution of one sentence or pair."""
    return attribute(model_named(model_name), text_a, text_b.strip() or None, mode="exact")


def example_attribution(lm: LoadedModel, run: RunResult, text_a: str, text_b: str) -> Attribution | None:
    """The shipped example, else exact attribution computed on request; None (with a message) until there is one."""
    f = lm.facts
    shipped = shipped_example(f.name, text_a, text_b)
    if shipped is not None:
        return shipped
    reason = unsupported_reason(lm.encoder.config, "hta") if f.causal else None
    if reason is not None:  # a decoder: say so before offering a computation that cannot run
        st.info(f"No attribution for this decoder: {reason}")
        return None
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
    except REFUSED as exc:
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
    fig = example_rows_chart(
        run.tokens,
        rows["attention"],
        rows["input"],
        rows["previous"],
        f"Head {l + 1}-{h + 1}, query {j}: {run.tokens[j]!r}",
    )
    chart(fig, f"example_{l + 1}-{h + 1}_{j}", "lg_example")
    as_lists = {name: row.tolist() for name, row in rows.items()}
    download_json(
        {"tokens": attribution.tokens, "layer": l, "head": h, "query": j, **as_lists}, "example", key="lg_example_json"
    )
