"""Shared fixtures and hooks (helpers live in tests/support/): the packaged model, tiny random models of every family
built in-process (tests/support/models.py), the Streamlit server, the browser, the example notebook's kernel, and the
report's and the notebook's results that modules of two tiers share."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from attnlib.core.batches import accumulate
from attnlib.core.corpus import read_conllu
from attnlib.core.engines import ray_runtime_env
from attnlib.core.model import DEFAULT_MODEL, load_model
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, ROOT
from support.browser import BROWSER_ARGS, free_port, server_log
from support.cli import cli_json, run_cli
from support.models import FAMILY_KINDS, NO_ATTENTION_KINDS, save_tiny
from support.notebook import EXAMPLE_NOTEBOOK, LIMIT
from support.report import MIN_COUNT, N_INPUTS
from support.scale import BATCH, N_SENTENCES, all_accumulators, torch_threads


def pytest_configure(config):
    """An xdist worker shares the cores with the others: one torch thread each, for it and the processes it starts."""
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """torch on one thread for the test: small tensors gain nothing from a second, which on a busy machine waits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 model, loaded once."""
    return load_model(DEFAULT_MODEL)


@pytest.fixture(scope="session", params=["bert", "roberta", "distilbert"])
def tiny_model_dir(request, tmp_path_factory):
    """A folder holding a tiny random masked-LM model of each of three families and its tokenizer."""
    return save_tiny(request.param, tmp_path_factory.mktemp(f"tiny-{request.param}"))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """Each tiny random model, loaded through the library's own loader."""
    return load_model(str(tiny_model_dir))


@pytest.fixture(scope="session", params=FAMILY_KINDS)
def family_dir(request, tmp_path_factory):
    """A folder holding a tiny random model of every supported family (and two fine-tuned ones) with its tokenizer."""
    return save_tiny(request.param, tmp_path_factory.mktemp(f"family-{request.param}"))


@pytest.fixture(scope="session")
def family_model(family_dir):
    """Each family's tiny model, loaded through the library's own loader (one per session)."""
    return load_model(str(family_dir))


@pytest.fixture(scope="session")
def streamlit_server():
    """`streamlit run app.py` on a free loopback port; yields the base URL and stops the server afterwards."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    port = free_port()
    log = server_log()
    log.parent.mkdir(exist_ok=True)
    out = open(log, "wb")  # noqa: SIM115 - open for the server's whole life
    env = dict(os.environ, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "app.py"),
            "--server.headless",
            "true",
            "--server.fileWatcherType",
            "none",
            "--server.address",
            "127.0.0.1",
            "--server.port",
            str(port),
        ],
        cwd=ROOT,
        stdout=out,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/_stcore/health", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError(f"streamlit did not start; see {log}")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    out.close()


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def screenshot_dir():
    """Where browser tests keep their screenshots."""
    folder = ROOT / "test-output" / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def execute_notebook(tmp_path_factory):
    """execute_notebook(python, cwd, limit): the example notebook run headless by a kernel of that Python, in `cwd`,
    with its LIMIT cell set to `limit`; the executed notebook (nbformat)."""
    import nbformat
    from nbclient import NotebookClient

    kernels = tmp_path_factory.mktemp("jupyter")
    made: dict[str, str] = {}

    def kernel_for(python: str) -> str:
        """A kernelspec that starts ipykernel with this Python (the installed one says `python`, read from PATH)."""
        if python not in made:
            name = f"attnlib-test-{len(made)}"
            folder = kernels / "kernels" / name
            folder.mkdir(parents=True)
            argv = [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
            (folder / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": name, "language": "python"}))
            made[python] = name
        return made[python]

    def execute(python: str, cwd: Path, limit: int):
        import os

        nb = nbformat.read(EXAMPLE_NOTEBOOK, as_version=4)
        (parameters,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        parameters.source = f"LIMIT = {limit}"
        name = kernel_for(python)
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = str(kernels)
        try:
            client = NotebookClient(nb, timeout=300, kernel_name=name, resources={"metadata": {"path": str(cwd)}})
            return client.execute()
        finally:
            if old is None:
                os.environ.pop("JUPYTER_PATH")
            else:
                os.environ["JUPYTER_PATH"] = old

    return execute


def pytest_collection_modifyitems(items):
    """Every test that drives Chromium is a browser test, and a slow one (it starts with a Streamlit server)."""
    for item in items:
        if {"browser", "streamlit_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _fresh_shipped_results():
    """The app parses each shipped result once per process; tests that swap `shipped_result` must not see another
    test's parse."""
    from ui.sources.result_source import _shipped

    _shipped.clear()


# ---------- what a module and its other tier's module share: the report's inputs and page (present/test_report.py,
# browser/test_browser_report.py) and the executed example notebook (packaging/, browser/test_browser_notebook.py)


@pytest.fixture(scope="session")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report-inputs")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(CLASSROOM_SINGLE.read_text().splitlines()[:N_INPUTS]) + "\n")
    blocks = EWT_DEV.read_text().split("\n\n")[:30]
    conllu = folder / "treebank.conllu"
    conllu.write_text("\n\n".join(blocks) + "\n\n")
    train = folder / "train.conllu"
    train.write_text("\n\n".join(EWT_DEV.read_text().split("\n\n")[30:60]) + "\n\n")
    return str(corpus), str(conllu), str(train)


@pytest.fixture(scope="session")
def report_page(tiny_model_dir, files, tmp_path_factory):
    """The report for a tiny random model, written by the command; (page, its JSON summary)."""
    corpus, conllu, train = files
    out = tmp_path_factory.mktemp("report") / "report.html"
    summary = cli_json(
        "report", "--corpus", corpus, "--conllu", conllu, "--train", train, "--model", str(tiny_model_dir), "--out", str(out),
        "--limit", str(N_INPUTS), "--min-count", str(MIN_COUNT), "--quiet", "--json",
    )  # fmt: skip
    return out, summary


@pytest.fixture(scope="session")
def executed(execute_notebook, tmp_path_factory):
    """The notebook run by this Python's kernel, in a folder outside the checkout."""
    return execute_notebook(sys.executable, tmp_path_factory.mktemp("notebook"), LIMIT)


# ---------- the scale-out engines' inputs and a `special` result file (core/test_scale.py, results/, app/)


@pytest.fixture(scope="session")
def sentences():
    """The first N_SENTENCES sentences of the EWT dev treebank."""
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
    ran = run_cli(
        "special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "6", "--head-map", "--out", str(path), "--json"
    )
    assert ran.code == 0, ran.err
    return path


@pytest.fixture(scope="session", params=NO_ATTENTION_KINDS)
def no_attention_dir(request, tmp_path_factory):
    """A folder holding a tiny random causal LM without attention layers (Mamba, RWKV) and its tokenizer."""
    return save_tiny(request.param, tmp_path_factory.mktemp(f"no-attention-{request.param}"))


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    """A tiny random T5 saved without its tokenizer, in a folder."""
    from transformers import T5Config, T5ForConditionalGeneration

    folder = tmp_path_factory.mktemp("tiny-t5")
    config = T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=50)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def unknown_dir(tmp_path_factory):
    """A tiny Megatron-BERT (pre-LN, a family attnlib has no layout for) that loads as any encoder does."""
    from transformers import MegatronBertConfig, MegatronBertForMaskedLM

    from support.models import bert_tokenizer

    folder = tmp_path_factory.mktemp("megatron")
    tokenizer = bert_tokenizer()
    torch.manual_seed(0)
    MegatronBertForMaskedLM(
        MegatronBertConfig(
            vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
        )
    ).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
