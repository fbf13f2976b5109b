"""The drawing registry (attnlib.views.drawing): which registered function draws a result, for one model and for
several, on result types made here (every analysis's own: tests/analyses/test_runs.py)."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from attnlib.views.drawing import compared_figures_of, draws, figures_of
from attnlib.views.figure import Figure


@dataclass
class Counted:
    value: int


class OneOnly(Counted):
    pass


class ComparedOnly(Counted):
    pass


class Both(Counted):
    pass


class Neither(Counted):
    pass


def titled(text: str) -> go.Figure:
    return go.Figure(layout={"title": {"text": text}})


@draws(OneOnly)
@draws(Both)
def one_model(result: Counted, model: str) -> list:
    return [titled(f"one {model} {result.value}")]


@draws(ComparedOnly, compared=True)
@draws(Both, compared=True)
def together(results: dict[str, Counted]) -> list:
    return [titled("together " + " ".join(f"{m} {r.value}" for m, r in results.items()))]


def titles(figures: list) -> list[str]:
    assert all(isinstance(f, Figure) for f in figures)  # each shows itself in a notebook
    return [f.layout.title.text for f in figures]


def test_one_model_is_drawn_by_its_own_function_else_by_the_comparison_of_one():
    assert titles(figures_of(OneOnly(1), "a")) == ["one a 1"]
    assert titles(figures_of(Both(2), "a")) == ["one a 2"]
    assert titles(figures_of(ComparedOnly(3), "a")) == ["together a 3"]
    assert figures_of(Neither(4), "a") == []


def test_several_models_are_compared_where_the_type_registers_it_else_drawn_in_turn():
    assert titles(compared_figures_of({"a": Both(1), "b": Both(2)})) == ["together a 1 b 2"]
    assert titles(compared_figures_of({"a": ComparedOnly(1), "b": ComparedOnly(2)})) == ["together a 1 b 2"]
    assert titles(compared_figures_of({"a": OneOnly(1), "b": OneOnly(2)})) == ["one a 1", "one b 2"]
    assert titles(compared_figures_of({"a": Both(5)})) == ["one a 5"]  # one model: its own figures, as the report
    assert compared_figures_of({"a": Neither(1), "b": Neither(2)}) == []
