"""The model chooser in the sidebar: bundled default, common ids, or any id/folder; failures keep the previous model."""

from __future__ import annotations

import os

import streamlit as st

from attnlib.model import COMMON_MODELS, DEFAULT_MODEL, LoadedModel, ModelLoadError, load_model

OTHER = "Other (Hub id or local folder)…"


def local_models_allowed() -> bool:
    """Public deployments switch local folders off with ATTNLIB_ALLOW_LOCAL_MODELS=0."""
    return os.environ.get("ATTNLIB_ALLOW_LOCAL_MODELS", "1") != "0"


@st.cache_resource(max_entries=3, show_spinner=False)
def cached_model(name: str, allow_local: bool) -> LoadedModel:
    """Load a model once per process; every session shares it."""
    return load_model(name, allow_local=allow_local)


def _try_load(name: str) -> tuple[LoadedModel | None, str | None]:
    """Load a model, or return the reason it failed."""
    try:
        with st.spinner(f"Loading {name}…"):
            return cached_model(name, local_models_allowed()), None
    except ModelLoadError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - any loader failure becomes a message, never a traceback
        return None, f"Loading '{name}' failed ({type(exc).__name__})."


def _requested_name() -> str:
    """The model the widgets ask for."""
    choice = st.session_state.get("model_choice", DEFAULT_MODEL)
    if choice == OTHER:
        return st.session_state.get("model_custom", "").strip()
    return choice


def model_sidebar() -> LoadedModel:
    """Draw the model chooser and return the model in use (the previous one if the new one fails)."""
    state = st.session_state
    if "model_name" not in state:
        state.model_name = st.query_params.get("model", DEFAULT_MODEL)
        state.model_choice = state.model_name if state.model_name in COMMON_MODELS else OTHER
        state.model_custom = "" if state.model_name in COMMON_MODELS else state.model_name
    with st.sidebar:
        st.subheader("Model")
        st.selectbox("Model", COMMON_MODELS + [OTHER], key="model_choice", label_visibility="collapsed",
                     help="all-MiniLM-L6-v2 ships with the app and works offline; the others download from the Hub.")
        if state.model_choice == OTHER:
            st.text_input("Hub id or local folder", key="model_custom", placeholder="e.g. bert-base-uncased")
        requested = _requested_name()
        if requested and requested != state.model_name and requested != state.get("failed_name"):
            lm, error = _try_load(requested)
            if lm is not None:
                state.model_name = requested
                state.pop("failed_name", None)
            else:
                state.failed_name, state.failed_error = requested, error
        if requested and requested == state.get("failed_name"):
            st.error(f"{state.failed_error}\n\nStill using **{state.model_name}**.")
        lm, error = _try_load(state.model_name)
        if lm is None:
            st.error(f"{error}\n\nFalling back to the bundled {DEFAULT_MODEL}.")
            state.model_name = DEFAULT_MODEL
            lm, _ = _try_load(DEFAULT_MODEL)
        f = lm.facts
        st.caption(f"{f.model_type}: {f.n_layers} layers × {f.n_heads} heads, head size {f.head_dim}, "
                   f"max {f.max_length} tokens, special tokens {f.cls_token} {f.sep_token}")
    st.query_params["model"] = state.model_name
    return lm


def current_model() -> LoadedModel:
    """The model chosen in the sidebar (model_sidebar has run earlier in this script run)."""
    return cached_model(st.session_state.get("model_name", DEFAULT_MODEL), local_models_allowed())
