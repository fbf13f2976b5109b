"""Which figures draw which result: each view module registers the figures of its result types (`@draws(DepsResult)`
for one model, `@draws(DepsResult, compared=True)` for several side by side), and `figures_of` and
`compared_figures_of` find them. The results never name a drawing function (as pandas' `DataFrame.plot` finds its
backend by name): the notebook's run and the report ask here."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., list])

DRAWING_MODULES: tuple[str, ...] = ("attnlib.views.lens", "attnlib.views.routes", "attnlib.views.patching")
"""The view modules that register figures, imported the first time figures are asked for."""

_ONE: dict[type, Callable[[Any, str], list]] = {}
_COMPARED: dict[type, Callable[[Mapping[str, Any]], list]] = {}


def draws(result_type: type, *, compared: bool = False) -> Callable[[F], F]:
    """Register a function as the figures of `result_type`: `(result, model) -> list` for one model, or with
    `compared` `({model: result}) -> list` for several together."""

    def register(function: F) -> F:
        (_COMPARED if compared else _ONE)[result_type] = function
        return function

    return register


def _registered() -> None:
    for name in DRAWING_MODULES:
        importlib.import_module(name)


def figures_of(result: Any, model: str) -> list:
    """The figures of one model's result (an empty list where none are registered for its type)."""
    _registered()
    draw = _ONE.get(type(result))
    return [] if draw is None else draw(result, model)


def compared_figures_of(results: Mapping[str, Any]) -> list:
    """The figures of several models' results of one type together (model -> result), as the report compares them;
    one model's own figures where its type registers no comparison."""
    _registered()
    first = next(iter(results.values()))
    compare = _COMPARED.get(type(first))
    if compare is not None:
        return compare(results)
    if len(results) == 1:
        return figures_of(first, next(iter(results)))
    return [figure for model, result in results.items() for figure in figures_of(result, model)]
