"""Dependency-head accuracy (METHODS section 7) on hand-built sentences, the deps command on EWT dev, and the page.

The slow tier; test_deps.py holds the quick tests."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlib.analyses.registry import analyse
from attnlib.results.shipped import EWT_DEV, ROOT
from support.apptest import figures, tables
from support.pages import _deps_page

pytestmark = pytest.mark.slow


def _independent_table(lm, path, limit, min_count):
    import conllu

    from attnlib.core.runner import run_batches

    sentences = []
    with open(path, encoding="utf-8") as f:
        for tokenlist in conllu.parse_incr(f):
            words = [t for t in tokenlist if isinstance(t["id"], int)]
            sentences.append(([t["form"] for t in words], [t["head"] for t in words], [t["deprel"] for t in words]))
            if len(sentences) == limit:
                break
    offsets = [-3, -2, -1, 1, 2, 3]
    L, H = lm.facts.n_layers, lm.facts.n_heads
    total, hits, base = {}, {}, {}
    results = run_batches(lm, ((words, None) for words, _, _ in sentences), batch_size=32)
    for (words, heads, rels), r in zip(sentences, results):
        m = len(words)
        units = [[p for p, w in enumerate(r.word_ids) if w == k] for k in range(m)]
        for rel in rels:
            for key in (rel, "all"):
                total[key] = total.get(key, 0) + 1
        for i, (rel, h) in enumerate(zip(rels, heads)):
            for k in offsets:
                if 1 <= i + 1 + k <= m and i + 1 + k == h:
                    for key in (rel, "all"):
                        base[key, k] = base.get((key, k), 0) + 1
        for layer in range(L):
            for head in range(H):
                a = r.attentions[layer, head].astype(np.float64)
                # word i -> word j: mean over i's pieces of the sum over j's pieces
                to_word = np.stack([a[:, pieces].sum(axis=1) for pieces in units], axis=1)
                w = np.stack([to_word[pieces].mean(axis=0) for pieces in units])
                np.fill_diagonal(w, 0.0)
                for d, grid in enumerate((w.tolist(), w.T.tolist())):
                    for i in range(m):
                        best = 0
                        for j in range(1, m):
                            if grid[i][j] > grid[i][best]:
                                best = j
                        if best + 1 == heads[i]:
                            for key in (rels[i], "all"):
                                hits[key, layer, head, d] = hits.get((key, layer, head, d), 0) + 1
    rows = {}
    for key, count in total.items():
        if key != "all" and (count < min_count or key in ("root", "punct")):
            continue
        score = max((hits.get((key, l, h, d), 0), -l, -h, -d) for l in range(L) for h in range(H) for d in (0, 1))
        k_best = max(offsets, key=lambda k: (base.get((key, k), 0), -offsets.index(k)))
        rows[key] = dict(
            relation=key,
            count=count,
            layer=-score[1],
            head=-score[2],
            direction=("dep->head", "head<-dep")[-score[3]],
            accuracy=score[0] / count,
            baseline_offset=k_best,
            baseline_accuracy=base.get((key, k_best), 0) / count,
        )
    return len(sentences), sum(len(s[0]) for s in sentences), rows


@pytest.mark.slow
def test_cli_on_ewt_dev_slice_matches_independent_computation(minilm, capsys):
    from attnlib.cli.entry import main

    assert main(["deps", "--conllu", str(EWT_DEV), "--limit", "40", "--min-count", "15", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    n_sentences, n_words, expected = _independent_table(minilm, EWT_DEV, 40, 15)
    assert (out["n_sentences"], out["n_words"], out["n_skipped"]) == (n_sentences, n_words, 0)
    assert out["rows"][0]["relation"] == "all"
    assert sorted(r["relation"] for r in out["rows"]) == sorted(expected)
    counts = [r["count"] for r in out["rows"][1:]]
    assert counts == sorted(counts, reverse=True)
    for row in out["rows"]:
        want = expected[row["relation"]]
        assert row == pytest.approx(want), row["relation"]


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
    at.switch_page("app_pages/dependency_heads/page.py").run()
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
    at.switch_page("app_pages/dependency_heads/page.py").run()
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
