"""A decoder on the Dependency heads and Local vs global pages (METHODS §18): the ceiling columns, and histograms over
offsets k <= 0 of attention and attribution, and the one example's exact attribution (causal rows)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import ROOT
from support.apptest import figures, open_tab, tables
from support.models import save_tiny
from ui.widgets.page_tabs import LOCAL_GLOBAL

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-depspos-pages"))


def values(x) -> np.ndarray:
    """A Plotly JSON array: a list, or typed ({dtype, bdata} in base64)."""
    if isinstance(x, dict):
        return np.frombuffer(base64.b64decode(x["bdata"]), dtype=x["dtype"])
    return np.asarray(x)


def computed(at: AppTest, page: str) -> AppTest:
    """The page run, every "Compute" button clicked; no run may raise."""
    at.run()
    at.switch_page(page)
    at.run()
    for _ in range(4):
        assert not at.exception, [e.value for e in at.exception]
        asks = [b for b in at.button if str(b.key).startswith("compute:")]
        if not asks:
            break
        asks[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_dependency_heads_page_shows_a_decoders_ceilings(gpt2_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), limit="6", min_count="1")
    computed(at, "app_pages/deps/page.py")
    (table, *_) = tables(at)
    ceilings = ["ceiling dep->head %", "ceiling head<-dep %"]
    assert set(ceilings) <= set(table.columns)
    assert ((table[ceilings] >= 0) & (table[ceilings] <= 100)).all().all()
    for _, row in table.iterrows():  # no head passes the ceiling of its direction
        assert row["accuracy %"] <= row[f"ceiling {row['direction']} %"] + 1e-9
    assert any("visible side" in c.value for c in at.caption)


def test_local_global_page_draws_a_decoders_attention_and_attribution_over_offsets_up_to_zero(gpt2_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), limit="4", tab="histograms")
    computed(at, "app_pages/local_global/page.py")
    assert at.session_state["lg_tab"] == LOCAL_GLOBAL["histograms"]
    notes = " ".join(i.value for i in at.info)
    assert "offsets k <= 0" in notes and "no attribution" not in notes
    shown = [f.spec if isinstance(f.spec, dict) else json.loads(f.spec) for f in figures(at)]
    assert shown
    for spec in shown:
        bars = [t for t in spec["data"] if t.get("type") == "bar"]
        assert bars and {t["name"] for t in bars} == {"attention", "input contribution (HTA)"}
        assert all(values(t["x"]).max() <= 0 for t in bars)
    open_tab(at, "lg_tab", LOCAL_GLOBAL["example"])  # the one-example tab offers the exact attribution, and draws it
    assert not at.exception, [e.value for e in at.exception]
    assert not any("No attribution for this decoder" in i.value for i in at.info)
    (go,) = [b for b in at.button if b.key == "lg_example_go"]
    go.click().run()
    assert not at.exception and not at.error, ([e.value for e in at.exception], [e.value for e in at.error])
    assert not [b for b in at.button if b.key == "lg_example_go"]  # computed: the offer is gone


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_compared_dependency_tables_give_the_decoders_ceilings_only(gpt2_dir, tiny_model_dir):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(gpt2_dir), cmp=str(tiny_model_dir), limit="6", min_count="1")
    computed(at, "app_pages/deps/page.py")
    (table, *_) = tables(at)
    assert f"{gpt2_dir}: ceiling head<-dep %" in table.columns and f"{gpt2_dir}: accuracy %" in table.columns
    assert f"{tiny_model_dir}: accuracy %" in table.columns
    assert not [c for c in table.columns if c.startswith(f"{tiny_model_dir}: ceiling")]
