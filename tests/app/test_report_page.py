"""The Report page: it builds a self-contained report of two models (the report itself: present/test_report.py)."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import ROOT
from attnlib.views.plotly_js import plotly_js
from support.models import bert_tokenizer, tiny_config_with_vocab
from support.report import read_tables, report_parts


@pytest.fixture(scope="module")
def deeper_bert_dir(tmp_path_factory):
    """A second tiny random BERT (3 layers, another seed) to compare with."""
    import torch
    from transformers import AutoModelForMaskedLM

    tokenizer = bert_tokenizer()
    config = tiny_config_with_vocab("bert", len(tokenizer))
    config.num_hidden_layers = 3
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("deeper-bert")
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_page_builds_a_self_contained_report_of_both_models(tiny_model_dir, deeper_bert_dir, one_thread):
    at = AppTest.from_file(str(ROOT / "app_pages" / "report" / "page.py"), default_timeout=600)
    at.session_state["model_name"] = str(tiny_model_dir)
    at.session_state["compare_name"] = str(deeper_bert_dir)
    at.run()
    assert not at.exception
    at.number_input(key="report_limit").set_value(3)
    at.selectbox(key="report_trees").select("UD English EWT dev (gold)")
    at.selectbox(key="report_train").select("UD English EWT test (gold)")
    at.run()
    assert [b.label for b in at.button] == ["Build the report"]
    at.button[0].click().run()
    assert not at.exception
    _, page, seconds = at.session_state["_report_built"]
    assert seconds > 0
    assert any(s.value.startswith("The report is ready:") and " MB, built in " in s.value for s in at.success)
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I)
    assert not re.search(r"<link[^>]*\shref\s*=", page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page, re.I)
    assert page.count(plotly_js()[:300]) == 1
    title = f"Attention report: {tiny_model_dir} vs {deeper_bert_dir}"
    assert f"<title>{title}</title>" in page
    for part in report_parts():
        assert f"<section id='{part}'>" in page
    tables = read_tables(page)
    layers = [(r["model"], int(r["layer"])) for r in tables["special/Per layer (mean over heads)"]]
    assert layers == [(str(tiny_model_dir), 1), (str(tiny_model_dir), 2)] + [
        (str(deeper_bert_dir), l) for l in (1, 2, 3)
    ]
    (first, second) = tables["probe/Probe against the best single head and fixed offset"]
    for row in (first, second):  # the limit of 3 sentences reached the probe (kept or skipped for their length)
        assert int(row["n_test"]) + int(row["n_skipped_test"]) == int(row["n_train"]) + int(row["n_skipped_train"]) == 3
    assert (first["model"], second["model"]) == (str(tiny_model_dir), str(deeper_bert_dir))
    assert page.count("largest difference:") == len(report_parts())  # one line per part
