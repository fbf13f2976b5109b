"""Shared fixtures: the packaged model, tiny random models of every family built in-process (tests/tiny_families.py),
the Streamlit server and the browser."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tiny_families import FAMILY_KINDS, bert_tokenizer, roberta_tokenizer, save_tiny, tiny_config, tokenizer_for

from attnlib.model import DEFAULT_MODEL, load_model
from attnlib.runner import RunResult
from attnlib.shipped import ROOT


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


def _bert_tokenizer():
    return bert_tokenizer()


def _roberta_tokenizer():
    return roberta_tokenizer()


def _tiny_config(kind: str, vocab_size: int):
    """tiny_families' config of this kind with another vocabulary size."""
    config = tiny_config(kind, tokenizer_for(kind))
    config.vocab_size = vocab_size
    return config


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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def streamlit_server():
    """`streamlit run app.py` on a free loopback port; yields the base URL and stops the server afterwards."""
    import os
    import subprocess
    import sys
    import time
    import urllib.request

    port = _free_port()
    log = ROOT / "test-output"
    log.mkdir(exist_ok=True)
    out = open(log / "streamlit-server.log", "wb")  # noqa: SIM115 - open for the server's whole life
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
        raise RuntimeError("streamlit did not start; see test-output/streamlit-server.log")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    out.close()


BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


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


EXAMPLE_NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"


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


IDLE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"  # a browser page's run has ended
FIGURE = ".attn-figure"  # a figure in a browser page (ui/plotly_figure.js); its plot is `.js-plotly-plot[data-drawn]`
# Every figure and table of the page drawn (figures below the first screen a moment after the rest; ui/plotly_figure.js).
FIGURES_DRAWN = """() => [...document.querySelectorAll("[data-testid='stMain'] .stBidiComponent")]
  .every((el) => el.querySelector('.js-plotly-plot[data-drawn], .attn-table table, canvas[data-drawn]') !== null)"""


@contextmanager
def browser_page(browser, failure: Path | None = None, width: int = 1400, height: int = 1000) -> Iterator:
    """A new Chromium page, closed afterwards; when the body fails, a full-page screenshot at `failure` first."""
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        yield page
    except Exception:
        if failure is not None:
            page.screenshot(path=str(failure), full_page=True)
        raise
    finally:
        page.close()


@contextmanager
def offline_page(browser) -> Iterator[tuple]:
    """A browser page that refuses every request but local ones (file:, data:, blob:); (the page, URLs asked for)."""
    asked: list[str] = []

    def only_local(route) -> None:
        asked.append(route.request.url)
        if route.request.url.startswith(("file:", "data:", "blob:")):
            route.continue_()
        else:
            route.abort()

    with browser_page(browser) as page:
        page.route("**/*", only_local)
        yield page, asked


def pytest_collection_modifyitems(items):
    """Every test that drives Chromium is a browser test, and a slow one (it starts with a Streamlit server)."""
    for item in items:
        if {"browser", "streamlit_server"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


# ---------- helpers other test modules import (`from conftest import ...`) ------------------------------------


def fake_result(
    attn: np.ndarray,  # [layers, heads, n, n]
    tokens: list[str],
    cls: np.ndarray | None = None,
    sep: np.ndarray | None = None,
    *,
    segments: list[int] | None = None,
    word_ids: list[int | None] | None = None,
    words: list[str] | None = None,
) -> RunResult:
    """A RunResult built by hand: [CLS] and [SEP] found by name unless their masks are given; no words unless given."""
    n = len(tokens)
    cls = np.array([t == "[CLS]" for t in tokens]) if cls is None else cls
    sep = np.array([t == "[SEP]" for t in tokens]) if sep is None else sep
    return RunResult(
        input_ids=list(range(n)),
        token_type_ids=None,
        tokens=tokens,
        segments=np.zeros(n, np.int8) if segments is None else np.array(segments, np.int8),
        word_ids=[None] * n if word_ids is None else word_ids,
        words=[] if words is None else words,
        cls_mask=cls,
        sep_mask=sep,
        special_mask=cls | sep,
        n_tokens_full=n,
        attentions=np.array(attn, np.float32),
    )


def random_input(rng: np.random.Generator, layers: int = 2, heads: int = 3, pair: bool | None = None) -> RunResult:
    """A random input of random length with CLS, words, punctuation, one or two SEPs."""
    n = int(rng.integers(4, 12))
    tokens = ["[CLS]"] + [str(rng.choice(["a", "b", ".", ",", "!"])) for _ in range(n - 2)] + ["[SEP]"]
    sep = np.zeros(n, bool)
    sep[-1] = True
    if pair if pair is not None else rng.random() < 0.5:
        tokens[n // 2] = "[SEP]"
        sep[n // 2] = True
    cls = np.zeros(n, bool)
    cls[0] = True
    x = rng.random((layers, heads, n, n)) ** 3
    return fake_result(x / x.sum(-1, keepdims=True), tokens, cls, sep)


@dataclass(frozen=True)
class ShownFigure:
    """A figure as the app sent it to the page (ui/plotly_figure): its key and its Plotly JSON."""

    key: str
    spec: str


def figures(node) -> list[ShownFigure]:
    """Every figure under an AppTest node (the app, a tab, a column), in page order."""
    from ui.plotly_figure import COMPONENT

    shown = [c for c in node.get("bidi_component") if c.proto.component_name == COMPONENT]
    return [ShownFigure(str(c.key), json.loads(c.proto.json)["figure"]) for c in shown]


def tables(node) -> list[pd.DataFrame]:
    """Every table under an AppTest node (ui/data_table), in page order, as the DataFrame its cells were sent from."""
    from ui.data_table import COMPONENT

    shown = [json.loads(c.proto.json) for c in node.get("bidi_component") if c.proto.component_name == COMPONENT]
    return [pd.DataFrame(t["rows"], columns=t["columns"]) for t in shown]


def open_tab(at, key: str, label: str):
    """Open one of a page's tabs (only the open tab is drawn) and rerun; the AppTest."""
    at.session_state[key] = label
    return at.run()


def across_tabs(at, key: str, labels, get) -> list:
    """get(at) with each tab opened in turn, concatenated; no tab may raise."""
    found = []
    for label in labels:
        open_tab(at, key, label)
        assert not at.exception, (label, [e.value for e in at.exception])
        found += get(at)
    return found


@pytest.fixture(autouse=True)
def _fresh_shipped_results():
    """The app parses each shipped result once per process; tests that swap `shipped_result` must not see another
    test's parse."""
    from ui.result_source import _shipped

    _shipped.clear()
