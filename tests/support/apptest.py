"""What a Streamlit AppTest shows: its figures and tables as sent to the page, its downloads built on click, and its
tabs opened in turn."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest.mock import patch

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ShownFigure:
    """A figure as the app sent it to the page (ui/plotly_figure): its key and its Plotly JSON."""

    key: str
    spec: str


def figures(node) -> list[ShownFigure]:
    """Every figure under an AppTest node (the app, a tab, a column), in page order."""
    from ui.widgets.plotly_figure import COMPONENT

    shown = [c for c in node.get("bidi_component") if c.proto.component_name == COMPONENT]
    return [ShownFigure(str(c.key), json.loads(c.proto.json)["figure"]) for c in shown]


def tables(node) -> list[pd.DataFrame]:
    """Every table under an AppTest node (ui/data_table), in page order, as the DataFrame its cells were sent from."""
    from ui.widgets.data_table import COMPONENT

    shown = [json.loads(c.proto.json) for c in node.get("bidi_component") if c.proto.component_name == COMPONENT]
    return [pd.DataFrame(t["rows"], columns=t["columns"]) for t in shown]


@contextmanager
def downloads_on_click() -> Iterator[dict[str, Callable[[], Any]]]:
    """While in the block, every download button drawn with data built on click (ui.widgets.downloads): file name ->
    what the click would build (the last drawn of that name)."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    drawn: dict[str, Callable[[], Any]] = {}
    register = MediaFileManager.add_deferred

    def recorded(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        drawn[str(file_name)] = data_callable
        return register(self, data_callable, mimetype, coordinates, file_name, **kwargs)

    with patch.object(MediaFileManager, "add_deferred", recorded):
        yield drawn


def open_tab(at, key: str, label: str):
    """Open one of a page's tabs (only the open tab is drawn) and rerun; the AppTest."""
    at.session_state[key] = label
    return at.run()


def across_tabs(at, key: str, labels, get) -> list:
    """get(at) with each tab opened in turn, concatenated; no tab may raise."""
    found = []
    for label in labels:
        open_tab(at, key, label)
        assert not at.exception, (label, [e.value for e in at.exception])
        found += get(at)
    return found


def plotly_values(values) -> np.ndarray:
    """A Plotly JSON array (a list, or plotly 6's {dtype, bdata} with its shape when it has two dimensions)."""
    if isinstance(values, dict):
        flat = np.frombuffer(base64.b64decode(values["bdata"]), np.dtype(values["dtype"]))
        shape = values.get("shape")
        return flat if shape is None else flat.reshape([int(x) for x in str(shape).split(",")])
    return np.asarray(values, dtype=np.float64)
