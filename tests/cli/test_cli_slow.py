"""`python -m attnlib`: attention JSON equal to transformers' own attentions; one-line errors, exit 2; NaN as null.

The slow tier; test_cli.py holds the quick tests."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnlib.core.model import bundled_model_path
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, ROOT

pytestmark = pytest.mark.slow


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnlib", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_attention_json_equals_transformers():
    from transformers import AutoModel, AutoTokenizer

    out = _cli("attention", "--text", "The cat sat on the mat.", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    path = str(bundled_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    enc = tok("The cat sat on the mat.", return_tensors="pt")
    with torch.no_grad():
        ref = torch.stack(model(**enc, output_attentions=True).attentions)[:, 0].numpy()
    assert data["tokens"] == tok.convert_ids_to_tokens(enc["input_ids"][0])
    assert data["segments"] == [0] * len(data["tokens"])
    np.testing.assert_allclose(np.array(data["attentions"]), ref, atol=1e-6)


@pytest.mark.slow
def test_attention_pair_segments():
    data = json.loads(_cli("attention", "--text", "I went.", "--pair", "You stayed.", "--json").stdout)
    assert data["segments"] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert np.array(data["attentions"]).shape == (6, 12, 9, 9)


@pytest.mark.slow
def test_user_errors_exit_2_with_one_line():
    out = _cli("attention", "--text", "   ", "--json")
    assert out.returncode == 2 and out.stderr.strip() == "error: Sentence A is empty: type a sentence."
    out = _cli("attention", "--text", "x", "--model", str(ROOT / "data"), "--json")
    assert out.returncode == 2 and "config.json" in out.stderr and "Traceback" not in out.stderr


NO_PLOTLY = """
import importlib.abc, sys

class NoPlotly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("plotly", "streamlit"):
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, NoPlotly())
"""


def _without_plotly(code: str, *argv: str) -> subprocess.CompletedProcess:
    """Python code run in a process where importing plotly or streamlit fails."""
    return subprocess.run(
        [sys.executable, "-c", NO_PLOTLY + code, *argv], cwd=ROOT, capture_output=True, text=True, timeout=900
    )


@pytest.mark.slow
def test_every_command_but_the_report_runs_without_plotly(tmp_path):
    """Each analysis's command on a tiny input, in a Python where `import plotly` (and streamlit) fails."""
    pud = ROOT / "data" / "ud" / "UD_English-PUD" / "en_pud-ud-test.conllu"
    runs = [
        ["attention", "--text", "A cat."],
        ["norms", "--text", "A cat."],
        ["hta", "--text", "A cat.", "--mode", "estimate", "--probes", "1"],
        ["special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--head-map", "--norms"],
        ["deps", "--conllu", str(EWT_DEV), "--limit", "2"],
        ["positions", "--corpus", str(CLASSROOM_SINGLE), "--limit", "1", "--probes", "1"],
        ["aggregation", "--corpus", str(CLASSROOM_SINGLE), "--limit", "1", "--probes", "1"],
        ["probe", "--train", str(pud), "--test", str(EWT_DEV), "--limit", "3"],
    ]
    code = "from attnlib.cli.entry import main\nimport json, sys\nfor argv in json.loads(sys.argv[1]):\n"
    code += "    assert main([*argv, '--json']) == 0, argv\n"
    assert _without_plotly("import plotly").returncode != 0  # the hook works
    out = _without_plotly(code, json.dumps(runs))
    assert out.returncode == 0, out.stderr[-2000:]
    printed = [json.loads(line) for line in out.stdout.splitlines()]
    assert [set(p) >= {"tokens"} for p in printed[:3]] == [True] * 3 and len(printed) == len(runs)
    report = _without_plotly("from attnlib.cli.entry import main\nmain(['report', '--help'])")
    assert report.returncode == 0 and "--compare" in report.stdout  # its flags, at least, need no plotly
