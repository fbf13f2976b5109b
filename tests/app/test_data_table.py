"""ui/data_table: what a table sends to the page (no browser; test_browser_table sorts one in Chromium)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from support.apptest import tables
from ui.widgets.data_table import cell_text, table_data


def test_cells_are_shown_as_a_reader_expects():
    assert cell_text(58.33333, "%.1f") == "58.3" and cell_text(4.44, "%+.1f") == "+4.4"
    assert cell_text(0.5) == "0.5" and cell_text(12.0) == "12" and cell_text(0.123456) == "0.1235"
    assert cell_text(3) == "3" and cell_text(np.int64(7)) == "7" and cell_text(np.float64(0.25)) == "0.25"
    assert cell_text(None) == "" and cell_text(float("nan")) == ""
    assert cell_text("3-9") == "3-9" and cell_text(True) == "True"


def test_the_page_gets_raw_cells_to_sort_and_their_text():
    frame = pd.DataFrame(
        {
            "relation": ["nsubj", "obj"],
            "accuracy %": [58.333, np.nan],
            "count": np.array([12, 3]),
            "open": ["?layer=1", None],
        }
    )
    data = table_data(frame, formats={"accuracy %": "%.1f"}, links={"open": "open"})
    assert json.loads(json.dumps(data, allow_nan=False)) == data  # strict JSON: NaN sent as null
    assert data["columns"] == ["relation", "accuracy %", "count", "open"]
    assert data["rows"] == [["nsubj", 58.333, 12, "?layer=1"], ["obj", None, 3, None]]
    assert data["text"] == [["nsubj", "58.3", "12", "?layer=1"], ["obj", "", "3", ""]]
    assert data["numeric"] == [False, True, True, False]
    assert data["links"] == [None, None, None, "open"]


def _app() -> None:
    import pandas as pd

    from ui.widgets.data_table import data_table

    data_table(pd.DataFrame({"head": ["1-1", "2-3"], "score": [0.25, 0.75]}), key="scores")


def test_an_app_table_reads_back_as_its_frame():
    at = AppTest.from_function(_app).run()
    assert not at.exception
    [shown] = tables(at)
    pd.testing.assert_frame_equal(shown, pd.DataFrame({"head": ["1-1", "2-3"], "score": [0.25, 0.75]}))
