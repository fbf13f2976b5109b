"""Scale-out: shards of whole batches equal the local engine, Ray equals local, result files round-trip, pages load them."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from attnlib.analyses.deps import dependency_counts_from_json, dependency_counts_to_json
from attnlib.analyses.positions import PositionsResult
from attnlib.core import runner
from attnlib.core.engines import engine_fill, fill_shard, merge_all, plan_batches, run_accumulators, shard_batches
from attnlib.results.files import ResultFileError, json_ready, make_result_file, read_result_file, write_result_file
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, ROOT
from attnlib.stats.head_distances import special_from_json
from support.apptest import figures, open_tab
from support.cli import cli_json, run_cli
from support.scale import BATCH, N_SENTENCES, all_accumulators, assert_same_statistics, requires_ray, torch_threads

# --- shards of whole batches, without Ray ---------------------------------------------------------------------------


def test_plan_is_the_batches_run_batches_forms(minilm, sentences, monkeypatch):
    seen = []

    def recording(lm, encoded, *args, **kwargs):  # records each batch instead of running it
        seen.append([tuple(e.input_ids) for e in encoded])
        return [None] * len(encoded)

    monkeypatch.setattr(runner, "run_encoded", recording)
    list(runner.run_batches(minilm, [(s.text_a, None) for s in sentences], batch_size=BATCH))
    monkeypatch.undo()
    ids = [tuple(runner.encode(minilm, s.text_a).input_ids) for s in sentences]
    plan = plan_batches(minilm, sentences, BATCH)
    assert [[ids[i] for i in batch] for batch in plan] == seen
    assert sorted(i for batch in plan for i in batch) == list(range(N_SENTENCES))


def test_shards_deal_batches_round_robin():
    batches = [[i] for i in range(5)]
    assert shard_batches(batches, 2) == [[[0], [2], [4]], [[1], [3]]]
    assert shard_batches(batches, 9) == [[[i]] for i in range(5)]  # never an empty shard


def test_shards_merged_equal_the_local_engine(minilm, sentences, local_result):
    shards = shard_batches(plan_batches(minilm, sentences, BATCH), 3)
    with torch_threads(1):
        parts = [
            fill_shard(minilm, all_accumulators, engine_fill, [[sentences[i] for i in b] for b in shard], BATCH)
            for shard in shards
        ]
    assert_same_statistics(local_result, merge_all(parts))


# --- Ray ------------------------------------------------------------------------------------------------------------


@requires_ray
def test_ray_refuses_more_workers_than_cpus(local_ray, capsys):
    ran = run_cli(
        "special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--engine", "ray", "--workers", "3", "--json"
    )
    assert ran.code == 2, ran.err
    assert "needs 3 CPUs; the Ray cluster has 2" in ran.err


# --- devices --------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_cuda_without_a_gpu_is_a_clear_error(capsys, engine):
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed")
    argv = [
        "special",
        "--corpus",
        str(CLASSROOM_SINGLE),
        "--limit",
        "2",
        "--device",
        "cuda",
        "--engine",
        engine,
        "--json",
    ]
    if engine == "ray":
        argv += ["--workers", "1"]
    ran = run_cli(*argv)
    assert ran.code == 2, ran.err
    err = ran.err
    assert err.startswith("error: --device cuda") and ("CUDA is not available" in err or "needs 1 GPUs" in err)


# --- result files ---------------------------------------------------------------------------------------------------


def test_out_file_round_trip(special_file):
    record = read_result_file(special_file.read_bytes(), "special")
    assert record.command == "special" and record.model == "all-MiniLM-L6-v2"
    assert record.corpus["name"] == "classroom_single.txt" and record.corpus["n_inputs"] == 6
    assert record.options == {"all_punct": False, "head_map": True, "norms": False}  # --limit is in the corpus
    assert record.run == {"engine": "local", "device": "cpu", "workers": 1, "seconds": record.run["seconds"]}
    from attnlib import __version__

    assert record.library_version == __version__
    assert (
        "computed by `python -m attnlib special` on classroom_single.txt (6 inputs) with all-MiniLM-L6-v2"
        in record.provenance()
    )
    special, hm = special_from_json(record.result)
    assert special.n_inputs == 6 and special.heads["cls"].shape == (6, 12)
    assert json_ready(special.to_json()) == {k: v for k, v in record.result.items() if k not in ("model", "head_map")}
    assert (
        hm.coords.shape == (72, 2)
        and hm.divergence.shape == (72, 72)
        and set(hm.labels) <= {"next", "prev", "broad", "[CLS]", "[SEP]", "punctuation", "other"}
    )


def test_result_file_is_checked(special_file, tmp_path):
    data = special_file.read_bytes()
    with pytest.raises(ResultFileError, match="holds the result of `special`; this page shows `deps`"):
        read_result_file(data, "deps")
    with pytest.raises(ResultFileError, match="not a JSON file"):
        read_result_file(b"\x80\x04pickle")
    with pytest.raises(ResultFileError, match="not a result file"):
        read_result_file(b'{"heads": {}}')
    with pytest.raises(ResultFileError, match="at most"):
        read_result_file(data, "special", max_bytes=100)
    broken = json.loads(data)
    broken["result"]["heads"]["cls"] = [[0.1, 0.2]]
    with pytest.raises(ResultFileError, match="different shapes"):
        special_from_json(read_result_file(json.dumps(broken), "special").result)
    del broken["model"]
    with pytest.raises(ResultFileError, match="'model'"):
        read_result_file(json.dumps(broken))


def test_nan_is_written_as_null_and_read_back(tmp_path, special_file):
    record = read_result_file(special_file.read_bytes(), "special")
    record.result["heads"]["sep_to_sep"][0][0] = float("nan")
    path = tmp_path / "nan.json"
    write_result_file(path, record)
    assert "NaN" not in path.read_text() and json.loads(path.read_text())["result"]["heads"]["sep_to_sep"][0][0] is None
    special, _ = special_from_json(read_result_file(path.read_bytes(), "special").result)
    assert np.isnan(special.heads["sep_to_sep"][0, 0]) and not np.isnan(special.heads["sep_to_sep"][0, 1])


def test_dependency_counts_round_trip(local_result, tmp_path):
    counts = local_result[2]
    record = make_result_file(
        "deps", "all-MiniLM-L6-v2", str(EWT_DEV), N_SENTENCES, {}, {"rows": []}, state=dependency_counts_to_json(counts)
    )
    path = tmp_path / "deps.json"
    write_result_file(path, record)
    back = dependency_counts_from_json(read_result_file(path.read_bytes(), "deps").state)
    assert back.relations == counts.relations
    for name in ("totals", "head_hits", "offset_hits", "n_sentences", "n_words"):
        np.testing.assert_array_equal(getattr(back, name), getattr(counts, name))
    assert back.table(min_count=1, held_out=True) == counts.table(min_count=1, held_out=True)
    state = json.loads(path.read_text())["state"]
    state["head_hits"] = state["head_hits"][:1]
    with pytest.raises(ResultFileError, match="head_hits"):
        dependency_counts_from_json(state)
    state = json.loads(path.read_text())["state"]
    state["rule"] = "median"
    with pytest.raises(ResultFileError, match="row rule 'median'"):
        dependency_counts_from_json(state)


def test_malformed_head_map_and_positions_are_result_file_errors(special_file):
    result = read_result_file(special_file.read_bytes(), "special").result
    result["head_map"]["x"] = result["head_map"]["x"][:-1]  # 71 points for 72 heads
    with pytest.raises(ResultFileError, match="head map"):
        special_from_json(result)
    del result["head_map"]["js_divergence"]
    with pytest.raises(ResultFileError, match="head map is incomplete"):
        special_from_json(result)
    result["head_map"] = None
    special, hm = special_from_json(result)
    assert hm is None and special.heads["cls"].shape == (6, 12)
    with pytest.raises(ResultFileError, match="`positions` result is incomplete"):
        PositionsResult.from_json({"n_inputs": 3})


# --- the pages load result files ------------------------------------------------------------------------------------


# ---------- slow tests


@pytest.mark.slow
@requires_ray
def test_ray_equals_local_for_special_and_deps(local_ray, sentences, local_result):
    run = run_accumulators("all-MiniLM-L6-v2", sentences, all_accumulators, engine="ray", workers=2, batch_size=BATCH)
    assert run.engine == "ray" and run.ray.n_shards == 4 and run.ray.threads == [1, 1, 1, 1]
    assert_same_statistics(local_result, run.accumulators)


@pytest.mark.slow
@requires_ray
def test_deps_command_on_ray_equals_local_and_writes_the_result_file(local_ray, capsys, tmp_path):
    # the special command goes through the same run_corpus; one Ray job here keeps the suite short on 2 cores
    argv = ["deps", "--conllu", str(EWT_DEV), "--min-count", "1", "--limit", str(N_SENTENCES), "--json"]
    with torch_threads(1):
        ran = run_cli(*argv)
        assert ran.code == 0, ran.err
    local = ran.json
    out = tmp_path / "deps.json"
    on_ray = cli_json(*argv, "--engine", "ray", "--workers", "2", "--out", str(out))
    assert on_ray == local and len(local["rows"]) > 10  # counts are integers: the table is identical
    record = read_result_file(out.read_bytes(), "deps")
    assert record.run["engine"] == "ray" and record.run["workers"] == 2 and record.corpus["n_inputs"] == N_SENTENCES
    assert record.result == json_ready(on_ray)


def _special_page():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.session_state["special_limit"] = 2  # the page computes once before the file is chosen
    at.switch_page("app_pages/special_tokens/page.py").run()
    return at


def open_result_file(at, uploader: str, data: bytes) -> None:
    """Choose a result file in a page's uploader; the page shows it with no exception and no error."""
    at.file_uploader(key=uploader).set_value(("result.json", data, "application/json")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


@pytest.mark.slow
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


@pytest.mark.slow
def test_dependency_page_loads_a_result_file(tmp_path):
    from streamlit.testing.v1 import AppTest

    path = tmp_path / "deps.json"
    ran = run_cli("deps", "--conllu", str(EWT_DEV), "--limit", "30", "--min-count", "1", "--out", str(path), "--json")
    assert ran.code == 0, ran.err
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.session_state["deps_limit"] = 2  # the page computes once before the file is chosen
    at.switch_page("app_pages/dependency_heads/page.py").run()
    open_result_file(at, "deps_result_file", path.read_bytes())
    assert any("computed by `python -m attnlib deps` on en_ewt-ud-dev.conllu (30 inputs)" in i.value for i in at.info)
    assert [m.value for m in at.metric][:1] == ["30"]
    at.number_input(key="deps_min_count").set_value(1).run()
    at.radio(key="deps_split").set_value("halves").run()  # the halves come from the counts in the file
    assert not at.exception and not at.error
    assert any("chosen on half A" in c.value for c in at.caption)


@pytest.mark.slow
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


@pytest.mark.slow
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
