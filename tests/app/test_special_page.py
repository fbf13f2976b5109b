"""The Special tokens page (METHODS §1-3, §5): computed on a small corpus, its options, the weights-vs-norms tab
against the CLI, shipped results opened without running the model, two models compared."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.results.shipped import CLASSROOM_SINGLE, ROOT
from support.apptest import figures
from support.cli import cli_json
from support.pages import SPECIAL_TABS, check_weights_vs_norms, table_with


@pytest.mark.slow
def test_page_runs_on_a_small_corpus():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/special/page.py").run()
    at.number_input(key="special_limit").set_value(20).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert len(figures(at)) == 2  # only the open tab (Shares) is drawn
    assert any("20 inputs" in c.value for c in at.caption)
    charts = across_tabs(at, figures)
    assert len(charts) >= 7
    open_tab(at, "Shares").run()  # a cache hit replays the cached run, progress bar included
    assert not at.exception and len(figures(at)) == 2


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_shows_gradient_importance_for_a_model_with_an_mlm_head(tiny_model_dir):
    from streamlit.testing.v1 import AppTest

    from ui.sources.model_sidebar import OTHER

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("app_pages/special/page.py").run()
    at.selectbox(key="model_choice").set_value(OTHER).run()
    at.text_input(key="model_custom").set_value(str(tiny_model_dir)).run()
    at.number_input(key="special_limit").set_value(6).run()
    open_tab(at, "Gradient importance")
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    titles = [c.spec for c in figures(at)]
    assert any("Gradient importance" in spec for spec in titles)


@pytest.mark.slow
def test_page_options_pairs_all_punctuation_no_map():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.query_params["punct"] = "all"
    at.query_params["map"] = "0"
    at.query_params["tab"] = "map"
    at.run()
    at.switch_page("app_pages/special/page.py").run()
    at.selectbox(key="special_corpus").set_value("Classroom set: sentence pairs").run()
    at.number_input(key="special_limit").set_value(10).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("10 inputs" in c.value and "all punctuation" in c.value for c in at.caption)
    assert any("Switch on *Head map*" in i.value for i in at.info)


def page_at(**params):
    """The app on the Special tokens page, with these URL parameters, after one run."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    at.switch_page("app_pages/special/page.py").run()
    return at


def open_tab(at, name: str):
    """Open one of the page's tabs (only the open tab is drawn) and rerun."""
    from support.apptest import open_tab

    return open_tab(at, "special_tab", name)


def across_tabs(at, get) -> list:
    """get(at) with every tab of the page opened in turn, concatenated."""
    from support.apptest import across_tabs

    return across_tabs(at, "special_tab", SPECIAL_TABS, get)


def expected_gap_text(cli_out: dict) -> str:
    """The caption's numbers worked out from the CLI JSON with numpy, independently of the page."""
    weights = np.array([[row[k] for k in ("cls", "sep")] for row in cli_out["layers"]])
    norms = np.array([[row[k] for k in ("cls", "sep")] for row in cli_out["norm_layers"]])
    layer, which = np.unravel_index(np.argmax(np.abs(weights - norms)), weights.shape)
    name = ("[CLS]", "[SEP]")[which]
    return f"{name} in layer {layer + 1}: {weights[layer, which]:.2f} of the attention weights but {norms[layer, which]:.2f}"


@pytest.mark.slow
def test_weights_vs_norms_tab_equals_the_cli(one_thread):
    cli_out = cli_json("special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "8", "--norms", "--json")
    at = page_at(norms="1", limit="8", grad="0", map="0", tab="norms")
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    check_weights_vs_norms(table_with(at, "norm_cls"), cli_out, cli_out["model"])
    shows = [m.value for m in at.markdown if "What it shows" in m.value]
    assert len(shows) == 1 and expected_gap_text(cli_out) in shows[0]
    titles = [c.spec for c in figures(at)]
    assert any("Share of weights and of norms per layer" in t for t in titles)
    assert any("Value norm" in t for t in titles)
    assert any("computed here" in c.value for c in at.caption)


@pytest.mark.slow
def test_page_shows_a_shipped_result_without_running_the_model(tmp_path, monkeypatch, one_thread):
    from attnlib.results.files import read_result_file

    out = tmp_path / "special.json"
    argv = ["--corpus", str(CLASSROOM_SINGLE), "--limit", "8", "--norms", "--head-map", "--out", str(out)]
    cli_out = cli_json("special", *argv, "--json")
    record = read_result_file(out.read_bytes())
    asked = []

    def shipped(command, model, sha1, n_inputs, options, train=None):
        asked.append((command, model, n_inputs, options))
        matches = SPECIAL.answers(record.options, options)
        return record if (command, model, n_inputs, matches) == ("special", record.model, 8, True) else None

    def no_model_run(*args, **kwargs):
        raise AssertionError("the model was run although a shipped result matches")

    monkeypatch.setattr("ui.sources.result_source.shipped_result", shipped)
    monkeypatch.setattr("attnlib.analyses.base.run_analysis", no_model_run)
    monkeypatch.setattr("attnlib.stats.gradient.gradient_importance", no_model_run)
    at = page_at(norms="1", limit="8", punct="clark")
    assert not at.exception, [e.value for e in at.exception]
    assert ("special", record.model, 8, SpecialOptions(all_punct=False, head_map=True, norms=True)) in asked
    assert any("precomputed, shipped with the app" in c.value for c in at.caption)
    assert any(b.label == "Recompute" for b in at.button)
    check_weights_vs_norms(table_with(open_tab(at, "Weights vs norms"), "norm_cls"), cli_out, record.model)
    per_layer = table_with(open_tab(at, "Tables"), "sep_to_sep")
    assert per_layer["cls"].tolist() == pytest.approx([row["cls"] for row in cli_out["layers"]], abs=6e-5)


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_compares_two_models(tiny_model_dir, one_thread):
    first = cli_json("special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "6", "--norms", "--json")
    second = cli_json(
        "special",
        "--corpus",
        str(CLASSROOM_SINGLE),
        "--limit",
        "6",
        "--norms",
        "--model",
        str(tiny_model_dir),
        "--json",
    )
    at = page_at(norms="1", limit="6", grad="0", map="0", cmp=str(tiny_model_dir), tab="norms")
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    table = table_with(at, "norm_cls")
    assert set(table["model"]) == {first["model"], second["model"]}
    check_weights_vs_norms(table, first, first["model"])
    check_weights_vs_norms(table, second, second["model"])
    assert len([m for m in at.markdown if "What it shows" in m.value]) == 2
    lines = across_tabs(at, lambda at: [m.value for m in at.markdown if "largest difference:" in m.value])
    assert len(lines) >= 4  # shares, [SEP], offsets, entropy, norms
    assert all(f"{first['model']} vs {second['model']}" in line for line in lines)
    per_layer = table_with(at, "sep_to_sep")  # the last tab, Tables, is open
    assert per_layer.groupby("model").size().to_dict() == {first["model"]: 6, second["model"]: 2}
    titles = [c.spec for c in figures(open_tab(at, "Shares"))]
    assert any("number of layers" in t for t in titles)  # 6 and 2 layers share one axis scaled by depth


@pytest.mark.slow
def test_page_opens_the_shipped_result_of_the_default_model(monkeypatch, one_thread):
    from attnlib.results.files import read_result_file
    from attnlib.results.precomputed import shipped_results
    from attnlib.results.shipped import PRECOMPUTED

    entry = next(e for e in shipped_results() if e.name == "special_classroom-single")
    shipped = read_result_file((PRECOMPUTED / entry.file).read_bytes()).result

    def no_model_run(*args, **kwargs):
        raise AssertionError("the model was run although a shipped result matches")

    monkeypatch.setattr("attnlib.analyses.base.run_analysis", no_model_run)
    at = page_at()  # the defaults: classroom single sentences, Clark's punctuation, head map and norms on
    assert not at.exception, [e.value for e in at.exception]
    assert any("precomputed, shipped with the app" in c.value for c in at.caption)
    charts = across_tabs(at, figures)
    per_layer = table_with(at, "sep_to_sep")  # the last tab, Tables, is open
    for key in ("cls", "sep", "entropy"):
        assert per_layer[key].tolist() == pytest.approx([row[key] for row in shipped["layers"]], abs=6e-5)
    assert len(charts) >= 8  # the head map too
    assert any("weights_vs_norms" in c.key for c in charts)  # the shipped file has the norms


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_gradients_beside_a_shipped_result_wait_for_a_click(tmp_path, monkeypatch, tiny_model_dir, one_thread):
    from attnlib.results.files import read_result_file

    out = tmp_path / "special.json"
    argv = ["--corpus", str(CLASSROOM_SINGLE), "--limit", "4", "--head-map", "--model", str(tiny_model_dir)]
    cli_json("special", *argv, "--out", str(out), "--json")
    record = read_result_file(out.read_bytes())
    monkeypatch.setattr(
        "ui.sources.result_source.shipped_result",
        lambda *a: record if (a[0], a[1], a[3]) == ("special", record.model, 4) else None,
    )
    from ui.sources import result_source

    run_analysis = result_source.run_analysis

    def no_special_run(analysis, *args, **kwargs):
        assert analysis.name != "special", "the statistics were computed although a shipped result matches"
        return run_analysis(analysis, *args, **kwargs)

    monkeypatch.setattr(result_source, "run_analysis", no_special_run)
    from ui.sources.model_sidebar import OTHER

    at = page_at(limit="4", tab="gradient")
    at.selectbox(key="model_choice").set_value(OTHER).run()
    at.text_input(key="model_custom").set_value(str(tiny_model_dir)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("Gradient importance" in c.spec for c in figures(at)), [c.value for c in at.caption]
    at.button(key="special_grad_now").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("precomputed, shipped with the app" in c.value for c in at.caption)
    assert any("Gradient importance" in c.spec for c in figures(at))
