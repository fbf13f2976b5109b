"""The Dependency heads page: the table (METHODS section 7) against the library, two models, the shipped table; the
probe section (METHODS section 14) against the probe command and from a shipped result."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.analyses.probe import PROBE, ProbeOptions
from attnlib.analyses.registry import analyse
from attnlib.results.shipped import EWT_DEV, EWT_TEST, ROOT
from support.apptest import figures, tables
from support.cli import cli_json
from support.pages import _deps_page


def test_page_silver_classroom_marks_predicted_parses():
    at = _deps_page("silver", deps_text_limit=12)
    assert not at.exception, at.exception
    assert any("Predicted parses" in i.value for i in at.info)
    assert at.metric[0].value == "12"
    assert tables(at)[0]["relation"].iloc[0] == "all"


@pytest.mark.slow
def test_page_gold_table_heatmap_and_example(minilm):
    from attnlib.core.corpus import read_conllu

    at = _deps_page("gold", deps_limit=15)
    assert not at.exception, at.exception
    assert [m.value for m in at.metric][:3] == ["15", str(sum(len(s.words) for s in read_conllu(EWT_DEV)[:15])), "0"]
    frame = tables(at)[0]
    expected = analyse("deps", minilm, conllu=EWT_DEV, limit=15, min_count=5).result.table
    assert frame["relation"].tolist() == [r.relation for r in expected.rows]
    assert frame["best head"].tolist() == [f"{r.layer + 1}-{r.head + 1}" for r in expected.rows]
    np.testing.assert_allclose(frame["accuracy %"], [100 * r.accuracy for r in expected.rows])
    paper = tables(at)[1]  # the reference table, in an expander for models other than bert-base-uncased
    assert {"obj", "nmod:poss"} <= set(paper["closest UD label"]) and paper["relation (paper)"].iloc[0] == "all"
    table_charts = [c for c in figures(at) if c.key.startswith("deps_")]  # the probe section draws its own
    assert len(table_charts) == 3  # heatmap, arc diagram, the example's attention
    assert any("found" in c.spec for c in figures(at))
    at.radio(key="deps_split").set_value("halves").run()
    assert not at.exception
    assert any("half A" in c.value for c in at.caption)


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_compares_two_models_table_and_probe(minilm, tiny_model_dir, tiny_model, one_thread):
    from streamlit.testing.v1 import AppTest

    from attnlib.core.corpus import read_conllu
    from attnlib.present.report import largest_difference

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in {"limit": "10", "min": "1", "probe_limit": "4", "cmp": str(tiny_model_dir)}.items():
        at.query_params[key] = value
    at.run()
    at.switch_page("app_pages/deps/page.py").run()
    assert not at.exception, [e.value for e in at.exception]
    first, second = minilm.facts.name, str(tiny_model_dir)
    sentences = read_conllu(EWT_DEV)[:10]
    expected = {
        m: analyse("deps", lm, conllu=sentences, min_count=1).result.table
        for m, lm in [(first, minilm), (second, tiny_model)]
    }
    frame = tables(at)[0]
    assert frame["relation"].tolist() == [r.relation for r in expected[first].rows]
    for model, table in expected.items():
        by_relation = {r.relation: r for r in table.rows}
        rows = [by_relation[r] for r in frame["relation"]]
        assert frame[f"{model}: best head"].tolist() == [f"{r.layer + 1}-{r.head + 1}" for r in rows]
        np.testing.assert_allclose(frame[f"{model}: accuracy %"], [100 * r.accuracy for r in rows])
    accuracy = [{"best-head accuracy": {r.relation: r.accuracy for r in t.rows}} for t in expected.values()]
    largest = largest_difference(*accuracy)
    assert largest is not None and any(largest.text() in m.value for m in at.markdown)

    at.session_state["deps_tab"] = "All heads together"
    at.run()
    at.button(key=f"compute:probe:{first}").click().run()  # each model's probe is trained on request
    at.button(key=f"compute:probe:{second}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    uas = next(d for d in tables(at) if "method" in d.columns).set_index("method")
    assert list(uas.columns) == [f"{m}: {c}" for m in (first, second) for c in ("UAS %", "head or offset")]
    shown = {m.label: m.value for m in at.metric}["UAS, attention-only probe"]
    assert shown == f"{uas.loc['attention-only probe', f'{first}: UAS %']:.1f}%"
    assert uas[f"{second}: UAS %"].notna().sum() == 3  # probe, best head, offset (words probe: first model only)
    assert sum("largest difference: UAS in" in m.value for m in at.markdown) == 1


@pytest.mark.slow
def test_page_opens_the_shipped_table_at_once_and_says_so(monkeypatch):
    import hashlib

    from streamlit.testing.v1 import AppTest

    from attnlib.analyses.deps import DepsOptions, dependency_counts_from_json
    from attnlib.core.model import DEFAULT_MODEL
    from attnlib.results.precomputed import shipped_result

    def no_counting(*args, **kwargs):
        raise AssertionError("the page ran the model over the corpus although its result ships")

    monkeypatch.setattr("attnlib.analyses.base.run_analysis", no_counting)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("app_pages/deps/page.py").run()
    assert not at.exception, [e.value for e in at.exception]
    record = shipped_result("deps", DEFAULT_MODEL, hashlib.sha1(EWT_DEV.read_bytes()).hexdigest(), 2001, DepsOptions())
    assert record is not None
    expected = dependency_counts_from_json(record.state or {}).table(min_count=100)
    frame = tables(at)[0]
    assert frame["relation"].tolist() == [r.relation for r in expected.rows]
    np.testing.assert_allclose(frame["accuracy %"], [100 * r.accuracy for r in expected.rows])
    assert at.metric[0].value == "2001"
    assert any("precomputed, shipped with the app" in c.value for c in at.caption)
    assert at.button(key=f"recompute:deps:{DEFAULT_MODEL}").label == "Recompute"


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
    return at.switch_page("app_pages/deps/page.py").run()


def _cli_probe(model: str, limit: int, out_file=None) -> dict:
    """The probe command's JSON on EWT (dev to train, test to test)."""
    args = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", str(limit), "--model", model]
    return cli_json(*args, "--json", *(["--out", str(out_file)] if out_file else []))


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_probe_uas_equals_the_cli(tiny_model_dir, one_thread):
    at = _probe_page(model=str(tiny_model_dir))
    assert not at.exception, [e.value for e in at.exception]
    assert not any(m.label.startswith("UAS") for m in at.metric)  # nothing is trained before the visitor asks
    at.button(key=f"compute:probe:{tiny_model_dir}").click().run()
    assert not at.exception, [e.value for e in at.exception]
    out = _cli_probe(str(tiny_model_dir), 6)
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
    words = _cli_probe_words(str(tiny_model_dir))
    assert _metrics(at)["UAS, attention + words"] == f"{100 * words['uas']:.1f}%"


def _cli_probe_words(model: str) -> dict:
    """The probe command's JSON on EWT, word-level variant."""
    args = ["probe", "--train", str(EWT_DEV), "--test", str(EWT_TEST), "--limit", "6", "--model", model]
    return cli_json(*args, "--variant", "words", "--json")


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_page_probe_opens_a_shipped_result_without_training(tiny_model_dir, tmp_path, monkeypatch):
    import ui.sources.result_source
    from attnlib.analyses import probe
    from attnlib.results.files import read_result_file

    out_file = tmp_path / "probe.json"
    out = _cli_probe(str(tiny_model_dir), 6, out_file)
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
