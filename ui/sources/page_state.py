"""Page options bound to the session and the URL: declared once, kept across pages, reproduced by a copied link.

Streamlit drops the value of a widget that a run does not draw (another page ran) and clears the URL when the page
changes. Each option therefore lives under its widget key and a copy of our own (`_kept_<key>`): a run starts by
giving the widget its kept value back (else the URL's, on the first run of a session, else the default) and writes
every option into the URL. URL keys are short and lower-case; booleans are 1/0; lists of numbers are comma-separated;
an empty text leaves its key out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Generic, Literal, TypeVar

import streamlit as st

from attnlib.analyses.base import Options, choices_of, option_types

Kind = Literal["str", "int", "float", "bool", "ints"]
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(frozen=True)
class Option:
    """One page option: its widget key, URL key, default and allowed values (a mapping gives their URL text)."""

    key: str
    param: str
    default: Any
    choices: Mapping[str, Any] | Sequence[Any] | None = None
    lo: int | None = None
    hi: int | None = None
    omit_default: bool = False  # leave the key out of the URL while the value is the default

    @property
    def kind(self) -> Kind:
        """What the value is, from the default (None is a list of numbers: e.g. 'every head')."""
        if isinstance(self.default, bool):
            return "bool"
        if isinstance(self.default, float):
            return "float"
        if isinstance(self.default, int):
            return "int"
        if self.default is None or isinstance(self.default, list):
            return "ints"
        return "str"

    def valid(self, value: Any) -> bool:
        """Whether a value may be given to the widget."""
        if self.kind in ("int", "float") and not isinstance(value, bool) and isinstance(value, int | float):
            return (self.lo is None or value >= self.lo) and (self.hi is None or value <= self.hi)
        if self.choices is None:
            return True
        return value in (self.choices.values() if isinstance(self.choices, Mapping) else self.choices)

    def parse(self, text: str) -> Any:
        """The value a URL text stands for; ValueError when it stands for none."""
        if isinstance(self.choices, Mapping):
            if text not in self.choices:
                raise ValueError(text)
            return self.choices[text]
        kind = self.kind
        if kind == "bool":
            if text.lower() not in TRUE + FALSE:
                raise ValueError(text)
            return text.lower() in TRUE
        if kind in ("int", "float"):
            value = int(text) if kind == "int" else float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            value = value if self.lo is None else max(value, self.lo)
            return value if self.hi is None else min(value, self.hi)
        if kind == "ints":
            return [int(x) for x in text.split(",") if x.strip()]
        if not self.valid(text):
            raise ValueError(text)
        return text

    def text(self, value: Any) -> str | None:
        """The URL text of a value; None leaves the key out."""
        if value is None or value == "" or (self.omit_default and value == self.default):
            return None
        if isinstance(self.choices, Mapping):
            return next((k for k, v in self.choices.items() if v == value), None)
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, list | tuple):
            return ",".join(str(int(x)) for x in value)
        return str(value)


def _kept(option: Option) -> str:
    return f"_kept_{option.key}"


def from_url(option: Option) -> Any:
    """The option's value in the URL, else its default."""
    text = st.query_params.get(option.param)
    try:
        return option.default if text is None else option.parse(text)
    except ValueError:
        return option.default


def restore(options: Iterable[Option]) -> None:
    """Give each widget its value: its own when drawn on the last run, else the kept one, else the URL's."""
    state = st.session_state
    for option in options:
        if option.key in state and option.valid(state[option.key]):
            value = state[option.key]
        elif _kept(option) in state and option.valid(state[_kept(option)]):
            value = state[_kept(option)]
        else:
            value = from_url(option)
        state[option.key] = state[_kept(option)] = value


def publish(options: Iterable[Option]) -> None:
    """Keep each option's current value and write it into the URL."""
    state = st.session_state
    for option in options:
        value = state.get(option.key, state.get(_kept(option), option.default))
        state[_kept(option)] = value
        text = option.text(value)
        if text is not None:
            st.query_params[option.param] = text
        elif option.param in st.query_params:
            del st.query_params[option.param]


def bind(options: Sequence[Option]) -> dict[str, Any]:
    """Restore and publish the options of a page; their values by URL key."""
    restore(options)
    publish(options)
    return {option.param: st.session_state[option.key] for option in options}


O = TypeVar("O", bound=Options)


def field_option(defaults: Options, name: str, key: str, param: str, **kwargs: Any) -> Option:
    """The page option of one field of an analysis's options: its default is that field's value in `defaults` (the
    analysis's defaults, or what the page shows first)."""
    return Option(key, param, getattr(defaults, name), **kwargs)


@dataclass(frozen=True)
class AnalysisForm(Generic[O]):
    """A page's options of one analysis: the fields it lays out with its own widgets (field name -> page option), the
    fields it keeps at their defaults, and a plain widget for each other field, so that an option added to the
    analysis appears on the page (URL key: the field's name) without editing it."""

    defaults: O  # the analysis's defaults, or what the page shows first
    laid_out: Mapping[str, Option]
    key: str  # the widget keys of the plain widgets start with it
    fixed: tuple[str, ...] = ()

    def others(self) -> dict[str, Option]:
        """The page options of the fields the page neither lays out nor fixes."""
        types = option_types(type(self.defaults))
        return {
            f.name: Option(
                f"{self.key}_{f.name}",
                f.name,
                getattr(self.defaults, f.name),
                choices=choices_of(types[f.name]),
                lo=f.metadata.get("minimum"),
            )
            for f in fields(self.defaults)
            if f.name not in self.laid_out and f.name not in self.fixed
        }

    def bind(self) -> O:
        """Restore and publish every option of the form: the defaults with each bound field set from its option."""
        every = {**self.laid_out, **self.others()}
        values = bind(list(every.values()))
        return replace(self.defaults, **{name: values[option.param] for name, option in every.items()})

    def other_widgets(self) -> None:
        """A widget for each field the page does not lay out (a checkbox, a select box or a number), labelled with
        the option's help."""
        help_of = {f.name: f.metadata["help"].replace("%(default)s", str(f.default)) for f in fields(self.defaults)}
        for name, option in self.others().items():
            label = help_of[name][:1].upper() + help_of[name][1:]
            if option.kind == "bool":
                st.checkbox(label, key=option.key)
            elif option.choices is not None:
                st.selectbox(label, list(option.choices), key=option.key)
            elif option.kind == "int":
                st.number_input(label, min_value=option.lo, step=1, key=option.key)
            elif option.kind == "float":
                st.number_input(label, min_value=option.lo, step=0.05, format="%.2f", key=option.key)
            else:
                st.text_input(label, key=option.key)


def set_value(option: Option, value: Any) -> None:
    """Change an option (before its widget is drawn in this run), its kept copy and the URL."""
    st.session_state[option.key] = value
    publish([option])


def forget(options: Iterable[Option]) -> None:
    """Drop options (widget value, kept copy, URL key): the next run starts them from their defaults."""
    for option in options:
        st.session_state.pop(option.key, None)
        st.session_state.pop(_kept(option), None)
        if option.param in st.query_params:
            del st.query_params[option.param]


def lazy_tabs(option: Option, labels: Sequence[str]) -> tuple[str, Any]:
    """Tabs of which only the open one is drawn: (its label, its container). Streamlit reruns the page on a switch;
    the open tab is an option like any other (option.choices maps URL text to label), so it is kept and linked."""
    bind([option])
    tabs = st.tabs(list(labels), key=option.key, on_change="rerun")
    label = st.session_state[option.key]
    return label, tabs[list(labels).index(label)]
