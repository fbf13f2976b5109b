"""The Live page's controls: the view, the level, word rows and measure, the layer and heads, the token and the pair
filter; each a widget of a LiveState field, drawn from the state kept inside the model and the input."""

from __future__ import annotations

import streamlit as st

from app_pages.live.live_state import KEY, LEVELS, VIEWS, LiveState, change, keep
from app_pages.live.live_view import LiveView, Measure, live_view
from app_pages.live.shows import SHOWS
from attnlib.core.model import ModelFacts
from attnlib.core.runner import RunResult
from attnlib.core.words import ROW_RULES
from attnlib.views.head_view import PAIR_FILTERS
from ui.sources.live_inputs import units
from ui.widgets.family_notes import explain_unsupported


def _reset_token() -> None:
    """A new level numbers the positions differently: forget the selected one."""
    change(token=0)


def view_choice() -> None:
    """The radio of the four views."""
    st.radio("View", list(VIEWS), format_func=VIEWS.get, horizontal=True, key=KEY["view"])


def _choice(column, label: str, choices: dict, name: str, view: str, help: str, on_change=None) -> None:
    """A horizontal radio of the head and model views (of the state's field `name`), greyed out in the neuron view."""
    column.radio(
        label,
        list(choices),
        format_func=choices.get,
        horizontal=True,
        key=KEY[name],
        on_change=on_change,
        disabled=view == "neuron",
        help=help,
    )


def measure_controls(state: LiveState, facts: ModelFacts, columns) -> Measure:
    """Token or word level, the word row rule and weights / norms; what the views draw. The neuron view is at token
    level and shows weights."""
    c_level, c_rule, c_show = columns
    view = state.view
    _choice(
        c_level,
        "Level",
        LEVELS,
        "level",
        view,
        "Words: METHODS §6 (attention to a word = sum over its pieces; from a word = the row rule). "
        "The neuron view is always at token level.",
        on_change=_reset_token,
    )
    c_rule.selectbox(
        "Word rows",
        ROW_RULES,
        key=KEY["rule"],
        disabled=state.level != "word" or view == "neuron",
        help="How the rows of a word's pieces merge: mean (default), first piece, or max renormalised.",
    )
    _choice(
        c_show,
        "Shows",
        SHOWS,
        "show",
        view,
        "Weights: the attention α. Norms: ‖α f(x_j)‖ (METHODS §11), each query's row normalised to sum 1: "
        "how much each token actually moves into the query. The neuron view shows weights, value norms beside it.",
    )
    shows = "weights" if view == "neuron" else state.show
    shows = "weights" if shows == "norms" and explain_unsupported(facts, "norms") else shows
    return "token" if view == "neuron" else state.level, state.rule, shows


def head_controls(view: str, facts: ModelFacts, c_layer, c_head) -> None:
    """The layer slider, and the heads shown (head view) or the one head (other views)."""
    c_layer.slider("Layer", 1, facts.n_layers, key=KEY["layer"])
    if view == "head":
        st.pills(
            "Heads shown",
            list(range(1, facts.n_heads + 1)),
            selection_mode="multi",
            key=KEY["heads"],
            help="Heads drawn in the head view, one colour each (click a number inside the figure to hide it too).",
        )
    else:
        c_head.selectbox("Head", list(range(1, facts.n_heads + 1)), key=KEY["head"])


def token_controls(view: str, labels: list[str], is_pair: bool) -> None:
    """The selected (or query) token and, for a pair in the head view, the pair filter."""
    c_token, c_filter = st.columns([2, 3])
    if view != "model":
        none = "none (first token)" if view == "neuron" else "none"
        c_token.selectbox(
            "Query token" if view == "neuron" else "Selected token",
            list(range(0, len(labels) + 1)),
            key=KEY["token"],
            format_func=lambda i: none if i == 0 else f"{i}: {labels[i - 1]}",
            help="Positions are numbered from 1. In the head view only this token's lines are drawn.",
        )
    if view == "head" and is_pair:
        c_filter.radio(
            "Pair filter",
            list(PAIR_FILTERS),
            horizontal=True,
            key=KEY["pair_filter"],
            help="Queries of one sentence to keys of the other (or the same); weights are not renormalised.",
        )


def controls(
    state: LiveState, facts: ModelFacts, texts: tuple[str, str], result: RunResult
) -> tuple[LiveState, LiveView]:
    """Every control of the three views; the state kept inside the model and the input, and the view it chooses."""
    c_level, c_rule, c_show, c_layer, c_head = st.columns([1.2, 1, 1.2, 2.2, 1.2])
    measure = measure_controls(state, facts, (c_level, c_rule, c_show))
    level, rule, shows = measure
    maps = units(result, level, facts.name, texts, rule, shows)
    state = state.within(facts.n_layers, facts.n_heads, len(maps[1])).one_head_shown()
    keep(state)
    head_controls(state.view, facts, c_layer, c_head)
    token_controls(state.view, maps[1], bool(texts[1].strip()))
    return state, live_view(facts, texts, result, measure, state, maps)
