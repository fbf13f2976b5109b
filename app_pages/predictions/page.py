"""Predictions: what heads write into the model's next token (METHODS §21). A prompt; the model's prediction; the route
graph of information flow with each edge's heads and each node's logit lens; the direct logit attribution of every
head and feed-forward block with each head's promoted and suppressed tokens; and each head's route frequency over a
corpus. One model, or two side by side."""

from __future__ import annotations

import streamlit as st

from app_pages.predictions.corpus_routes import frequency_tab
from app_pages.predictions.details import draw_attribution, draw_edge, draw_graph, draw_node, draw_prediction
from app_pages.predictions.patching_tab import patching_tab
from app_pages.predictions.prompt_state import (
    KEY,
    LENS_MODE,
    LENS_MODES,
    MODE,
    MODES,
    POSITION,
    PROMPT_OPTIONS,
    TARGET,
    TEXT,
    THRESHOLD,
    TOKEN,
    VERSUS,
    PromptView,
    cached_lens,
    lm_head_reason,
    prompt_view,
)
from attnlib.core.model import TRAINED_MODEL
from ui.sources.compare import compared_model
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import Option, bind, lazy_tabs
from ui.widgets.methods import cite_methods
from ui.widgets.side_by_side import side_by_side

TABS = {"prompt": "One prompt", "corpus": "Routes over a corpus", "patching": "Patching"}
TAB = Option(f"{KEY}_tab", "tab", TABS["prompt"], TABS, omit_default=True)


def open_trained_decoder() -> None:
    """Button callback: the sidebar loads the trained decoder on this run."""
    st.session_state.model_choice = TRAINED_MODEL


def prompt_inputs(models: list) -> dict:
    """The prompt (an encoder-decoder's source, and its target), the position, the threshold and mode of the routes,
    the lens's mode, the token (pair) attributed."""
    values = bind(list(PROMPT_OPTIONS))
    st.text_area("Prompt", key=TEXT.key, height=80, help="The model predicts the token after the position.")
    seq2seq = [lm.facts.name for lm in models if lm.seq2seq is not None]
    if seq2seq:
        st.text_input("Target (the decoder's input)", key=TARGET.key, placeholder="the model's own greedy output",
                      help="An encoder-decoder reads the prompt as its source; its decoder reads this target (empty: "
                      "its own greedy output), and the position counts the target's tokens.")  # fmt: skip
        st.caption(
            f"{', '.join(seq2seq)}: an encoder-decoder. The prompt is its source; the position is the target's, where "
            "the decoder predicts the next token; the route runs from that prediction through the decoder and its "
            "cross-attention into the encoder; the lens and the attribution read the decoder."
        )
    position, threshold, mode, lens_mode = st.columns([1, 1, 1, 1])
    position.number_input("Position (token index from 0; −1: the last)", step=1, key=POSITION.key)
    threshold.number_input("Threshold τ of the routes", step=0.01, format="%.3f", key=THRESHOLD.key,
                           help="Edges whose contribution is at most τ are not followed; between 0 and 1.")  # fmt: skip
    mode.radio("Mode", MODES, key=MODE.key, horizontal=True,
               help="renormalise (the paper's): parts at most τ set to 0, the rest rescaled to sum 1; cut: the "
               "contributions unchanged, edges at most τ not followed.")  # fmt: skip
    lens_mode.radio("Logit lens", LENS_MODES, key=LENS_MODE.key, horizontal=True,
                    help="normalise: through the final norm and the unembedding; raw: the unembedding alone.")  # fmt: skip
    return values


def no_head_note(models: list) -> None:
    """For a model without an LM head: why only its routes are shown, and the trained decoder in one click."""
    missing = [lm for lm in models if lm_head_reason(lm) is not None]
    if missing:
        st.info(lm_head_reason(missing[0]), icon=":material/info:")
        st.button(f"Open the trained decoder {TRAINED_MODEL}", key=f"{KEY}_open_decoder", on_click=open_trained_decoder,
                  icon=":material/swap_horiz:")  # fmt: skip


def routes_section(views: list[PromptView], values: dict) -> None:
    """The route graph of each model, then the picked edge's heads."""
    st.subheader("Routes")
    st.markdown(
        "Each node is a state of the residual stream: E the embedding, A after attention, F the feed-forward block, "
        "R after the layer; layers go up, positions across. An edge's width is its contribution to the node it "
        "enters (Ferrando & Voita 2024); the route to the prediction is drawn in red, the rest of the graph above the "
        "threshold in grey."
    )
    side_by_side(views, lambda v, sfx: draw_graph(v, sfx, float(values["thr"]), values["mode"]))
    st.markdown("**An edge's heads**")
    side_by_side(views, draw_edge)


def lens_section(views: list[PromptView], values: dict) -> None:
    """The picked node's logit-lens table of each model (read at the node's own position)."""
    st.markdown("**A node's logit lens**")

    def draw(view: PromptView, sfx: str) -> None:
        def at(position: int) -> dict | None:
            if view.lens is None:
                st.caption(view.missing("logit lens"))
                return None
            if position == view.position:
                return view.lens
            return cached_lens(view.model, values["text"], position, "", "", values["lens"], view.target)

        draw_node(view, sfx, at)

    side_by_side(views, draw)


def attribution_section(views: list[PromptView]) -> None:
    """The token (and the one it is compared with), then each model's attribution and a head's readout."""
    st.subheader("Direct logit attribution")
    token, versus = st.columns(2)
    token.text_input("Token", key=TOKEN.key, placeholder="the predicted token",
                     help="One token of the model's vocabulary (a leading space counts); empty: the predicted one.")  # fmt: skip
    versus.text_input("Versus (optional)", key=VERSUS.key, placeholder="a second token",
                      help="Attribute the difference of the two tokens' logits.")  # fmt: skip
    side_by_side(views, draw_attribution)


def one_prompt(models: list) -> None:
    """The prompt's prediction, routes, a picked edge and node, and the attribution, for each model."""
    values = prompt_inputs(models)
    views = [
        prompt_view(lm, values["text"], int(values["pos"]), float(values["thr"]), values["mode"], values["lens"],
                    values["tok"].strip(), values["versus"].strip(), values["target"].strip())
        for lm in models
    ]  # fmt: skip
    for view in views:
        if "routes" in view.refusals:
            st.error(f"{view.model}: {view.refusals['routes']}")
    views = [v for v in views if v.routes is not None]
    if not views:
        return
    no_head_note(models)
    reading = any(not v.no_head for v in views)  # a model with an LM head: the parts that read it
    if reading:
        st.subheader("The prediction")
        side_by_side(views, draw_prediction)
    routes_section(views, values)
    if reading:
        lens_section(views, values)
        attribution_section(views)


st.title("Predictions")
st.caption(
    "What heads write into the model's next token: the route information takes through the layers to the prediction "
    "(Ferrando & Voita 2024), every state read through the unembedding (the logit lens, nostalgebraist 2020), and "
    "each head's direct effect on the predicted token's logit (Elhage et al. 2021). **Layers and heads are numbered "
    "from 1 on this page** (layer-head), positions from 0; `attnlib routes` and `attnlib lens` count layers from 0."
)
cite_methods(21)
lm = current_model()
other = compared_model()
models = [lm] + ([other] if other is not None and other.facts.name != lm.facts.name else [])
label, tab = lazy_tabs(TAB, list(TABS.values()))
with tab:
    if label == TABS["prompt"]:
        one_prompt(models)
    elif label == TABS["patching"]:
        patching_tab(lm)
    else:
        frequency_tab(lm)
