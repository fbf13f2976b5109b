"""The report: its tables equal each command's JSON, it is offline and self-contained, and a model equals itself."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from attnlib.analyses.attention import AttentionOptions
from attnlib.analyses.base import Analysis
from attnlib.analyses.deps import CLARK_TABLE1
from attnlib.cli.entry import main
from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import ATTENTION
from attnlib.present.comparison import Difference, largest_difference
from attnlib.present.report import PartResult, ReportOptions, ReportPart, methods_anchor, methods_sections, run_parts
from attnlib.present.tables import paper_rows


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
    assert sorted(sections) == list(range(1, 20))
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


def test_report_without_any_input_is_a_user_error(tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.startswith("error: give --corpus, --conllu or both.")
    assert not (tmp_path / "r.html").exists()
