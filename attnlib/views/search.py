"""Figures of corpus search by example (METHODS §16): the matches' UPOS and DEPREL, what each head makes them attend
to most, and each match as its sentence with the matched piece marked and one head's attention from it shaded."""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from attnlib.analyses.labels import CLASS_NAMES
from attnlib.search.by_example import IndexOptions, Match, SearchResult
from attnlib.stats.special import CLASS_KEYS, strip_wordpiece_marker
from attnlib.views.canvas_html import head_color
from attnlib.views.figure import notebook_figure
from attnlib.views.special import COLOURS, head_label

BAR_HEIGHT = 26  # pixels a bar of a horizontal count chart


@notebook_figure
def count_bars(counts: dict[str, int], title: str, colour: str = "#4c78a8") -> go.Figure:
    """A horizontal bar per label (largest on top) of the matches' counts."""
    labels, values = list(counts), list(counts.values())
    fig = go.Figure(
        go.Bar(x=values, y=labels, orientation="h", marker_color=colour, hovertemplate="%{y}: %{x}<extra></extra>")
    )
    fig.update_layout(
        title=title,
        height=170 + BAR_HEIGHT * max(len(labels), 1),
        yaxis={"autorange": "reversed", "type": "category", "dtick": 1},
        xaxis={"title": "matches", "rangemode": "tozero"},
        showlegend=False,
    )
    return fig


@notebook_figure
def attends_to_bars(result: SearchResult, layer: int) -> go.Figure:
    """Per head (1-based "layer-head"), the matches stacked by the class of the key the head attends to most."""
    heads = [t.head for t in result.summary.attends_to]
    labels = [head_label(layer, h) for h in heads]
    fig = go.Figure()
    for key in CLASS_KEYS:
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[t.classes.get(key, 0) for t in result.summary.attends_to],
                name=CLASS_NAMES[key],
                marker_color=COLOURS[key],
                hovertemplate=f"head %{{x}}: %{{y}} matches attend most to {CLASS_NAMES[key]}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Key each head attends to most",
        barmode="stack",
        height=340,
        xaxis={"title": "head (layer-head)", "type": "category"},
        yaxis={"title": "matches"},
        legend={"title": {"text": "key"}},
    )
    return fig


def match_strip(
    tokens: Sequence[str], word_ids: Sequence[int | None], position: int, row: np.ndarray | None, head: int
) -> str:
    """One match as HTML: its pieces in order (a word's pieces joined), the matched one boxed, each shaded by the
    attention `row` [n] that the matched piece gives it in `head` (darkest = the row's largest weight; None: no
    shading)."""
    colour = head_color(head).lstrip("#")
    rgb = tuple(int(colour[i : i + 2], 16) for i in (0, 2, 4))
    top = float(row.max()) if row is not None and len(row) else 1.0
    parts = []
    for j, token in enumerate(tokens):
        weight = 0.0 if row is None else float(row[j])
        alpha = weight / top if top > 0 else 0.0
        style = f"background: rgba({rgb[0]},{rgb[1]},{rgb[2]},{alpha * 0.6:.2f}); padding: 0 1px; border-radius: 3px;"
        if word_ids[j] is None:
            style += " color: #666; font-size: 0.8em;"
        if j == position:
            style += " outline: 2px solid #111; font-weight: 700;"
        text = strip_wordpiece_marker(token) or token
        tip = f"{text}: {weight:.3f}" if row is not None else text
        joined = j > 0 and word_ids[j] is not None and word_ids[j] == word_ids[j - 1]
        parts.append(("" if joined or j == 0 else " ") + f"<span title='{html.escape(tip, quote=True)}' style='{style}'>"
                     f"{html.escape(text)}</span>")  # fmt: skip
    return "<span class='attn-strip' style='line-height: 1.9;'>" + "".join(parts) + "</span>"


def match_caption(rank: int, match: Match) -> str:
    """'3. 0.842 · the (DET, det) · input 17, piece 5' (1-based rank and piece as the page numbers them)."""
    labels = ", ".join(x for x in (match.upos, match.deprel) if x)
    word = f"{match.word} ({labels})" if labels else match.word
    return f"{rank}. cos {match.score:.3f} · {word} · input {match.input + 1}, token {match.position + 1}"


def index_caption(options: IndexOptions, n_inputs: int, n_positions: int, corpus: str) -> str:
    """What an index holds, as the page numbers layers and heads (from 1)."""
    what = (
        "embedding output"
        if options.embeddings
        else f"layer {options.layer + 1} output"
        if not options.heads
        else f"context vectors of layer {options.layer + 1}'s heads"
    )
    return f"Searched: {what} at {n_positions} positions of {n_inputs} inputs of {corpus} ({options.dtype})."
