"""One model's figures on the page, or two models' side by side: a column each under its header."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import streamlit as st

T = TypeVar("T")
R = TypeVar("R")


def model_columns(headers: list[str]) -> list:
    """Where each model's figures go: the page itself for one model; for two, a column each under its header line."""
    if len(headers) == 1:
        return [st.container()]
    columns = st.columns(len(headers))
    for column, header in zip(columns, headers):
        column.markdown(header)
    return columns


def suffix(index: int, count: int) -> str:
    """What a drawn item's widget keys and download names end with: nothing alone, `_1` and `_2` side by side."""
    return "" if count == 1 else f"_{index + 1}"


def side_by_side(items: Sequence[T], draw: Callable[[T, str], R], headers: Sequence[str] | None = None) -> list[R]:
    """draw(item, suffix) for each item, in a column each when there are several (headed by `headers`, by default
    each item's bold `model`); what the draws returned, in order."""
    names = list(headers) if headers is not None else [f"**{cast(Any, item).model}**" for item in items]
    drawn = []
    for i, (column, item) in enumerate(zip(model_columns(names), items)):
        with column:
            drawn.append(draw(item, suffix(i, len(items))))
    return drawn
