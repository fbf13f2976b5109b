"""The report: its tables equal each command's JSON, it is offline and self-contained, and a model equals itself."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from attnlib.analyses.attention import AttentionOptions
from attnlib.analyses.base import Analysis
from attnlib.analyses.deps import CLARK_TABLE1, paper_rows
from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION
from attnlib.present.comparison import Difference, largest_difference
from attnlib.present.report import (
    PartResult,
    ReportOptions,
    ReportPart,
    methods_anchor,
    methods_sections,
    render_report,
    run_parts,
    run_report,
)
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.stats.norms import NORM_KEYS
from attnlib.stats.special import STAT_KEYS
from attnlib.views.plotly_js import plotly_js
from support.cli import cli_json, run_cli
from support.json_keys import COMMAND_KEYS
from support.report import MIN_COUNT, N_INPUTS, read_tables, report_parts
from support.tolerances import FORWARD_RTOL


def test_largest_difference_by_hand():
    a = {"[CLS] share": {"layer 1": 0.1, "layer 2": 0.61, "layer 3": 0.5}, "[SEP] share": {"layer 1": 0.3}}
    b = {"[CLS] share": {"layer 1": 0.2, "layer 2": 0.12, "layer 4": 0.9}, "[SEP] share": {"layer 1": float("nan")}}
    found = largest_difference(a, b)
    assert found == Difference("[CLS] share", "layer 2", 0.61, 0.12)
    assert found.text() == "largest difference: [CLS] share in layer 2, 0.61 vs 0.12"
    assert math.isclose(found.size, 0.49)
    assert largest_difference(a, {"entropy": {"layer 1": 1.0}}) is None  # nothing in common
    assert largest_difference(a, a).size == 0.0


def test_methods_sections_and_links():
    sections = methods_sections()
    assert sorted(sections) == list(range(1, 23))
    heading, text = sections[2]
    assert heading == "2. Share of attention to a class (Clark Fig. 2)"
    assert "share_C" in text
    assert methods_anchor(heading) == "2-share-of-attention-to-a-class-clark-fig-2"


def test_paper_rows_follow_clark_table_1():
    rows = paper_rows(["all", "obj", "nsubj", "acl"])
    assert list(rows["relation"]) == ["all", "nsubj", "obj"]  # the paper's order; acl is not in it
    by_ud = {ud: (rel, head, acc, base, offset) for rel, ud, head, acc, base, offset in CLARK_TABLE1}
    for row in rows.to_dict("records"):
        rel, head, acc, base, offset = by_ud[row["relation"]]
        assert (row["paper relation"], row["paper head"], row["paper baseline offset"]) == (rel, head, offset)
        assert np.isclose(row["paper accuracy"], acc / 100) and np.isclose(row["paper baseline accuracy"], base / 100)


class Count:
    """An accumulator of how many inputs were added."""

    captures = ATTENTION

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def add(self, result, item) -> None:
        self.n += 1

    def merge(self, other: Count) -> Count:
        return Count(self.n + other.n)


def test_a_part_that_reads_two_files_runs_when_both_are_given_each_in_its_pass(tiny_model):
    two = Analysis(
        "two", "reads train and test", AttentionOptions, "treebanks", tuple, (14,),
        accumulators=lambda lm, options: [Count()], finish=lambda train, test, options: (train[0].n, test[0].n),
    )  # fmt: skip
    part = ReportPart(
        two, "Two files", {"train": "train", "test": "conllu"}, lambda o: AttentionOptions(),
        lambda model, result, o: PartResult("two", model, {"n": pd.DataFrame({"model": [model]})}, result, {}),
    )  # fmt: skip
    sentence = CorpusInput("a b")
    results, timings = run_parts(tiny_model, {"conllu": [sentence]}, ReportOptions(), [part])
    assert results == [] and timings == []  # no training file: the part is left out
    results, timings = run_parts(
        tiny_model, {"conllu": [sentence] * 2, "train": [sentence] * 3}, ReportOptions(), [part]
    )
    assert [(r.part, r.result) for r in results] == [("two", (3, 2))] and results[0].seconds >= 0
    assert [(t.source, t.parts, t.n_inputs) for t in timings] == [("conllu", ["two"], 2)]  # train: the part's own


def test_report_without_any_input_is_a_user_error(tmp_path):
    ran = run_cli("report", "--out", str(tmp_path / "r.html"))
    assert ran.code == 2, ran.err
    assert ran.err.startswith("error: give --corpus, --conllu or both.")
    assert not (tmp_path / "r.html").exists()


# ---------- slow tests


def close(cell: str, value, scale: float = 0.0) -> bool:
    """A table cell (6 significant digits, empty for NaN) against a JSON number (None for NaN) that the command computed
    again: both within FORWARD_RTOL of the exact value relatively, or absolutely within scale times it where the value
    is a difference of such values (a correlation: scale 1; a centre of mass: the largest offset, as its numerator and
    denominator each move by FORWARD_RTOL)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return cell == ""
    rounding = 5e-6  # cells keep 6 significant digits
    return math.isclose(
        float(cell), float(value), rel_tol=rounding + FORWARD_RTOL, abs_tol=max(1e-9, 2 * scale * FORWARD_RTOL)
    )


@pytest.mark.slow
def test_tables_equal_each_commands_json(report_page, tiny_model_dir, files, one_thread):
    corpus, conllu, train = files
    model = str(tiny_model_dir)
    out, summary = report_page
    assert set(summary) == COMMAND_KEYS["report"]
    tables = read_tables(out.read_text())
    assert summary["parts"] == ["special", "positions", "aggregation", "importance", "deps", "probe"]
    assert summary["bytes"] == out.stat().st_size

    special = cli_json(
        "special", "--corpus", corpus, "--limit", str(N_INPUTS), "--head-map", "--norms", "--model", model, "--json"
    )
    per_layer = tables["special/Per layer (mean over heads)"]
    assert [int(r["layer"]) for r in per_layer] == list(range(1, len(special["layers"]) + 1))
    for row, expected in zip(per_layer, special["layers"]):
        assert all(close(row[key], expected[key]) for key in STAT_KEYS), row
    per_head = tables["special/Per head"]
    n_heads = len(special["heads"]["cls"][0])
    assert len(per_head) == len(special["layers"]) * n_heads
    for k, row in enumerate(per_head):
        layer, head = int(row["layer"]) - 1, int(row["head"]) - 1
        assert (layer, head) == divmod(k, n_heads)
        assert all(close(row[key], special["heads"][key][layer][head]) for key in STAT_KEYS), row
        assert row["behaviour"] == special["head_map"]["behaviour"][k]
    norm_layers = tables["special/Norm shares and value norms per layer (mean over heads)"]
    assert len(norm_layers) == len(special["norm_layers"])
    for row, expected in zip(norm_layers, special["norm_layers"]):
        assert all(close(row[key], expected[key]) for key in NORM_KEYS), row
    norm_heads = tables["special/Norm shares and value norms per head"]
    assert len(norm_heads) == len(per_head)
    for row in norm_heads:
        layer, head = int(row["layer"]) - 1, int(row["head"]) - 1
        assert all(close(row[key], special["norm_heads"][key][layer][head]) for key in NORM_KEYS), row

    positions = cli_json("positions", "--corpus", corpus, "--limit", str(N_INPUTS), "--model", model, "--json")
    max_offset = max(np.abs(positions["histograms"]["offsets"]))
    for l, row in enumerate(tables["positions/Per layer (mean over heads; correlations: median)"]):
        assert close(row["attention_center_of_mass"], positions["attention_center_of_mass"][l], max_offset)
        assert close(row["attribution_center_of_mass"], positions["attribution_center_of_mass"][l], max_offset)
        for name, values in positions["median_correlation"].items():
            assert close(row[f"median_{name}"], values[l], 1)
    for row in tables["positions/Per head"]:
        layer, head = int(row["layer"]) - 1, int(row["head"]) - 1
        assert close(
            row["attention_center_of_mass"], positions["attention_head_center_of_mass"][layer][head], max_offset
        )
        for name, values in positions["correlation"].items():
            assert close(row[name], values[layer][head], 1)

    aggregation = cli_json("aggregation", "--corpus", corpus, "--limit", str(N_INPUTS), "--model", model, "--json")
    assert max(np.abs(aggregation["histograms"]["offsets"])) == max_offset
    agreement = tables["aggregation/Agreement with layer-output attribution per layer (mean row correlation)"]
    centres = tables["aggregation/Centre of mass per layer"]
    assert len(agreement) == len(centres) == len(special["layers"])
    for l, (row, centre) in enumerate(zip(agreement, centres)):
        for measure in aggregation["measures"]:
            assert close(row[f"pearson_{measure}"], aggregation["pearson"][measure][l], 1)
            assert close(row[f"spearman_{measure}"], aggregation["spearman"][measure][l], 1)
        for name, values in aggregation["center_of_mass"].items():
            assert close(centre[f"center_of_mass_{name}"], values[l], max_offset)

    deps = cli_json(
        "deps", "--conllu", conllu, "--limit", str(N_INPUTS), "--min-count", str(MIN_COUNT), "--model", model, "--json"
    )
    rows = tables["deps/Best head per relation against the best fixed offset"]
    assert [r["relation"] for r in rows] == [r["relation"] for r in deps["rows"]]
    for row, expected in zip(rows, deps["rows"]):
        assert int(row["layer"]) == expected["layer"] + 1 and int(row["head"]) == expected["head"] + 1
        assert row["direction"] == expected["direction"]
        assert int(row["count"]) == expected["count"]
        assert int(row["baseline_offset"]) == expected["baseline_offset"]
        assert close(row["accuracy"], expected["accuracy"])
        assert close(row["baseline_accuracy"], expected["baseline_accuracy"])

    probe = cli_json("probe", "--train", train, "--test", conllu, "--limit", str(N_INPUTS), "--model", model, "--json")
    (row,) = tables["probe/Probe against the best single head and fixed offset"]
    for key in ("uas", "best_head_accuracy", "baseline_accuracy"):
        assert close(row[key], probe[key])
    assert (int(row["best_head_layer"]) - 1, int(row["best_head_head"]) - 1) == (
        probe["best_head"]["layer"],
        probe["best_head"]["head"],
    )
    assert row["best_head_direction"] == probe["best_head"]["direction"]
    assert [
        int(row[k]) for k in ("baseline_offset", "n_train", "n_test", "n_words", "n_skipped_train", "n_skipped_test")
    ] == [probe[k] for k in ("baseline_offset", "n_train", "n_test", "n_words", "n_skipped_train", "n_skipped_test")]
    relations = tables["probe/UAS per relation"]
    assert [r["relation"] for r in relations] == list(probe["uas_by_relation"])
    for row in relations:
        expected = probe["uas_by_relation"][row["relation"]]
        assert int(row["count"]) == expected["count"]
        assert all(close(row[k], expected[k]) for k in ("uas", "best_head_accuracy", "baseline_accuracy")), row


@pytest.mark.slow
def test_page_is_self_contained(report_page):
    page = report_page[0].read_text()
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I)
    assert not re.search(r"<link[^>]*\shref\s*=", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page, re.I)
    assert page.count(plotly_js()[:300]) == 1  # plotly.js inlined once for the whole file
    figures = page.count("Plotly.newPlot(")
    assert (
        figures == 21
    )  # special 7 (with the head map and norms), positions 5, aggregation 2, importance 3, deps 2, probe 2
    assert page.count('class="plotly-graph-div"') == figures
    for part in report_parts():
        assert f"<section id='{part}'>" in page
    assert "docs/METHODS.md#2-share-of-attention-to-a-class-clark-fig-2" in page
    assert "SHA-1" in page and "attnlib 0.1.0" in page


@pytest.mark.slow
def test_model_compared_with_itself_differs_nowhere(tiny_model_dir, files, one_thread):
    corpus, conllu, train = files
    model = str(tiny_model_dir)
    options = ReportOptions(limit=N_INPUTS, min_count=MIN_COUNT)
    report = run_report(model, corpus, conllu, compare=model, options=options, train_path=train)
    assert len(report.models) == 2
    differences = report.differences()
    assert set(differences) == {"special", "positions", "aggregation", "importance", "deps", "probe"}
    for difference in differences.values():
        assert difference is not None and difference.size == 0.0
    for results in report.results.values():
        first, second = results
        for title, frame in first.tables.items():
            assert frame.drop(columns="model").equals(second.tables[title].drop(columns="model"))
    page = render_report(report)
    assert page.count("largest difference:") == len(report_parts())  # one line per part
    assert page.count(plotly_js()[:300]) == 1


@pytest.mark.slow
def test_positions_and_aggregation_share_each_inputs_attribution(tiny_model, monkeypatch, one_thread):
    import attnlib.present.report as report

    calls = []
    real = report.hidden_token_attribution

    def counted(lm, result, *args, **kwargs):
        calls.append(result.n)
        return real(lm, result, *args, **kwargs)

    monkeypatch.setattr(report, "hidden_token_attribution", counted)
    inputs = [CorpusInput(line) for line in CLASSROOM_SINGLE.read_text().splitlines()[:3]]
    parts = [p for p in report.REPORT_PARTS if p.name in ("positions", "aggregation")]
    results, timings = run_parts(tiny_model, {"corpus": inputs}, ReportOptions(probes=2), parts)
    assert [r.part for r in results] == ["positions", "aggregation"]
    assert len(calls) == 3  # one attribution per input, not one per part
    assert [(t.source, t.parts, t.n_inputs) for t in timings] == [("corpus", ["positions", "aggregation"], 3)]
    assert results[0].result.n_inputs == results[1].result.n_inputs == 3
