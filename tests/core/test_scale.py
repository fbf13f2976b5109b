"""Scale-out: shards of whole batches equal the local engine, Ray equals local (results/test_result_files.py: the
result files; app/test_result_file_pages.py: the pages that load them)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from attnlib.core import runner
from attnlib.core.engines import engine_fill, fill_shard, merge_all, plan_batches, run_accumulators, shard_batches
from attnlib.results.files import json_ready, read_result_file
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV
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
def test_ray_refuses_more_workers_than_cpus(local_ray):
    ran = run_cli(
        "special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--engine", "ray", "--workers", "3", "--json"
    )
    assert ran.code == 2, ran.err
    assert "needs 3 CPUs; the Ray cluster has 2" in ran.err


# --- devices --------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("engine", ["local", "ray"])
def test_cuda_without_a_gpu_is_a_clear_error(engine):
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


# ---------- slow tests


@pytest.mark.slow
@requires_ray
def test_ray_equals_local_for_special_and_deps(local_ray, sentences, local_result):
    run = run_accumulators("all-MiniLM-L6-v2", sentences, all_accumulators, engine="ray", workers=2, batch_size=BATCH)
    assert run.engine == "ray" and run.ray.n_shards == 4 and run.ray.threads == [1, 1, 1, 1]
    assert_same_statistics(local_result, run.accumulators)


@pytest.mark.slow
@requires_ray
def test_deps_command_on_ray_equals_local_and_writes_the_result_file(local_ray, tmp_path):
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


@pytest.mark.slow
@requires_ray
def test_roles_checkpoints_on_ray_equal_local(local_ray, tmp_path):
    """`attnlib roles --checkpoints A B --engine ray` probes each checkpoint in its own Ray task: the same JSON as one
    after another here (each checkpoint's probe is the same forward pass, wherever it runs)."""
    from support.models import save_tiny

    first, second = (str(save_tiny("gpt2", tmp_path / f"step{s}")) for s in (10, 20))
    argv = ["roles", "--model", second, "--checkpoints", first, second, "--sequences", "2", "--repeat-length", "8"]
    with torch_threads(1):
        local = cli_json(*argv, "--json")
    out = tmp_path / "roles.json"
    on_ray = cli_json(*argv, "--json", "--engine", "ray", "--workers", "2", "--out", str(out))
    assert [p["step"] for p in local["checkpoints"]] == [10, 20] and on_ray["checkpoints"] == local["checkpoints"]
    record = read_result_file(out.read_bytes(), "roles")
    assert record.run["engine"] == "ray" and record.run["workers"] == 2
