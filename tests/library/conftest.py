"""Fixtures the test modules of library/ share (the suite's own are in tests/conftest.py)."""

from __future__ import annotations

import pytest

from attnlib.cli import entry as cli
from attnlib.core.batches import accumulate
from attnlib.core.corpus import read_conllu
from attnlib.core.engines import ray_runtime_env
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV
from support.bad_input import _live
from support.scale import BATCH, N_SENTENCES, all_accumulators, torch_threads


@pytest.fixture
def live_app():
    at = _live()
    assert not at.exception
    return at


@pytest.fixture(scope="session")
def sentences():
    return read_conllu(EWT_DEV)[:N_SENTENCES]


@pytest.fixture(scope="session")
def local_result(minilm, sentences):
    """The local engine's accumulators, with one torch thread like the Ray workers below."""
    accumulators = all_accumulators(minilm)
    with torch_threads(1):
        accumulate(minilm, sentences, accumulators, batch_size=BATCH)
    return accumulators


@pytest.fixture(scope="session")
def local_ray():
    """A local Ray with two CPUs for this test session."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=ray_runtime_env())
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def special_file(tmp_path_factory):
    """A result file of `special` with the head map, written by the command line."""
    path = tmp_path_factory.mktemp("results") / "special.json"
    assert (
        cli.main(
            [
                "special",
                "--corpus",
                str(CLASSROOM_SINGLE),
                "--limit",
                "6",
                "--head-map",
                "--out",
                str(path),
                "--json",
            ]
        )
        == 0
    )
    return path
