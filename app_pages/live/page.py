"""Live attention: head view, model view and neuron view of any sentence or pair (weights or value-weighted norms,
one model or two side by side), a head finder, and exports."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.live.controls import controls, head_controls, view_choice
from app_pages.live.downloads import export_buttons, exports, head_export, long_table
from app_pages.live.encoder_decoder import encoder_decoder_live
from app_pages.live.head_finder import show_finder
from app_pages.live.head_switches import head_switches
from app_pages.live.heads_off import SWITCHES, clicked, heads_off_now, switches_section
from app_pages.live.live_state import KEY, LiveState, bind_state, change, keep, page_options
from app_pages.live.live_view import LiveView, models_side_by_side, shown_views
from app_pages.live.long_live import long_input, long_neuron, long_views, needs_window
from app_pages.live.neuron import neuron_part
from app_pages.live.token_pick import listen_for_picks
from attnlib.analyses.importance import unavailable_reason
from attnlib.core.model import LoadedModel, ModelFacts
from attnlib.core.runner import Encoded, RunResult
from attnlib.present.export import attention_table
from attnlib.views.head_view import MIN_WEIGHT as HEAD_MIN_WEIGHT
from attnlib.views.head_view import head_view_data, head_view_html
from attnlib.views.long_view import MAX_WINDOW
from attnlib.views.model_view import LINES_MAX_TOKENS, model_view_html
from ui.sources.compare import compared_model
from ui.sources.live_inputs import pretty_token, run_or_explain, text_inputs, text_options
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import publish, set_value
from ui.widgets.family_notes import explain_unsupported, local_layers_note
from ui.widgets.methods import cite_methods

# ------------------------------------------------------------------------------------------------------- callbacks


def _open_head(layer: int, head: int) -> None:
    """Button callback of the head finder: show one head (0-based) in the head view."""
    change(view="head", layer=layer + 1, head=head + 1, heads=[head + 1], token=0, pair_filter="All")


def _pick_token(position: int) -> None:
    """A click on a query token in the head view (1-based, 0: unpinned) selects it, as the token selector does."""
    change(token=position)


def _open_match(text_a: str, text_b: str, token: int) -> None:
    """Button callback of a corpus match: its sentence (or pair) in the head view, its token (0-based) selected."""
    option_a, option_b = text_options()
    set_value(option_a, text_a)
    set_value(option_b, text_b)
    change(view="head", level="token", token=token + 1, pair_filter="All")


# ------------------------------------------------------------------------------------------------------- the views


def show(html: str) -> None:
    """Embed a self-contained view; the iframe takes the height of its content (the views scroll inside)."""
    st.iframe(html, height="content")


def head_view_part(v: LiveView, heads: list[int], pair_filter: str, two: bool):
    """One model's head view (heads outside its range left out) drawn in the current column: (html, data)."""
    own = [h for h in heads if h < v.facts.n_heads] or [min(max(heads), v.facts.n_heads - 1)]
    title = (f"{v.facts.name} · " if two else "") + v.level_title
    data = head_view_data(v.attn[v.layer], own, v.segments, pair_filter)
    html = head_view_html(
        v.attn[v.layer], v.labels, own, v.layer, v.segments, pair_filter, v.selected, title=title, quantity=v.quantity
    )
    show(html)
    return html, data


def head_view_section(s: LiveView, state: LiveState, second: ModelFacts | None) -> None:
    """The head view of the chosen heads of one layer (of each model), and its exports."""
    heads = [h - 1 for h in state.heads or []]
    pair_filter = state.pair_filter if s.text_b.strip() else "All"
    if not heads:
        st.info("Choose at least one head.")
        return
    views = shown_views(s, state, second)
    listen_for_picks(_pick_token)
    drawn = models_side_by_side(views, lambda v, sfx: head_view_part(v, heads, pair_filter, len(views) > 1))
    words = f" Word level: rows merged by **{s.rule}**, columns summed (METHODS §6)." if s.level == "word" else ""
    norms = " Norms: ‖α f(x)‖ of each key, each row normalised to sum 1 (METHODS §11)." if s.show == "norms" else ""
    st.caption(f"Lines below {HEAD_MIN_WEIGHT} are not drawn." + words + norms)
    export_buttons(
        f"{s.stem}-heads",
        lambda: long_table(
            views,
            [attention_table(d.maps, v.layer, d.heads, d.left, d.right, v.labels) for v, (_, d) in zip(views, drawn)],
            s.value_key,
        ),
        lambda: exports(views, [head_export(v, d, pair_filter) for v, (_, d) in zip(views, drawn)]),
        [(v, html) for v, (html, _) in zip(views, drawn)],
        "live_head_export",
    )


def model_view_section(s: LiveView, state: LiveState, second: ModelFacts | None) -> None:
    """Every head of every layer as thumbnails (of each model), the chosen one enlarged, and the chosen layer's exports."""
    views = shown_views(s, state, second)

    def draw(v: LiveView, sfx: str) -> str:
        if len(v.labels) > LINES_MAX_TOKENS:
            st.caption(f"More than {LINES_MAX_TOKENS} {v.level}s: thumbnails are heatmaps so they stay readable.")
        title = (f"{v.facts.name} · " if len(views) > 1 else "") + v.level_title
        clicks = v is s and bool(state.click) and unavailable_reason(current_model()) is None
        off = heads_off_now(v.facts) if clicks else []
        html = model_view_html(
            v.attn,
            v.labels,
            (v.layer, v.head),
            windows=v.facts.windows,
            title=title,
            quantity=v.quantity,
            switches=clicks,
            off=off,
        )
        if clicks:
            head_switches(html, SWITCHES, on_change=clicked)
        else:
            show(html)
        return html

    drawn = models_side_by_side(views, draw)

    local_layers_note(s.facts)

    def table(v: LiveView) -> pd.DataFrame:
        every = list(range(len(v.labels)))
        return attention_table(v.attn[v.layer], v.layer, list(range(v.facts.n_heads)), every, every, v.labels)

    def export(v: LiveView) -> dict:
        return v.export(level=v.level, rule=v.rule, **{v.value_key: np.round(v.attn[v.layer], 6).tolist()})

    export_buttons(
        f"{s.stem}-all-heads",
        lambda: long_table(views, [table(v) for v in views], s.value_key),
        lambda: exports(views, [export(v) for v in views]),
        list(zip(views, drawn)),
        "live_model_export",
    )
    st.caption("The downloads hold the chosen layer (all heads); the enlarged head is the chosen layer and head.")


def neuron_view_section(s: LiveView, state: LiveState, second: ModelFacts | None) -> None:
    """Query and key vectors of one head and query token, their softmax against the model's row, the value norms; of
    each model, side by side."""
    views = [v for v in shown_views(s, state, second) if not explain_unsupported(v.facts, "queries_keys")]
    if not views:
        return
    first_key = {"": "live_value_norms", "_1": "live_value_norms"}  # the second model's chart: live_value_norms1
    drawn = models_side_by_side(
        views, lambda v, sfx: live_neuron_part(v, len(views) > 1, first_key.get(sfx, "live_value_norms1"))
    )
    st.caption("‖f(x_j)‖ = ‖v_j W_O‖ of each key token in this head (METHODS §11): how large a vector it moves.")
    export_buttons(
        f"{s.stem}-H{s.head + 1}-neuron",
        lambda: long_table(views, [pd.DataFrame(table) for _, table, _ in drawn], "attention"),
        lambda: exports(views, [v.export(**fields) for v, (_, _, fields) in zip(views, drawn)]),
        [(v, html) for v, (html, _, _) in zip(views, drawn)],
        "live_neuron_export",
    )


def live_neuron_part(v: LiveView, two: bool, chart_key: str) -> tuple[str, dict, dict]:
    """neuron_part of a view's model, layer, head and query token (the first when none is selected)."""
    where = (v.layer, v.head, v.selected if v.selected is not None else 0)
    return neuron_part(v.facts, v.result, v.labels, (v.text_a, v.text_b), where, two, chart_key)


SECTIONS = {"head": head_view_section, "model": model_view_section, "neuron": neuron_view_section}


# ------------------------------------------------------------------------------------------- similar tokens (§16)


def find_switch() -> bool:
    """The switch of "Find similar tokens in a corpus" (METHODS §16), below a divider: whether it is on."""
    st.divider()
    return st.toggle(
        "Find similar tokens in a corpus",
        key=KEY["find"],
        help="exBERT's search by example: the tokens of a corpus whose vectors (this layer's output, or the heads "
        "shown) are most like the selected token's, with their parts of speech, relations and what they attend to.",
    )


def similar_tokens_section(s: LiveView, state: LiveState, second: LoadedModel | None) -> None:
    """ "Find similar tokens in a corpus" (METHODS §16): off by default, and nothing of it loads until switched on."""
    if not find_switch():
        return
    from app_pages.live.similar_tokens import Ask, find_similar, first_piece

    token = first_piece(s.result, s.selected, s.level)
    heads = tuple(h - 1 for h in state.heads or []) if state.view == "head" else (s.head,)
    ask = None if token is None else Ask(s.text_a, s.text_b, token, s.layer, heads)
    find_similar(current_model(), second, ask, s.result, _open_match)


def window_token(state: LiveState, window: tuple[int, int], labels: list[str]) -> int:
    """The query token of a long input's neuron view, one of the window's (0-based, half-open); 0-based, the window's
    first when none of its tokens is selected."""
    start, end = window
    if not start < int(state.token) <= end:
        keep(replace(state, token=0))
    token = st.selectbox(
        "Query token",
        [0, *range(start + 1, end + 1)],
        key=KEY["token"],
        format_func=lambda i: "none (the window's first token)" if i == 0 else f"{i}: {labels[i - 1]}",
        help="One of the window's tokens; positions are numbered from 1 in the whole input.",
    )
    return int(token) - 1 if token else start


def long_similar_section(
    state: LiveState,
    encoded: Encoded,
    texts: tuple[str, str],
    window: tuple[int, int] | None,
    query: int | None,
    layer: int,
    heads: list[int],
) -> None:
    """ "Find similar tokens in a corpus" of a long input: the query one of the chosen window's tokens (0-based; in
    the head view picked here, in the neuron view the neuron view's query), its vector from a block-wise pass."""
    if not find_switch():
        return
    if window is None:
        st.info(f"Choose a window (at most {MAX_WINDOW} rows), then a query token within it.")
        return
    from app_pages.live.similar_tokens import Ask, find_similar

    if query is None:
        query = window_token(state, window, [pretty_token(t) for t in encoded.tokens])
    find_similar(current_model(), None, Ask(*texts, query, layer, tuple(heads)), None, _open_match)


# ----------------------------------------------------------------------------------------------------------- pages


def long_page(state: LiveState, facts: ModelFacts, texts: tuple[str, str], encoded: Encoded) -> None:
    """A long input (METHODS §19): the head and model views draw the reduced map and a window's lines, computed
    block-wise, the neuron view a window's tokens; the head finder says why it is not drawn."""
    st.caption(f"{encoded.n} tokens. Layers, heads and token positions are numbered from 1 on this page.")
    view_choice()
    state = state.within(facts.n_layers, facts.n_heads, encoded.n).one_head_shown()
    keep(state)
    if state.view == "finder":
        needs_window(encoded)
    else:
        c_layer, c_head, _ = st.columns([2.2, 1.2, 3])
        head_controls(state.view, facts, c_layer, c_head)
        if state.view == "neuron":
            long_neuron_section(state, facts, texts, encoded)
        else:
            long_map_section(state, facts, texts, encoded)


def long_neuron_section(state: LiveState, facts: ModelFacts, texts: tuple[str, str], encoded: Encoded) -> None:
    """The neuron view of a long input's window, and the search of its query token."""
    if explain_unsupported(facts, "queries_keys"):
        return
    layer, head = state.layer - 1, state.head - 1
    pick = lambda window, labels: window_token(state, window, labels)  # noqa: E731
    picked = long_neuron(facts, texts, encoded, (layer, head), pick)
    window, query = (None, None) if picked is None else picked
    long_similar_section(state, encoded, texts, window, query, layer, [head])


def long_map_section(state: LiveState, facts: ModelFacts, texts: tuple[str, str], encoded: Encoded) -> None:
    """The head or model view of a long input's reduced map and window, and (head view) the search of a window token."""
    heads = [h - 1 for h in state.heads or []] if state.view == "head" else [state.head - 1]
    if not heads:
        st.info("Choose at least one head.")
        return
    window = long_views(state.view, facts, texts, encoded, state.layer - 1, heads)
    if state.view == "head":
        long_similar_section(state, encoded, texts, window, None, state.layer - 1, heads)


def short_page(state: LiveState, facts: ModelFacts, texts: tuple[str, str], result: RunResult) -> None:
    """An input of one pass: the head finder, or a view of one model or two with its controls and exports, the heads
    switched off and the search of similar tokens."""
    st.caption(
        f"{result.n} tokens. Layers, heads and token positions are numbered from 1 on this page "
        '("layer-head" as in Clark et al. 2019, so 3-10 is layer 3, head 10).'
    )
    view_choice()
    if state.view == "finder":
        keep(state.within(facts.n_layers, facts.n_heads, result.n))
        show_finder(facts, *texts, on_pick=_open_head)
    else:
        compared = compared_model()
        state, live = controls(state, facts, texts, result)
        SECTIONS[state.view](live, state, compared.facts if compared else None)
        switches_section(facts, *texts)
        if state.view != "model":
            similar_tokens_section(live, state, compared)


def sentence_page(facts: ModelFacts) -> tuple[int, ...]:
    """A sentence or pair typed in, its options bound at the start and written into the URL at the end; the METHODS
    sections it uses (none when the input cannot run)."""
    texts = text_inputs()
    encoded = long_input(facts.name, *texts)
    options = page_options(long=encoded is not None)
    state = bind_state(options)
    cited: tuple[int, ...] = ()
    if encoded is not None:
        long_page(state, facts, texts, encoded)
        cited = (19,)
    else:
        result = run_or_explain(facts.name, *texts)
        if result is not None:
            short_page(state, facts, texts, result)
            cited = (6, 11, 15, 16)
    publish(options)
    return cited


def live_page() -> None:
    """The page: an encoder-decoder's views of a source and target, or a sentence or pair's; the definitions used."""
    st.title("Live attention")
    facts = current_model().facts
    if facts.kind == "encoder-decoder":
        encoder_decoder_live(facts)
        cited: tuple[int, ...] = (18,)
    else:
        cited = sentence_page(facts)
    if cited:
        cite_methods(*cited)


live_page()
