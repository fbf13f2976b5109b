"""What the Live page's views draw of one model (LiveView, built in one place) and of two side by side, with where the
two differ most on the input."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import streamlit as st

from app_pages.live.live_state import LEVELS, LiveState
from app_pages.live.shows import QUANTITY, SHOWS
from attnlib.analyses.special import input_layer_statistics
from attnlib.core.model import ModelFacts
from attnlib.core.runner import InputError, RunResult
from attnlib.core.words import RowRule
from attnlib.present.comparison import largest_difference
from attnlib.present.labels import STAT_NAMES
from attnlib.present.tables import by_layer
from ui.sources.live_inputs import cached_run, token_maps, units
from ui.widgets.side_by_side import side_by_side

DIFFER_KEYS = ("cls", "sep", "punct", "prev", "self", "next")  # shares compared between two models on one input
T = TypeVar("T")
Measure = tuple[str, RowRule, str]  # what the maps hold: (level, word row rule, "weights" or "norms")
Maps = tuple[np.ndarray, list[str], np.ndarray]  # what units gives: maps [layers, heads, u, u], labels, segments [u]


@dataclass
class LiveView:
    """What the views draw: the run, its units (tokens or words) and the chosen layer, head and token (0-based)."""

    facts: ModelFacts
    text_a: str
    text_b: str
    result: RunResult
    level: str
    rule: RowRule
    show: str  # "weights" or "norms"
    attn: np.ndarray  # [layers, heads, u, u]: attention weights, or norms normalised over each row
    labels: list[str]
    segments: np.ndarray  # [u]
    layer: int
    head: int
    selected: int | None

    @property
    def stem(self) -> str:
        """The start of download file names."""
        norms = "-norms" if self.show == "norms" else ""
        return f"{self.facts.name.replace('/', '_')}{norms}-L{self.layer + 1}"

    @property
    def level_title(self) -> str:
        words = f" (word rows: {self.rule})" if self.level == "word" else ""
        return LEVELS[self.level] + words + (", norms ‖α f(x)‖ per row" if self.show == "norms" else "")

    @property
    def quantity(self) -> str:
        """What the maps hold, for hints and tooltips."""
        return QUANTITY[self.show]

    @property
    def value_key(self) -> str:
        """The name of the maps' numbers in downloads."""
        return "norm_share" if self.show == "norms" else "attention"

    def export(self, **extra) -> dict:
        """The JSON download: where the numbers come from, 0-based indices, and the view's own fields."""
        origin = {"model": self.facts.name, "text_a": self.text_a, "text_b": self.text_b or None, "shows": self.show}
        return {**origin, "indices": "0-based", "layer": self.layer, "labels": self.labels, **extra}


def live_view(
    facts: ModelFacts,
    texts: tuple[str, str],
    result: RunResult,
    measure: Measure,
    state: LiveState,
    maps: Maps | None = None,
) -> LiveView:
    """One model's view of the input: its maps of the measure (computed unless given), and the state's layer, head and
    token kept inside its layers, heads and units."""
    level, rule, show = measure
    attn, labels, segments = units(result, level, facts.name, texts, rule, show) if maps is None else maps
    kept = state.within(facts.n_layers, facts.n_heads, len(labels))
    return LiveView(
        facts=facts,
        text_a=texts[0],
        text_b=texts[1],
        result=result,
        level=level,
        rule=rule,
        show=show,
        attn=attn,
        labels=labels,
        segments=segments,
        layer=kept.layer - 1,
        head=kept.head - 1,
        selected=kept.selected,
    )


def compared_view(s: LiveView, state: LiveState, facts: ModelFacts) -> LiveView | None:
    """The same input, level and measure in a second model (its own tokens), the layer and head kept in its range."""
    if facts.kind == "encoder-decoder":
        st.info(
            f"{facts.name} is an encoder-decoder: open it as the model to see its encoder, decoder and cross attention."
        )
        return None
    try:
        r = cached_run(facts.name, s.text_a, s.text_b)
    except InputError as exc:
        st.warning(f"{facts.name}: {exc}")
        return None
    return live_view(facts, (s.text_a, s.text_b), r, (s.level, s.rule, s.show), state)


def shown_views(s: LiveView, state: LiveState, second: ModelFacts | None) -> list[LiveView]:
    """The chosen model's view and, when a second model is compared and can show the input, the second's."""
    return [v for v in (s, compared_view(s, state, second) if second else None) if v is not None]


def layer_shares(v: LiveView) -> dict[str, dict]:
    """Token-level shares of the shown measure per layer (mean over heads), as largest_difference compares them."""
    maps = token_maps(v.facts.name, v.text_a, v.text_b, v.show)
    return by_layer(input_layer_statistics(maps, v.result, v.facts.causal), DIFFER_KEYS, STAT_NAMES)


def models_side_by_side(views: list[LiveView], draw: Callable[[LiveView, str], T]) -> list[T]:
    """draw(view, suffix) of each model, a column each headed by its model and layer when two, and where the two
    differ most on this input; what the draws returned."""
    headers = [
        f"**{v.facts.name}** · layer {v.layer + 1} of {v.facts.n_layers}, {v.facts.n_heads} heads" for v in views
    ]
    drawn = side_by_side(views, draw, headers)
    if len(views) == 1:
        return drawn
    difference = largest_difference(layer_shares(views[0]), layer_shares(views[1]))
    if difference is not None:
        st.caption(
            f"{views[0].facts.name} vs {views[1].facts.name} on this input ({SHOWS[views[0].show].lower()}, "
            f"token level, mean over heads, layers by number): {difference.text()}"
        )
    return drawn
