"""The Live page's views of a long input (METHODS §19): the reduced map of every layer and head, computed block-wise
(never a whole layer's map), the full-resolution rows of the window the user chooses (URL `start`, `end`: 1-based
query positions, inclusive; 0: no window), and the neuron view of the window's tokens."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import streamlit as st

from app_pages.live.neuron import neuron_notes
from app_pages.live.view_messages import listen
from attnlib.core.blockwise import WindowHeads, reduced_maps, supports_blockwise, window_heads
from attnlib.core.model import ModelFacts
from attnlib.core.runner import Encoded, InputError, encode
from attnlib.views.long_view import LONG_FROM, MAP_WIDTH, MAX_WINDOW, long_view_html
from attnlib.views.model_view import model_view_html
from attnlib.views.neuron_view import neuron_scores, neuron_view_html
from ui.sources.live_inputs import cached_window, pretty_token
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option, set_value

START = Option("live_start", "start", 0, lo=0, omit_default=True)  # first query row of the window, 1-based; 0: none
END = Option("live_end", "end", 0, lo=0, omit_default=True)  # last query row of the window, 1-based, inclusive
WINDOW_OPTIONS = [START, END]
PICK_KEY = "live_window_pick"


@st.cache_data(max_entries=8, show_spinner=False)
def cached_encoded(model_name: str, text_a: str, text_b: str) -> Encoded:
    """The tokenized sentence or pair, once per (model, text)."""
    return encode(model_named(model_name), text_a, text_b.strip() or None)


def long_input(model_name: str, text_a: str, text_b: str) -> Encoded | None:
    """The encoded input when it is long (more than LONG_FROM tokens) and the model runs block-wise; else None."""
    try:
        encoded = cached_encoded(model_name, text_a, text_b)
    except InputError:
        return None  # the usual run explains it
    if encoded.n <= LONG_FROM or not supports_blockwise(model_named(model_name).encoder):
        return None
    return encoded


# The reduced maps of one input: [layers, heads, cells, cells] float32, at most 512 x 512 cells a head.
@st.cache_data(max_entries=2, show_spinner="Computing the reduced map block by block…")
def cached_reduced(model_name: str, text_a: str, text_b: str) -> tuple[np.ndarray, int]:
    """reduced_maps of the input at MAP_WIDTH cells (METHODS §19), once per (model, text)."""
    lm = model_named(model_name)
    return reduced_maps(lm, cached_encoded(model_name, text_a, text_b), MAP_WIDTH)


@st.cache_data(max_entries=2, show_spinner="Computing the layer's queries and keys block by block…")
def cached_window_heads(model_name: str, text_a: str, text_b: str, layer: int, start: int, end: int) -> WindowHeads:
    """window_heads of one layer and window (0-based, half-open), once per (model, text, layer, window)."""
    return window_heads(model_named(model_name), cached_encoded(model_name, text_a, text_b), layer, start, end)


def _picked(value) -> None:
    """A window dragged on the map (1-based, inclusive) becomes the page's."""
    if isinstance(value, list) and len(value) == 2:
        set_value(START, int(value[0]))
        set_value(END, int(value[1]))


def clamp_window(n: int) -> tuple[int, int] | None:
    """The window in the URL kept inside the input and at most MAX_WINDOW rows; 0-based half-open, None for none."""
    state = st.session_state
    start = int(state[START.key])
    if not 1 <= start <= n:
        state[START.key] = state[END.key] = 0
        return None
    end = min(max(int(state[END.key]), start), n, start + MAX_WINDOW - 1)
    state[END.key] = end
    return start - 1, end


def window_controls(n: int) -> tuple[int, int] | None:
    """The window's first and last query positions (numbers, also set by a drag on the map); 0-based half-open."""
    listen("attnlibWindow", "window", PICK_KEY, _picked)
    window = clamp_window(n)
    c_start, c_end, _ = st.columns([1, 1, 3])
    c_start.number_input(
        "Window from", min_value=0, max_value=n, step=1, key=START.key, help="First query row (1-based); 0: no window."
    )
    c_end.number_input(
        "Window to",
        min_value=0,
        max_value=n,
        step=1,
        key=END.key,
        help=f"Last query row (1-based, inclusive); at most {MAX_WINDOW} rows. Or drag up or down on the map.",
    )
    return window


def explain_long(encoded: Encoded, cell: int) -> None:
    """What the views show for a long input, in words."""
    st.info(
        f"{encoded.n} tokens: the map is drawn in cells of {cell}×{cell} tokens, each the largest weight; "
        f"choose a window (at most {MAX_WINDOW} rows: drag on the map, or type its rows) to see its lines."
    )
    st.caption(
        f"Long inputs are drawn at token level, as attention weights, for the model chosen alone: words, norms and a "
        f"second model apply to inputs of up to {LONG_FROM} tokens."
    )
    if encoded.truncated:
        st.warning(
            f"The input has {encoded.n_tokens_full} tokens; the model takes {encoded.n}, "
            "so it was truncated to the first tokens that fit."
        )


def long_views(
    view: str, facts: ModelFacts, texts: tuple[str, str], encoded: Encoded, layer: int, heads: list[int]
) -> tuple[int, int] | None:
    """The head view (heads of one layer) or the model view (every head's reduced map, the chosen head's window
    below) of a long input; `heads` 0-based (one for the model view). Returns the window drawn (0-based, half-open)
    or None."""
    try:
        pooled, cell = cached_reduced(facts.name, *texts)
    except InputError as exc:
        st.warning(str(exc))
        return None
    explain_long(encoded, cell)
    window = window_controls(encoded.n)
    labels = [pretty_token(t) for t in encoded.tokens]
    if view == "model":
        cells = [f"{i * cell + 1}–{min(encoded.n, (i + 1) * cell)}" for i in range(pooled.shape[-1])]
        html = model_view_html(
            pooled,
            cells,
            (layer, heads[0]),
            title=f"Reduced maps: cells of {cell}×{cell} tokens, each the largest weight (positions: a cell's tokens)",
        )
        st.iframe(html, height="content")
    rows = None
    if window is not None:
        try:
            rows = cached_window(facts.name, *texts, layer, *window)[heads]
        except InputError as exc:
            st.warning(str(exc))
            window = None
    html = long_view_html(pooled[layer, heads], cell, labels, heads, layer, rows, window)
    st.iframe(html, height="content")
    return window


def needs_window(encoded: Encoded) -> None:
    """The head finder of a long input, in words."""
    st.info(
        f"The head finder needs every layer's whole maps, which {encoded.n} tokens make too large; it is drawn for "
        f"inputs of up to {LONG_FROM} tokens. The head and model views show this input's reduced map and a window's "
        "lines, the neuron view a window's tokens."
    )


def long_neuron(
    facts: ModelFacts,
    texts: tuple[str, str],
    encoded: Encoded,
    where: tuple[int, int],
    pick: Callable[[tuple[int, int], list[str]], int],
) -> tuple[tuple[int, int], int] | None:
    """The neuron view of a long input's window at (layer, head), 0-based: the query picked among the window's tokens
    (`pick(window, labels)`, 0-based), the window's tokens as the keys, q and k from the model's own pass over the
    whole input; without a window, what to do. Returns the window (0-based, half-open) and the query, or None."""
    layer, head = where
    window = window_controls(encoded.n)
    if window is None:
        st.info(
            f"{encoded.n} tokens: the neuron view draws a window's tokens. Choose a window (at most {MAX_WINDOW} rows: "
            "type its rows here, or drag on the map of the head or model view)."
        )
        return None
    labels = [pretty_token(t) for t in encoded.tokens]
    query = pick(window, labels)
    try:
        found = cached_window_heads(facts.name, *texts, layer, *window)
    except (InputError, ValueError) as exc:
        st.warning(str(exc))
        return window, query
    start, end = window
    q, k, row = found.queries[head], found.keys[head], found.rows[head, query - start]
    terms = {"scale": found.scale, "window": facts.window(layer), "causal": facts.causal, "cap": found.cap}
    ns = neuron_scores(q, k, query, **terms)
    st.iframe(neuron_view_html(q, k, labels, query, layer, head, row, shown=window, **terms), height="content")
    st.caption(
        f"Keys drawn: the window's tokens, positions {start + 1}–{end} of {encoded.n}. Their weights are the row's "
        f"softmax over all {encoded.n} keys, restricted to the window, so they need not sum to 1: here they sum to "
        f"{ns.softmax[start:end].sum():.4f}. The queries and keys are those of the model's own pass over the whole "
        f"input (block-wise: positions, local windows and masks as the model's). Value norms are drawn for inputs of "
        f"up to {LONG_FROM} tokens."
    )
    neuron_notes(float(np.abs(ns.softmax - row).max()), ns.label, ns.cap)
    return window, query
