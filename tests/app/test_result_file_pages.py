"""The pages load result files the command line wrote: Special tokens (and refuses another command's file),
Dependency heads and Local vs global."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, ROOT
from support.apptest import figures, open_tab, plotly_values
from support.cli import run_cli

pytestmark = pytest.mark.slow  # each test computes or opens a page with a result


def _special_page():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.session_state["special_limit"] = 2  # the page computes once before the file is chosen
    at.switch_page("app_pages/special/page.py").run()
    return at


def open_result_file(at, uploader: str, data: bytes) -> None:
    """Choose a result file in a page's uploader; the page shows it with no exception and no error."""
    at.file_uploader(key=uploader).set_value(("result.json", data, "application/json")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def test_special_page_loads_a_result_file(special_file):
    at = _special_page()
    open_result_file(at, "special_result_file", special_file.read_bytes())
    assert any(
        "computed by `python -m attnlib special` on classroom_single.txt (6 inputs) with all-MiniLM-L6-v2" in i.value
        and "head_map=True" in i.value
        for i in at.info
    )
    assert any("6 inputs from classroom_single.txt" in c.value for c in at.caption)
    assert any("Map of the heads" in c.spec for c in figures(open_tab(at, "special_tab", "Head map")))


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_special_page_shows_a_gradient_result_file(tmp_path, tiny_model_dir):
    """`gradient --out` beside a `special` file of the same model: the Gradient tab draws the file's gradient
    importance (per layer, the mean over heads of the file's per-head values), named as from the file."""
    paths = {command: tmp_path / f"{command}.json" for command in ("special", "gradient")}
    for command, path in paths.items():
        argv = ("--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--model", str(tiny_model_dir), "--out", str(path))
        ran = run_cli(command, *argv, "--json")
        assert ran.code == 0, ran.err
    at = _special_page()
    open_result_file(at, "special_result_file", paths["special"].read_bytes())
    open_result_file(at, "special_gradient_result_file", paths["gradient"].read_bytes())
    open_tab(at, "special_tab", "Gradient importance")
    assert not at.exception, [e.value for e in at.exception]
    drawn = json.loads(next(f.spec for f in figures(at) if "Gradient importance" in f.spec))
    heads = json.loads(paths["gradient"].read_text())["result"]["heads"]
    for trace, key in zip(drawn["data"], ("sep", "all")):
        # float64 means of at most 4 heads: a few ulps apart
        assert plotly_values(trace["y"]) == pytest.approx(np.mean(heads[key], axis=1), rel=1e-12)
    assert any("gradient importance from result.json" in c.value for c in at.caption)
    record = json.loads(paths["gradient"].read_text())
    other = {**record, "model": "another-model", "result": {**record["result"], "model": "another-model"}}
    open_result_file(at, "special_gradient_result_file", json.dumps(other).encode())  # another model's: not drawn
    assert not any("Gradient importance" in f.spec for f in figures(at))
    assert any("result.json is another-model's" in i.value for i in at.info)


def test_dependency_page_loads_a_result_file(tmp_path):
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "deps.json"
    ran = run_cli("deps", "--conllu", str(EWT_DEV), "--limit", "30", "--min-count", "1", "--out", str(path), "--json")
    assert ran.code == 0, ran.err
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.session_state["deps_limit"] = 2  # the page computes once before the file is chosen
    at.switch_page("app_pages/deps/page.py").run()
    open_result_file(at, "deps_result_file", path.read_bytes())
    assert any("computed by `python -m attnlib deps` on en_ewt-ud-dev.conllu (30 inputs)" in i.value for i in at.info)
    assert [m.value for m in at.metric][:1] == ["30"]
    at.number_input(key="deps_min_count").set_value(1).run()
    at.radio(key="deps_split").set_value("halves").run()  # the halves come from the counts in the file
    assert not at.exception and not at.error
    assert any("chosen on half A" in c.value for c in at.caption)


def test_special_page_refuses_another_commands_file(special_file):
    record = json.loads(special_file.read_bytes())
    record["command"] = "positions"
    at = _special_page()
    at.file_uploader(key="special_result_file").set_value(
        ("other.json", json.dumps(record).encode(), "application/json")
    ).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("holds the result of `positions`" in e.value for e in at.error)
    assert any("2 inputs from" in c.value for c in at.caption)  # it computes instead


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_local_global_page_loads_a_result_file(tmp_path, tiny_model_dir):
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "positions.json"  # from a 2-layer, 4-head model: the page draws the file's own shapes
    ran = run_cli(
        "positions",
        "--corpus",
        str(CLASSROOM_SINGLE),
        "--limit",
        "2",
        "--probes",
        "2",
        "--model",
        str(tiny_model_dir),
        "--out",
        str(path),
        "--json",
    )
    assert ran.code == 0, ran.err
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/local_global/page.py").run()
    open_result_file(at, "local_global_result_file", path.read_bytes())
    assert any(
        "computed by `python -m attnlib positions` on classroom_single.txt (2 inputs)" in i.value
        and "probes=2" in i.value
        for i in at.info
    )
    assert any("2 inputs of classroom_single.txt" in c.value and "k = 2 random probes" in c.value for c in at.caption)
    assert any("Centre of mass" in s.value for s in at.subheader)
    open_tab(at, "lg_tab", "Relative positions")
    grid = next(c.spec for c in figures(at) if "layer 1, every head" in c.spec.lower())
    assert '"1-4"' in grid and '"1-5"' not in grid  # four heads, as in the file, not the sidebar model's twelve
