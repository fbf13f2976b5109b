"""The second model's result from an `--out` file (uploaded under "Compare with"), beside the first model's result
computed, shipped or loaded from its own file; and the views that show both models side by side."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from attnlib.results.files import read_result_file
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, EWT_TEST, ROOT
from support.apptest import across_tabs, figures, open_tab, tables
from support.cli import run_cli
from support.pages import SPECIAL_TABS, check_weights_vs_norms, table_with

# --- the checks, without the app ---------------------------------------------------------------------------------


def test_caveats_name_another_corpus_another_size_and_other_options():
    from attnlib.results.files import ResultFile, comparison_caveats

    corpus = {"name": "a.txt", "sha1": "1" * 40, "n_inputs": 5}
    second = ResultFile("positions", "m", dict(corpus), {"mode": "exact", "probes": 12, "seed": 1}, "0", "", {})
    assert comparison_caveats(corpus, {"mode": "exact", "probes": 12}, second, ("mode", "probes")) == []
    assert comparison_caveats(corpus, {"mode": "estimate", "seed": 2}, second, ("mode", "probes")) == [
        "mode is estimate for the first, exact for the second"  # seed is not compared, probes not given
    ]
    second.corpus["n_inputs"] = 4
    assert comparison_caveats(corpus, {}, second, ()) == [
        "the first result covers 5 inputs of a.txt, the second 4 of a.txt"
    ]
    second.corpus |= {"sha1": "2" * 40, "name": "b.txt"}
    assert comparison_caveats(corpus, {}, second, ()) == [
        "the first result is of a.txt, the second of another corpus, b.txt"
    ]


def test_probe_files_of_another_variant_or_malformed_are_result_file_errors():
    from attnlib.analyses.probe import ProbeResult
    from attnlib.results.files import ResultFileError

    with pytest.raises(ResultFileError, match="incomplete or malformed"):
        ProbeResult.from_json({"uas": 0.5})
    with pytest.raises(ResultFileError, match="incomplete or malformed"):
        ProbeResult.from_json([1, 2])  # type: ignore[arg-type]


# --- Special tokens -------------------------------------------------------------------------------------------------


# --- Dependency heads -------------------------------------------------------------------------------------------------


# --- the probe ----------------------------------------------------------------------------------------------------


# --- Local vs global ------------------------------------------------------------------------------------------------


# --- Live: the neuron view of both models ----------------------------------------------------------------------------


# --- a loaded file stays for the session -----------------------------------------------------------------------------


# ---------- slow tests


TINY_BERT = pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)


def cli_file(tmp_path, name: str, *argv: str) -> tuple[bytes, dict]:
    """Run a command with --out and --json: the file's bytes and the printed JSON."""
    out = tmp_path / f"{name}.json"
    ran = run_cli(*argv, "--out", str(out), "--json")
    assert ran.code == 0, ran.err
    return out.read_bytes(), json.loads(out.read_text())["result"]


def app(page: str, **params: str):
    """The app on a page, opened with these URL parameters."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    return at.switch_page(f"app_pages/{page}/page.py").run()


def upload(at, key: str, name: str, data: bytes):
    """Give a result file to one of the page's uploaders and rerun."""
    at.file_uploader(key=key).set_value((name, data, "application/json")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def difference_lines(at) -> list[str]:
    return [m.value for m in at.markdown if "largest difference" in m.value]


@pytest.mark.slow
@TINY_BERT
def test_special_second_model_from_its_result_file_beside_the_shipped_first(tmp_path, tiny_model_dir, one_thread):
    data, second = cli_file(
        tmp_path, "tiny", "special", "--corpus", str(CLASSROOM_SINGLE), "--norms", "--model", str(tiny_model_dir)
    )
    first_model, second_model = "all-MiniLM-L6-v2", str(tiny_model_dir)
    at = app("special", grad="0")  # the default model's shipped result on the whole classroom set
    assert [f.label for f in at.get("file_uploader") if "second model" in f.label]  # under "Compare with"
    at = upload(at, "special_compare_file", "tiny.json", data)
    assert not at.error, [e.value for e in at.error]
    assert not at.warning, [w.value for w in at.warning]  # same corpus, same inputs, same punctuation
    assert any(f"Second model: **{second_model}**, from **tiny.json**" in i.value for i in at.info)
    assert any("precomputed, shipped with the app" in c.value for c in at.caption)
    lines = across_tabs(at, "special_tab", SPECIAL_TABS, difference_lines)
    assert len(lines) >= 4 and all(f"{first_model} vs {second_model}" in line for line in lines)
    per_layer = table_with(at, "sep_to_sep")  # the last tab, Tables, is open
    assert per_layer.groupby("model").size().to_dict() == {first_model: 6, second_model: 2}
    rows = per_layer[per_layer["model"] == second_model]
    for key in ("cls", "sep", "entropy"):
        assert rows[key].tolist() == pytest.approx([row[key] for row in second["layers"]], abs=6e-5)
    norms_tab = open_tab(at, "special_tab", "Weights vs norms")
    check_weights_vs_norms(table_with(norms_tab, "norm_cls"), second, second_model)  # the file's numbers
    infos = [i.value for i in open_tab(at, "special_tab", "Head map").info]
    assert any(f"{second_model}: the result file has no head map" in i for i in infos)  # no --head-map


@pytest.mark.slow
@TINY_BERT
def test_special_two_result_files_without_a_corpus(tmp_path, tiny_model_dir, one_thread):
    argv = ["special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "5", "--head-map"]
    first_data, first = cli_file(tmp_path, "minilm", *argv)
    second_data, second = cli_file(tmp_path, "tiny", *argv, "--limit", "4", "--model", str(tiny_model_dir))
    at = app("special", grad="0", norms="0")
    at = upload(at, "special_result_file", "minilm.json", first_data)
    at = upload(at, "special_compare_file", "tiny.json", second_data)
    assert not at.error, [e.value for e in at.error]
    assert not [s for s in at.selectbox if s.key == "special_corpus"]  # no corpus is chosen or read
    assert any("Showing **minilm.json**" in i.value for i in at.info)
    assert any("from **tiny.json**" in i.value for i in at.info)
    warning = " ".join(w.value for w in at.warning)  # the files cover 5 and 4 inputs
    assert "may not compare like for like" in warning and "covers 5 inputs" in warning and "4 of" in warning
    assert all(f"{first['model']} vs {tiny_model_dir}" in line for line in difference_lines(at))
    per_layer = table_with(open_tab(at, "special_tab", "Tables"), "sep_to_sep")
    for model, out in ((first["model"], first), (str(tiny_model_dir), second)):
        rows = per_layer[per_layer["model"] == model]
        assert rows["cls"].tolist() == pytest.approx([row["cls"] for row in out["layers"]], abs=6e-5)
    maps = [c for c in figures(open_tab(at, "special_tab", "Head map")) if "head_map" in c.key]
    assert len(maps) == 2  # one head map per file, side by side


@pytest.mark.slow
@TINY_BERT
def test_special_bad_compare_files_are_errors(tmp_path, tiny_model_dir):
    data, _ = cli_file(tmp_path, "tiny", "special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "3")
    record = json.loads(data)
    at = app("special", grad="0", tab="tables")
    cases = [
        ("positions.json", json.dumps({**record, "command": "positions"}).encode(), "holds the result of `positions`"),
        ("broken.json", b'{"format": "attnlib-result", "format_ver', "not a JSON file"),
        ("cut.json", json.dumps({**record, "result": {"n_inputs": 3}}).encode(), "cannot be shown"),
    ]
    for name, payload, message in cases:
        at = upload(at, "special_compare_file", name, payload)
        assert any(name in e.value and message in e.value for e in at.error), [e.value for e in at.error]
        per_layer = table_with(at, "sep_to_sep")
        assert set(per_layer["model"]) == {"all-MiniLM-L6-v2"}  # the first model alone, as without a file
        assert not difference_lines(at)


@pytest.mark.slow
@TINY_BERT
def test_deps_table_of_a_computed_first_and_a_second_models_file(tmp_path, tiny_model_dir, minilm, one_thread):
    from attnlib.analyses.deps import dependency_counts_from_json
    from attnlib.analyses.registry import analyse

    data, _ = cli_file(
        tmp_path, "tiny", "deps", "--conllu", str(EWT_DEV), "--limit", "10", "--model", str(tiny_model_dir)
    )
    second_model = str(tiny_model_dir)
    at = app("deps", limit="10", min="1")
    at = upload(at, "deps_compare_file", "tiny-deps.json", data)
    assert not at.error, [e.value for e in at.error]
    assert not at.warning, [w.value for w in at.warning]
    expected = {
        "all-MiniLM-L6-v2": analyse("deps", minilm, conllu=EWT_DEV, limit=10, min_count=1).result.table,
        second_model: dependency_counts_from_json(read_result_file(data).state or {}).table(min_count=1),
    }
    frame = tables(at)[0]
    assert frame["relation"].tolist() == [r.relation for r in expected["all-MiniLM-L6-v2"].rows]
    for model, table in expected.items():
        by_relation = {r.relation: r for r in table.rows}
        rows = [by_relation[r] for r in frame["relation"]]
        assert frame[f"{model}: best head"].tolist() == [f"{r.layer + 1}-{r.head + 1}" for r in rows]
        np.testing.assert_allclose(frame[f"{model}: accuracy %"], [100 * r.accuracy for r in rows])
    assert any(f"**all-MiniLM-L6-v2 vs {second_model}**" in line for line in difference_lines(at))
    heatmaps = [c for c in figures(at) if c.key.startswith("deps_heatmap")]
    assert len(heatmaps) == 2  # every head on one relation, of each model
    arcs = [c for c in figures(at) if c.key.startswith("deps_arcs")]
    assert len(arcs) == 1 and any("second model's result comes from a file" in c.value for c in at.caption)


@pytest.mark.slow
@TINY_BERT
def test_deps_example_sentence_in_both_models(tiny_model_dir, tiny_model, one_thread):
    at = app("deps", limit="10", min="1", cmp=str(tiny_model_dir), sentence="2")
    assert not at.exception and not at.error, [e.value for e in at.error]
    arcs = [json.loads(c.spec) for c in figures(at) if c.key.startswith("deps_arcs")]
    assert len(arcs) == 2
    titles = [spec["layout"]["title"]["text"] for spec in arcs]
    assert all("arcs found" in t for t in titles)
    words = [next(t["text"] for t in spec["data"] if t.get("mode") == "text") for spec in arcs]
    assert words[0] == words[1] and len(words[0]) > 2  # the same sentence in both models
    heads = [m.value for m in at.markdown if m.value.startswith("**") and " · head " in m.value]
    assert heads[0].startswith("**all-MiniLM-L6-v2**") and heads[1].startswith(f"**{tiny_model_dir}**")
    layer, head = re.search(r"head (\d+)-(\d+)", heads[1]).groups()
    assert int(layer) <= tiny_model.facts.n_layers and int(head) <= tiny_model.facts.n_heads
    assert f"Head {layer}-{head}" in titles[1]


@pytest.mark.slow
@TINY_BERT
def test_probe_of_two_result_files(tmp_path, tiny_model_dir, one_thread):
    argv = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "4"]
    first_data, first = cli_file(tmp_path, "minilm-probe", *argv)
    second_data, second = cli_file(tmp_path, "tiny-probe", *argv, "--model", str(tiny_model_dir))
    at = app("deps", limit="10", min="1", tab="probe")
    at = upload(at, "probe_result_file", "minilm-probe.json", first_data)
    at = upload(at, "probe_compare_file", "tiny-probe.json", second_data)
    assert not at.error, [e.value for e in at.error]
    assert {m.label: m.value for m in at.metric}["UAS, attention-only probe"] == f"{100 * first['uas']:.1f}%"
    uas = next(d for d in tables(at) if "method" in d.columns).set_index("method")
    names = ("all-MiniLM-L6-v2", str(tiny_model_dir))
    assert list(uas.columns) == [f"{m}: {c}" for m in names for c in ("UAS %", "head or offset")]
    for model, out in zip(names, (first, second)):
        assert uas.loc["attention-only probe", f"{model}: UAS %"] == pytest.approx(100 * out["uas"])
        assert uas.loc["best fixed offset", f"{model}: UAS %"] == pytest.approx(100 * out["baseline_accuracy"])
    assert sum("largest difference: UAS in" in line for line in difference_lines(at)) == 1
    specs = [c.spec for c in figures(at)]
    assert sum("Learned weight of every head" in s for s in specs) == 2
    sentences = [
        json.loads(c.spec)["layout"]["title"]["text"] for c in figures(at) if c.key.startswith("probe_sentence_chart")
    ]
    sent_id = first["sentences"][0]["sent_id"]
    assert len(sentences) == 2 and all(t.startswith(f"{sent_id}:") for t in sentences)

    record = json.loads(second_data)
    record["result"]["variant"] = "words"  # the attention + words probe is not what the comparison shows
    at = upload(at, "probe_compare_file", "words.json", json.dumps(record).encode())
    assert any("words.json cannot be shown" in e.value and "the words probe" in e.value for e in at.error)
    assert not any("method" in d.columns for d in tables(at))  # the first model alone: no comparison table
    assert {m.label: m.value for m in at.metric}["UAS, attention-only probe"] == f"{100 * first['uas']:.1f}%"


@pytest.mark.slow
@TINY_BERT
def test_positions_and_aggregation_of_two_result_files(tmp_path, tiny_model_dir):
    from support.models import save_tiny_bert
    from support.pages import assert_table_equals_cli

    first_model, second_model = str(tiny_model_dir), str(save_tiny_bert(tmp_path / "three-layers", layers=3, seed=1))
    files = {}
    for command in ("positions", "aggregation"):
        for model in (first_model, second_model):
            argv = [command, "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--probes", "2", "--model", model]
            files[command, model] = cli_file(tmp_path, f"{command}-{len(files)}", *argv)
    at = app("local_global")
    for command, key in (("positions", "local_global"), ("aggregation", "aggregation")):
        at = upload(at, f"{key}_result_file", f"{command}-first.json", files[command, first_model][0])
        at = upload(at, f"{key}_compare_file", f"{command}-second.json", files[command, second_model][0])
    assert not at.error, [e.value for e in at.error]
    assert not at.warning, [w.value for w in at.warning]
    summary = next(d for d in tables(at) if "attention centre of mass" in d.columns)
    assert list(summary["model"]) == [first_model] * 2 + [second_model] * 3
    for model in (first_model, second_model):
        rows = summary[summary["model"] == model]
        expected = files["positions", model][1]["attention_center_of_mass"]
        np.testing.assert_allclose(rows["attention centre of mass"], expected, atol=6e-5)
    open_tab(at, "lg_tab", "Global aggregation")
    aggregation = next(d for d in tables(at) if "measure" in d.columns)
    for model in (first_model, second_model):
        assert_table_equals_cli(aggregation, model, files["aggregation", model][1])
    lines = difference_lines(at)  # positions above the tabs, then aggregation in its tab
    assert len(lines) == 2 and all(f"{first_model} vs {second_model}" in line for line in lines)
    assert (
        sum(
            "from **positions-second.json**" in i.value or "from **aggregation-second.json**" in i.value
            for i in at.info
        )
        == 2
    )


@pytest.mark.slow
@TINY_BERT
def test_neuron_view_of_both_models(tiny_model_dir, tiny_model, minilm):
    from support.pages import open_live, view_datas

    at = open_live(view="neuron", layer="4", head="9", token="3", cmp=str(tiny_model_dir))
    first, second = view_datas(at)
    assert (first["layer"], first["head"], first["qi"]) == (4, 9, 2)
    assert (second["layer"], second["head"], second["qi"]) == (2, 4, 2)  # in the tiny model's range
    assert minilm.facts.name in first["title"] and tiny_model.facts.name in second["title"]
    assert first["d"] == minilm.facts.head_dim and second["d"] == tiny_model.facts.head_dim
    assert second["diff"] < 1e-5
    charts = figures(at)
    assert len(charts) == 2 and all("Value norms" in c.spec for c in charts)
    assert [b.label for b in at.get("download_button")][-2:] == [
        "Download figure (HTML)",
        f"Figure of {tiny_model.facts.name} (HTML)",
    ]
    assert not any("shows the first model" in c.value for c in at.caption)


@pytest.mark.slow
@TINY_BERT
def test_a_loaded_result_file_survives_another_tab_and_page_until_removed(tmp_path, tiny_model_dir):
    argv = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "4", "--model", str(tiny_model_dir)]
    data, out = cli_file(tmp_path, "tiny-probe", *argv)
    at = app("deps", limit="10", min="1", tab="probe")
    at = upload(at, "probe_result_file", "tiny-probe.json", data)
    shown = f"{100 * out['uas']:.1f}%"
    assert {m.label: m.value for m in at.metric}["UAS, attention-only probe"] == shown
    open_tab(at, "deps_tab", "Best head per relation")  # the probe's uploader is not drawn: Streamlit drops its file
    at.switch_page("app_pages/live/page.py").run()
    at.switch_page("app_pages/deps/page.py").run()
    open_tab(at, "deps_tab", "All heads together")
    assert not at.exception, [e.value for e in at.exception]
    assert any("Using **tiny-probe.json**, loaded earlier" in c.value for c in at.caption)
    assert {m.label: m.value for m in at.metric}["UAS, attention-only probe"] == shown
    at.run()  # a further run keeps it (the uploader is empty, which is not a removal)
    assert {m.label: m.value for m in at.metric}["UAS, attention-only probe"] == shown
    at.button(key="probe_result_file_remove").click().run()
    assert not any("tiny-probe.json" in c.value for c in at.caption)
    assert not any(m.label == "UAS, attention-only probe" and m.value == shown for m in at.metric)
