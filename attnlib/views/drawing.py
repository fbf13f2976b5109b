"""Which figures draw which result: each view module registers the figures of its result types (`@draws(DepsResult)`
for one model, `@draws(DepsResult, compared=True)` for several side by side), and `figures_of` and
`compared_figures_of` find them. The results never name a drawing function (as pandas' `DataFrame.plot` finds its
backend by name): the notebook's run (attnlib.runs) and the report ask here."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from attnlib.views.display import View
from attnlib.views.figure import as_figure

F = TypeVar("F", bound=Callable[..., list])

DRAWING_MODULES: tuple[str, ...] = (
    "attnlib.views.aggregation",
    "attnlib.views.attention",
    "attnlib.views.deps",
    "attnlib.views.gradient",
    "attnlib.views.hta",
    "attnlib.views.importance",
    "attnlib.views.lens",
    "attnlib.views.norms",
    "attnlib.views.patching",
    "attnlib.views.positions",
    "attnlib.views.probe",
    "attnlib.views.qk",
    "attnlib.views.retrieval",
    "attnlib.views.roles",
    "attnlib.views.routes",
    "attnlib.views.special",
)
"""The view modules that register figures (one per analysis that draws), imported the first time figures are asked
for: they import the result types they draw, which never import them back."""

_ONE: dict[type, Callable[[Any, str], list]] = {}
_COMPARED: dict[type, Callable[[Mapping[str, Any]], list]] = {}


def draws(result_type: type, *, compared: bool = False) -> Callable[[F], F]:
    """Register a function as the figures of `result_type`: `(result, model) -> list` for one model, or with
    `compared` `({model: result}) -> list` for several together (which also draws one model, as `{model: result}`,
    where no one-model function is registered)."""

    def register(function: F) -> F:
        (_COMPARED if compared else _ONE)[result_type] = function
        return function

    return register


def _registered() -> None:
    for name in DRAWING_MODULES:
        importlib.import_module(name)


def _shown(figures: list) -> list:
    """Each figure as one that shows itself in a notebook (a plotly figure as a Figure; a canvas View as it is)."""
    return [f if isinstance(f, View) else as_figure(f) for f in figures]


def figures_of(result: Any, model: str) -> list:
    """The figures of one model's result (an empty list where none are registered for its type)."""
    _registered()
    draw = _ONE.get(type(result))
    if draw is not None:
        return _shown(draw(result, model))
    compare = _COMPARED.get(type(result))
    return [] if compare is None else _shown(compare({model: result}))


def compared_figures_of(results: Mapping[str, Any]) -> list:
    """The figures of several models' results of one type together (model -> result), as the report compares them;
    one model's own figures for one, or each model's in turn where its type registers no comparison."""
    _registered()
    first = next(iter(results.values()))
    compare = _COMPARED.get(type(first))
    if len(results) == 1 or compare is None:
        return [figure for model, result in results.items() for figure in figures_of(result, model)]
    return _shown(compare(results))
