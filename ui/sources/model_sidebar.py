"""The model chooser in the sidebar: bundled default, common ids, or any id/folder; failures keep the previous model.

Public deployments restrict it with ATTNLIB_ALLOWED_MODELS / ATTNLIB_ALLOW_LOCAL_MODELS=0 / ATTNLIB_MAX_MODEL_MB, or the
secrets `allowed_models` / `allow_local_models = false` / `max_model_mb` in .streamlit/secrets.toml (an environment
variable wins); the secret `max_run_mb` sets ATTNLIB_MAX_RUN_MB, the memory guard's limit on one run."""

from __future__ import annotations

import os

import streamlit as st
from streamlit.logger import get_logger

from attnlib.core.memory import MAX_RUN_MB_ENV
from attnlib.core.model import (
    ALLOW_LOCAL_ENV,
    ALLOWED_MODELS_ENV,
    COMMON_MODELS,
    DEFAULT_MODEL,
    MAX_MODEL_MB_ENV,
    TRAINED_MODEL,
    LoadedModel,
    ModelLoadError,
    check_allowed,
    check_size,
    load_model,
    model_parameters,
    parse_megabytes,
    parse_model_list,
    shipped_models,
    ships_with_app,
    size_text,
)
from ui.sources.page_state import Option, publish, restore

OTHER = "Other (Hub id or local folder)…"
LOAD_LOG_LINE = "attnlib: loading model"  # logged once per model and server process (the load test counts it)
_log = get_logger(__name__)
MODEL = Option("model_name", "model", DEFAULT_MODEL)


def _setting(env_name: str, secret_key: str):
    """A deployment setting: the environment variable when set, else the secret, else None."""
    value = os.environ.get(env_name, "").strip()
    if value:
        return value
    try:
        return st.secrets.get(secret_key) if st.secrets.load_if_toml_exists() else None
    except Exception:
        return None


def local_models_allowed() -> bool:
    """Public deployments switch local folders off (ATTNLIB_ALLOW_LOCAL_MODELS=0 or secret allow_local_models = false)."""
    value = _setting(ALLOW_LOCAL_ENV, "allow_local_models")
    if value is None or isinstance(value, bool):
        return value is not False
    return str(value).strip().lower() not in ("0", "false", "no", "off")


def allowed_models() -> tuple[str, ...] | None:
    """The allow-list of model ids (ATTNLIB_ALLOWED_MODELS or secret allowed_models), None when any id may load."""
    return parse_model_list(_setting(ALLOWED_MODELS_ENV, "allowed_models"))


def max_model_megabytes() -> float | None:
    """The largest model this server loads, in MB of float32 parameters (ATTNLIB_MAX_MODEL_MB or secret max_model_mb)."""
    return parse_megabytes(_setting(MAX_MODEL_MB_ENV, "max_model_mb"))


def apply_run_limit() -> None:
    """The secret max_run_mb, where ATTNLIB_MAX_RUN_MB is unset, becomes that variable: the memory guard of the
    library (attnlib.core.memory) reads it before every run, for every visitor of this server."""
    if os.environ.get(MAX_RUN_MB_ENV, "").strip():
        return
    try:
        value = parse_megabytes(_setting(MAX_RUN_MB_ENV, "max_run_mb"), "run memory limit")
    except ModelLoadError as exc:  # a malformed secret: said, and no limit set from it
        st.sidebar.error(str(exc))
        return
    if value is not None:
        os.environ[MAX_RUN_MB_ENV] = str(value)


@st.cache_resource(max_entries=3, show_spinner=False)
def cached_model(name: str, allow_local: bool) -> LoadedModel:
    """Load a model once per process; every session shares it."""
    _log.info("%s %s", LOAD_LOG_LINE, name)
    return load_model(name, allow_local=allow_local, allowed=allowed_models(), max_megabytes=max_model_megabytes())


@st.cache_data(max_entries=32, show_spinner=False)
def cached_parameters(name: str, allow_local: bool) -> int:
    """How many parameters a model has, from its config (no weights read): said and limited before it loads."""
    return model_parameters(name, allow_local)


def model_named(name: str) -> LoadedModel:
    """The model of this name, loaded once per process (for cached functions, which get the name)."""
    return cached_model(name, local_models_allowed())


def model_options(allowed: tuple[str, ...] | None) -> list[str]:
    """The chooser's entries: the allow-list (the bundled default and the shipped models first), or the common ids and
    a free field."""
    if allowed is None:
        return COMMON_MODELS + [OTHER]
    return list(dict.fromkeys([DEFAULT_MODEL, *shipped_models(), *allowed]))


def try_load(name: str) -> tuple[LoadedModel | None, str | None]:
    """Load a model, or return the reason it failed."""
    try:
        check_allowed(name, allowed_models())  # checked on every call: the cache may hold a model loaded earlier
        parameters = cached_parameters(name, local_models_allowed())
        if not ships_with_app(name):  # the size limit too, for the same reason
            check_size(name, parameters, max_model_megabytes())
        with st.spinner(f"Loading {name} ({size_text(parameters)})…"):
            return model_named(name), None
    except ModelLoadError as exc:
        return None, str(exc)
    except Exception as exc:
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
    apply_run_limit()
    options = model_options(allowed_models())
    if "model_name" not in state:
        restore([MODEL])
        state.model_choice = state.model_name if state.model_name in options else OTHER
        state.model_custom = "" if state.model_name in options else state.model_name
    if state.model_choice not in options:  # a link to a model that this server's allow-list leaves out
        st.sidebar.error(
            f"'{state.model_name}' is not one of the models this server allows.\n\nUsing **{DEFAULT_MODEL}**."
        )
        state.model_choice = state.model_name = DEFAULT_MODEL
    with st.sidebar:
        st.subheader("Model")
        st.selectbox(
            "Model",
            options,
            key="model_choice",
            label_visibility="collapsed",
            help=(
                f"{DEFAULT_MODEL} and {TRAINED_MODEL} (a small decoder trained in the repository; {TRAINED_MODEL}"
                "@step<N> loads one of its checkpoints) ship with the app and work offline; the others download from "
                "the Hub."
            ),
        )
        if state.model_choice == OTHER:
            st.text_input("Hub id or local folder", key="model_custom", placeholder="e.g. bert-base-uncased")
        requested = _requested_name()
        if requested and requested != state.model_name and requested != state.get("failed_name"):
            lm, error = try_load(requested)
            if lm is not None:
                state.model_name = requested
                state.pop("failed_name", None)
            else:
                state.failed_name, state.failed_error = requested, error
        if requested and requested == state.get("failed_name"):
            st.error(f"{state.failed_error}\n\nStill using **{state.model_name}**.")
        lm, error = try_load(state.model_name)
        if lm is None:
            st.error(f"{error}\n\nFalling back to the bundled {DEFAULT_MODEL}.")
            state.model_name = DEFAULT_MODEL
            lm = model_named(DEFAULT_MODEL)  # the bundled model: a failure here is a broken install, shown as such
        f = lm.facts
        kind = {"decoder": " (decoder: causal attention)", "encoder-decoder": " (encoder-decoder; the encoder's sizes)"}
        st.caption(
            f"{f.model_type}{kind.get(f.kind, '')}: {f.n_layers} layers × "
            f"{f.n_heads} heads, head size {f.head_dim}, max {f.max_length} tokens, "
            f"{'first and end tokens' if f.causal else 'special tokens'} {f.cls_token} {f.sep_token}; "
            f"{size_text(f.parameters)}" + (f". {f.dtype_note()}" if f.dtype_note() else "")
        )
    publish([MODEL])
    return lm


def current_model() -> LoadedModel:
    """The model chosen in the sidebar (model_sidebar has run earlier in this script run)."""
    return model_named(st.session_state.get("model_name", DEFAULT_MODEL))
