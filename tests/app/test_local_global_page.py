"""The Local vs global page (METHODS §8, §9, §13): the shipped result, a small corpus on request, two models of
different depth, and the aggregation section against the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlib.results.shipped import ROOT
from attnlib.stats.norms import MEASURES
from support.apptest import across_tabs, figures, open_tab, tables
from support.pages import assert_table_equals_cli, cli_aggregation, page_with
from support.positions import TABS

pytestmark = pytest.mark.usefixtures("one_thread")


def test_page_opens_with_the_shipped_result():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/local_global/page.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Local versus global"
    assert len(figures(at)) == 1  # only the open tab, Centre of mass, is drawn
    assert any("precomputed" in c.value for c in at.caption)
    assert not at.error
    charts = across_tabs(at, "lg_tab", TABS.values(), figures)
    assert len(charts) >= 9  # centre of mass, two histogram grids, three correlation figures, aggregation, example
    assert "Global aggregation" in [h.value for h in open_tab(at, "lg_tab", TABS["aggregation"]).subheader]


@pytest.mark.slow
def test_page_computes_a_small_corpus_on_request():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/local_global/page.py").run()
    at.number_input(key="local_global_limit").set_value(3).run()
    at.number_input(key="lg_k").set_value(2).run()
    compute = [b for b in at.button if b.label.startswith("Compute for")]
    assert compute and compute[0].label == "Compute for 3 inputs"
    compute[0].click().run()
    assert not at.exception, at.exception
    assert any("3 inputs of" in c.value and "computed here" in c.value for c in at.caption)
    charts = across_tabs(at, "lg_tab", [TABS["com"], TABS["histograms"], TABS["correlation"]], figures)
    assert len(charts) >= 6
    assert at.query_params["probes"] == "2"


def _numbers_of_difference(text: str) -> tuple[float, float]:
    import re

    found = re.search(r"largest difference: .* in layer \d+, (-?\d+\.\d+) vs (-?\d+\.\d+)", text)
    assert found, text
    return float(found.group(1)), float(found.group(2))


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_compares_two_models_of_different_depth(tiny_model_dir, tmp_path):
    from support.models import save_tiny_bert
    from support.pages import assert_table_equals_cli, cli_aggregation, page_with

    first, second = str(tiny_model_dir), str(save_tiny_bert(tmp_path / "three-layers", layers=3, seed=1))
    at = page_with(first, second, tab="aggregation")
    for command in ("positions", "aggregation"):
        for name in (first, second):
            at.button(key=f"compute:{command}:{name}").click().run()
            assert not at.exception, at.exception
    assert at.query_params["cmp"] == second
    aggregation = next(d for d in tables(at) if "measure" in d.columns)
    aggregation_lines = [m.value for m in at.markdown if "largest difference" in m.value]
    specs = [json.dumps(json.loads(c.spec)) for c in figures(at)]  # "/" unescaped
    specs += across_tabs(
        at,
        "lg_tab",
        [TABS["com"], TABS["correlation"]],
        lambda at: [json.dumps(json.loads(c.spec)) for c in figures(at)],
    )
    summary = next(d for d in tables(open_tab(at, "lg_tab", TABS["com"])) if "attention centre of mass" in d.columns)
    assert list(summary["model"]) == [first] * 2 + [second] * 3  # a row per layer of each model
    data = {name: cli_aggregation(name) for name in (first, second)}
    for name in (first, second):
        assert_table_equals_cli(aggregation, name, data[name])
    # The aggregation line: the largest |difference| over the layers both have, of Spearman and centre of mass.
    diffs = [
        abs(np.array(data[first][key][m][:2], float) - np.array(data[second][key][m][:2], float)).max()
        for key, names in (("spearman", MEASURES), ("center_of_mass", (*MEASURES, "attribution")))
        for m in names
    ]
    assert len(aggregation_lines) == 2  # positions (above the tabs), then aggregation
    a, b = _numbers_of_difference(aggregation_lines[1])
    assert abs(a - b) == pytest.approx(max(diffs), abs=0.011)
    assert sum(first in s and second in s for s in specs) >= 7  # overlays and side-by-side heatmaps name both
    assert any("relative depth" in s for s in specs)  # 2 and 3 layers: the line charts share a relative-depth axis


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_aggregation_section_equals_the_cli(tiny_model_dir):
    name = str(tiny_model_dir)
    at = page_with(name)
    assert any("layer-output attribution of every layer" in i.value for i in at.info)  # asks before it computes
    at.button(key=f"compute:aggregation:{name}").click().run()
    assert not at.exception, at.exception
    shown = [d for d in tables(at) if "measure" in d.columns]
    assert len(shown) == 1 and set(shown[0]["model"]) == {name}
    assert any("3 inputs of" in c.value and "computed here" in c.value for c in at.caption)
    assert_table_equals_cli(shown[0], name, cli_aggregation(name))
    assert any("METHODS.md §13" in e.label for e in at.expander)
    hist_before = [c for c in figures(at) if "layer-output attribution per layer" in c.spec]
    at.selectbox(key="lg_agg_measure").set_value("residual_ln_rollout").run()
    assert at.query_params["agg_measure"] == "residual_ln_rollout"
    hist = [c for c in figures(at) if "layer-output attribution per layer" in c.spec]
    assert len(hist_before) == len(hist) == 1 and "GlobEnc" in hist[0].spec
