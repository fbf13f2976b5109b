"""The Head roles page's Composition tab (METHODS §22): Q-, K- and V-composition between every earlier and later head
as a sender x receiver heatmap with the heads of each role marked (`attnlib compose`), and, for a model with
checkpoints, the composition into its induction heads over training against the 1/sqrt(d) baseline."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.roles.training import listed_checkpoints
from attnlib.analyses.circuit import composition_over_checkpoints
from attnlib.analyses.compose import ComposeOptions, CompositionResult
from attnlib.analyses.roles import RolesOptions, RolesResult
from attnlib.core.model import LoadedModel
from attnlib.core.ov_circuit import head_weights_reason
from attnlib.views.circuit import composition_training_figure, marked_composition_heatmap
from attnlib.views.special import head_label
from ui.sources.corpus_page import Shown
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import Option, bind
from ui.sources.result_source import REFUSED, Bar, computed
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.methods import cite_methods
from ui.widgets.progress import asked

KEY = "roles"  # the Head roles page's key: widget keys and download names start with it
KINDS = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}
KIND = Option(f"{KEY}_compose_kind", "kind", "k", list(KINDS), omit_default=True)
QUICK_PARAMETERS = 50_000_000  # parameters x checkpoints below this: the lines over training are drawn at once


def composition_of(model_name: str) -> CompositionResult:
    """`attnlib compose` of the model (the skeleton's computation: once per model)."""
    return computed(
        "compose", model_name, "", ComposeOptions(), None, Bar("Composition scores, {model}", "models")
    ).result


@st.cache_data(max_entries=4, show_spinner="Composition at each checkpoint…")
def cached_over_checkpoints(checkpoints: tuple[str, ...], receivers: tuple[tuple[int, int], ...]) -> pd.DataFrame:
    """The mean composition into the receivers at each checkpoint, once per list."""
    return composition_over_checkpoints(checkpoints, receivers)


def over_training(lm: LoadedModel, induction: list[tuple[int, int]]) -> None:
    """For a model with checkpoints: K-, Q- and V-composition into its induction heads at each checkpoint."""
    name = lm.facts.name
    checkpoints = listed_checkpoints(name)
    if not checkpoints:
        return
    st.subheader("Into the induction heads, over training")
    if not induction:
        st.info(f"{name} has no induction head on the probe: nothing to follow over its checkpoints.")
        return
    receivers = ", ".join(head_label(l, h) for l, h in induction)
    st.markdown(
        f"An induction head finds the token after an earlier occurrence by reading, through its keys, what a "
        f"previous-token head wrote there: K-composition. The mean composition from every head of an earlier layer "
        f"into {receivers} at each of the {len(checkpoints)} checkpoints; the dashed line is 1/√d, about the score of "
        "random matrices."
    )
    what = (name, tuple(checkpoints), tuple(induction))
    if lm.facts.parameters * len(checkpoints) > QUICK_PARAMETERS and not asked(
        f"Compute over {len(checkpoints)} checkpoints", f"{KEY}_compose_training", what
    ):
        return
    table = cached_over_checkpoints(tuple(checkpoints), tuple(induction))
    chart(composition_training_figure(table, name, receivers), "composition_over_training", f"{KEY}_compose_training")
    data_table(table, key=f"{KEY}_compose_training_table", formats={k: "%.4f" for k in ("q", "k", "v", "baseline")})
    download_table(table, "composition_over_training", key=f"{KEY}_compose_training_csv")
    download_json({"model": name, "receivers": [list(r) for r in induction], "checkpoints": table.to_dict("records")},
                  "composition_over_training", key=f"{KEY}_compose_training_json")  # fmt: skip


def composition_tab(views: list[Shown[RolesResult]], options: RolesOptions) -> None:
    """One kind of composition of the loaded model with its role heads marked, the table, and the lines over training."""
    lm = current_model()
    name = lm.facts.name
    st.markdown(
        "How heads feed each other (Elhage et al. 2021): a later head reads an earlier head's output through its "
        "queries (Q), its keys (K) or its values (V). Each cell is ‖W_OV W‖ / (‖W_OV‖ ‖W‖) for the sender's OV "
        "circuit and the receiver's QK (or OV) circuit, on TransformerLens's processed weights (METHODS §22); 0 "
        "where the receiver is not in a later layer. The heads of each role (from this page's role map) are framed."
    )
    cite_methods(22)
    reason = head_weights_reason(lm)
    if reason is not None:
        st.info(reason, icon=":material/info:")
        return
    try:
        result = composition_of(name)
    except REFUSED as exc:
        st.error(str(exc))
        return
    view = next((v for v in views if v.model == name), None)
    roles = {} if view is None else {role: [list(h) for h in heads] for role, heads in view.result.roles.items()}
    bind([KIND])
    kind = st.radio("Kind", list(KINDS), key=KIND.key, format_func=KINDS.__getitem__, horizontal=True)
    chart(marked_composition_heatmap(getattr(result, kind), kind, name, roles), f"{kind}_composition",
          f"{KEY}_compose_{kind}")  # fmt: skip
    ((title, frame),) = result.tables(name).items()
    with st.expander(title):
        data_table(frame, key=f"{KEY}_compose_table", formats={k: "%.4f" for k in ("q", "k", "v")})
        download_table(frame, "composition", key=f"{KEY}_compose_csv")
        download_json({"model": name, **result.to_json()}, "composition", key=f"{KEY}_compose_json")
    over_training(lm, [(int(l), int(h)) for l, h in roles.get("induction", [])])
