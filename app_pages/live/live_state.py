"""The Live page's options as one state: each field an option of `ui/sources/page_state` (its widget key and URL key),
bound once at the start of a run, changed by the page's callbacks, and written into the URL once at its end."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import streamlit as st

from app_pages.live.heads_off import CLICK, OFF
from app_pages.live.long_live import WINDOW_OPTIONS
from app_pages.live.shows import SHOW
from attnlib.core.words import ROW_RULES, RowRule
from ui.sources.page_state import Option, bind, set_value

VIEWS = {"head": "Head view", "model": "Model view", "neuron": "Neuron view", "finder": "Head finder"}
LEVELS = {"token": "Tokens", "word": "Words"}
FILTER_PARAMS = {"all": "All", "aa": "A→A", "bb": "B→B", "ab": "A→B", "ba": "B→A"}

OPTIONS = {  # each field of LiveState, in the URL's order
    "view": Option("live_view", "view", "head", list(VIEWS)),
    "level": Option("live_level", "level", "token", list(LEVELS)),
    "rule": Option("live_rule", "rule", "mean", list(ROW_RULES)),
    "show": SHOW,
    "layer": Option("live_layer", "layer", 1, lo=1),
    "head": Option("live_head", "head", 1, lo=1),
    "heads": Option("live_heads", "heads", None),  # None: every head
    "token": Option("live_token", "token", 0, lo=0, omit_default=True),  # 0: no token selected
    "pair_filter": Option("live_filter", "filter", "All", FILTER_PARAMS),
    "off": OFF,
    "click": CLICK,
    "find": Option("live_find", "find", False, omit_default=True),  # "Find similar tokens in a corpus" is open
}
KEY = {name: option.key for name, option in OPTIONS.items()}  # each field's widget key


@dataclass(frozen=True)
class LiveState:
    """The page's options as its widgets hold them: layer, head, heads and token 1-based."""

    view: str  # a key of VIEWS
    level: str  # a key of LEVELS
    rule: RowRule  # how a word's rows merge
    show: str  # "weights" or "norms"
    layer: int
    head: int  # the head of the model and neuron views
    heads: list[int] | None  # the head view's heads; None: every head
    token: int  # 0: none selected
    pair_filter: str  # a value of FILTER_PARAMS
    off: str  # the heads switched off, "layer-head,..."
    click: bool  # clicks in the model view switch heads off
    find: bool  # "Find similar tokens in a corpus" is open

    @property
    def selected(self) -> int | None:
        """The selected token, 0-based; None when none is."""
        return int(self.token) - 1 if self.token else None

    def within(self, n_layers: int, n_heads: int, n_units: int) -> LiveState:
        """The layer, head and heads kept inside a model's (None: every head) and the token inside an input's units."""
        heads = self.heads if self.heads is not None else range(1, n_heads + 1)
        return replace(
            self,
            layer=min(max(int(self.layer), 1), n_layers),
            head=min(max(int(self.head), 1), n_heads),
            heads=sorted({h for h in heads if 1 <= h <= n_heads}),
            token=self.token if 0 <= int(self.token) <= n_units else 0,
        )

    def one_head_shown(self) -> LiveState:
        """When the head view shows one head, that head is the chosen one (the other views open on it)."""
        return (
            replace(self, head=self.heads[0]) if self.view == "head" and self.heads and len(self.heads) == 1 else self
        )


def page_options(long: bool) -> list[Option]:
    """The options the page keeps in the URL: the state's, and for a long input the window's."""
    return list(OPTIONS.values()) + (WINDOW_OPTIONS if long else [])


def bind_state(options: list[Option]) -> LiveState:
    """Restore the page's options (from the last run, else the URL, else the defaults) and publish them; the state."""
    values = bind(options)
    return LiveState(**{name: values[option.param] for name, option in OPTIONS.items()})


def keep(state: LiveState) -> None:
    """Give the widgets the state's values where they differ (before those widgets are drawn in this run)."""
    for name, option in OPTIONS.items():
        if st.session_state.get(option.key) != getattr(state, name):
            st.session_state[option.key] = getattr(state, name)


def change(**values: Any) -> None:
    """A callback's change of options, by field name: kept for the next run and written into the URL."""
    for name, value in values.items():
        set_value(OPTIONS[name], value)
