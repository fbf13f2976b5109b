"""Clark's attention probe (METHODS section 14) on hand-made maps, tiny models, and the probe command on EWT.

The slow tier; test_probe.py holds the quick tests."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlib.analyses.probe import PROBE, ProbeOptions, ProbeResult, run_probe
from attnlib.core.corpus import read_conllu
from attnlib.results.shipped import EWT_DEV, EWT_TEST
from support.apptest import figures, tables

pytestmark = pytest.mark.slow


@pytest.mark.slow
def test_cli_on_ewt_agrees_with_the_library(minilm, tmp_path, capsys):
    from attnlib.cli.entry import main
    from attnlib.results.files import read_result_file

    out_file = tmp_path / "probe.json"
    args = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "6", "--json", "--out", str(out_file)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    train, test = read_conllu(EWT_DEV)[:6], read_conllu(EWT_TEST)[:6]
    expected = run_probe(minilm, train, test).to_json()
    assert out == json.loads(json.dumps(expected))
    assert (out["n_train"], out["n_test"], out["n_skipped"]) == (6, 6, 0)
    assert out["n_words"] == sum(r != "punct" for s in test for r in s.deprels)
    assert [len(s["predicted"]) for s in out["sentences"]] == [len(s.words) for s in test]
    record = read_result_file(out_file.read_text(), "probe")
    assert ProbeResult.from_json(record.result).to_json() == out
    assert record.options == {"variant": "attention", "epochs": 1, "seed": 0}
    assert (record.corpus["train"]["path"], record.corpus["train"]["n_inputs"]) == (str(EWT_DEV), 6)


def _probe_page(model: str | None = None, compare: str | None = None, limit: int = 6):
    """The Dependency heads page with a small Table 1 (10 sentences) and the probe on `limit` sentences of each file."""
    from streamlit.testing.v1 import AppTest

    from attnlib.results.shipped import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    params = {"limit": "10", "min": "1", "probe_limit": str(limit), "tab": "probe"}
    params |= {"model": model} if model else {}
    params |= {"cmp": compare} if compare else {}
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    return at.switch_page("app_pages/dependency_heads/page.py").run()


def _cli_probe(model: str, limit: int, capsys, out_file=None) -> dict:
    from attnlib.cli.entry import main

    args = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", str(limit), "--model", model]
    assert main([*args, "--json", *(["--out", str(out_file)] if out_file else [])]) == 0
    return json.loads(capsys.readouterr().out)


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_probe_uas_equals_the_cli(tiny_model_dir, capsys, one_thread):
    at = _probe_page(model=str(tiny_model_dir))
    assert not at.exception, [e.value for e in at.exception]
    assert not any(m.label.startswith("UAS") for m in at.metric)  # nothing is trained before the visitor asks
    at.button(key=f"compute:probe:{tiny_model_dir}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    out = _cli_probe(str(tiny_model_dir), 6, capsys)
    best = out["best_head"]
    metrics = _metrics(at)
    assert metrics["UAS, attention-only probe"] == f"{100 * out['uas']:.1f}%"
    assert (
        metrics[f"Best single head ({best['layer'] + 1}-{best['head'] + 1})"]
        == f"{100 * out['best_head_accuracy']:.1f}%"
    )
    assert metrics[f"Best fixed offset ({out['baseline_offset']:+d})"] == f"{100 * out['baseline_accuracy']:.1f}%"
    assert metrics["UAS, attention + words"] == "—"
    relations = next(d for d in tables(at) if "probe UAS %" in d.columns)
    assert relations["relation"].tolist() == list(out["uas_by_relation"])
    np.testing.assert_allclose(relations["probe UAS %"], [100 * v["uas"] for v in out["uas_by_relation"].values()])
    titles = " ".join(c.spec for c in figures(at))
    assert "Learned weight of every head" in titles and f"{out['sentences'][0]['sent_id']}:" in titles
    assert any("computed here" in c.value for c in at.caption)

    at.button(key="probe_words_button").click().run()  # the attention + words probe, on request
    words = _cli_probe_words(str(tiny_model_dir), capsys)
    assert _metrics(at)["UAS, attention + words"] == f"{100 * words['uas']:.1f}%"


def _cli_probe_words(model: str, capsys) -> dict:
    from attnlib.cli.entry import main

    args = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "6", "--model", model]
    assert main([*args, "--variant", "words", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_probe_opens_a_shipped_result_without_training(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import ui.sources.result_source
    from attnlib.analyses import probe
    from attnlib.results.files import read_result_file

    out_file = tmp_path / "probe.json"
    out = _cli_probe(str(tiny_model_dir), 6, capsys, out_file)
    record = read_result_file(out_file.read_text(), "probe")
    asked = []

    def shipped(command, model, sha1, n_inputs, options, train=None):
        """The CLI's file when the page asks for what it holds (the options compared as attnlib.results.precomputed does)."""
        asked.append((command, options, train))
        same = (command, model, sha1, n_inputs) == ("probe", record.model, record.corpus["sha1"], 6)
        trained_on = (record.corpus["train"]["sha1"], record.corpus["train"]["n_inputs"])
        return record if same and train == trained_on and PROBE.answers(record.options, options) else None

    def no_training(*args, **kwargs):
        raise AssertionError("the page trained a probe although a shipped result matches")

    monkeypatch.setattr(ui.sources.result_source, "shipped_result", shipped)
    monkeypatch.setattr(probe, "run_probe", no_training)
    at = _probe_page(model=str(tiny_model_dir))
    assert not at.exception, [e.value for e in at.exception]
    assert ("probe", ProbeOptions(), (record.corpus["train"]["sha1"], 6)) in asked
    assert _metrics(at)["UAS, attention-only probe"] == f"{100 * out['uas']:.1f}%"
    assert any("precomputed, shipped with the app" in c.value for c in at.caption)
    assert at.button(key=f"recompute:probe:{tiny_model_dir}") is not None
