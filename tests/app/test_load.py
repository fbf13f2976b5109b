"""Many users, without a browser: every cache bounded, the live run cache small, the server's settings (Python's own
garbage collection, no file watcher), concurrent runs on one model kept apart. browser/test_browser_load.py runs 8
browser sessions at once against one `streamlit run`."""

from __future__ import annotations

import ast

from attnlib.results.shipped import ROOT
from support.load import SESSIONS, _sentence

# ---------- bounded caches -----------------------------------------------------------------------------------------


def _cache_decorators():
    """(file, function, keyword names) of every st.cache_data / st.cache_resource in ui/ and app_pages/."""
    for folder in ("ui", "app_pages"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for deco in node.decorator_list:
                    call = deco if isinstance(deco, ast.Call) else None
                    target = call.func if call else deco
                    name = ast.unparse(target)
                    if name.endswith(("cache_data", "cache_resource")):
                        keywords = {k.arg for k in call.keywords} if call else set()
                        if not node.args.args:  # no argument, so one entry at most
                            keywords.add("no arguments")
                        yield str(path.relative_to(ROOT)), node.name, keywords


def test_every_cache_is_bounded():
    found = list(_cache_decorators())
    assert len(found) >= 5
    unbounded = [(f, fn) for f, fn, keys in found if not keys & {"max_entries", "ttl", "no arguments"}]
    assert unbounded == []


def test_live_run_cache_is_small():
    """A 512-token run holds about 85 MB (attention, queries and keys of 6 x 12 heads), and every visitor shares it."""
    keys = {fn: kw for f, fn, kw in _cache_decorators()}
    assert "cached_run" in keys
    source = (ROOT / "ui" / "sources" / "live_inputs.py").read_text()
    tree = ast.parse(source)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "cached_run")
    entries = next(
        k.value.value
        for d in fn.decorator_list
        if isinstance(d, ast.Call)
        for k in d.keywords
        if k.arg == "max_entries"
    )
    assert entries * 85 <= 500, f"cached_run may hold {entries} x 85 MB"


def test_server_leaves_collection_to_python():
    """Streamlit's default full collection after every run holds the GIL for about 0.4 s with torch loaded, stalling
    every visitor's page (bench_classroom); the config turns it off (Python's own collector still runs)."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False


def test_server_does_not_watch_its_files():
    """Streamlit's file watcher (watchdog) slowed every visit by 1-2.5 s here, following the files the server opens;
    the config turns it off, so `streamlit run app.py` serves as the benchmark's server does."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["fileWatcherType"] == "none"


# ---------- one model shared by many threads -----------------------------------------------------------------------


def test_concurrent_runs_on_one_model_do_not_mix(minilm):
    """Streamlit runs each visitor in its own thread on the one cached model; hooks must record only their own run."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from attnlib.core.runner import run, run_batches

    texts = [_sentence(i) * (1 + i % 3) for i in range(SESSIONS)]  # different lengths, so a mix-up cannot hide
    alone = [run(minilm, t) for t in texts]

    def job(i: int):
        if i % 2:
            return next(iter(run_batches(minilm, [(texts[i], None)])))
        return run(minilm, texts[i])

    for _ in range(3):
        with ThreadPoolExecutor(SESSIONS) as pool:
            together = list(pool.map(job, range(SESSIONS)))
        for i, (a, b) in enumerate(zip(alone, together)):
            np.testing.assert_allclose(b.attentions, a.attentions, atol=1e-5, err_msg=f"input {i}")
            if i % 2 == 0:
                np.testing.assert_allclose(b.queries, a.queries, atol=1e-4, err_msg=f"input {i}")
                np.testing.assert_allclose(b.keys, a.keys, atol=1e-4, err_msg=f"input {i}")


def test_run_limit_secret_refuses_a_long_run_in_words(monkeypatch):
    """The secret max_run_mb becomes ATTNLIB_MAX_RUN_MB (no variable set); the Live page then refuses a run whose
    estimate is above it, in words, keeping the text; a malformed secret is said in the sidebar and sets nothing."""
    import os

    from streamlit.testing.v1 import AppTest

    from attnlib.core.memory import MAX_RUN_MB_ENV

    TEXT = "A sentence for the run limit alone, about a heron on a wall."
    monkeypatch.setenv(MAX_RUN_MB_ENV, "")  # unset for the app; the fixture restores it after the test
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.secrets["max_run_mb"] = 0.01  # the sentence's run needs about 0.05 MB of attention weights
    at.query_params["a"] = TEXT  # a sentence no other test runs: a cached run would be served without a new estimate
    at.run()
    assert not at.exception and os.environ[MAX_RUN_MB_ENV] == "0.01"
    (said,) = [w.value for w in at.warning if "this server allows" in w.value]
    assert "0.01 MB per run" in said and at.text_area[0].value == TEXT

    monkeypatch.setenv(MAX_RUN_MB_ENV, "")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.secrets["max_run_mb"] = "lots"
    at.run()
    assert not at.exception and os.environ[MAX_RUN_MB_ENV] == ""
    assert any("run memory limit must be a number of megabytes" in e.value for e in at.sidebar.error)
