"""`python -m attnlib`: attention JSON equal to transformers' own attentions; one-line errors, exit 2; NaN printed as null."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnlib.cli import entry as cli
from attnlib.core.model import bundled_model_path
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, ROOT
from support.cli import cli_json, cli_process, run_cli

CORPUS_COMMANDS = {
    "special": ["special", "--corpus", str(CLASSROOM_SINGLE)],
    "positions": ["positions", "--corpus", str(CLASSROOM_SINGLE)],
    "deps": ["deps", "--conllu", str(EWT_DEV)],
}


@pytest.mark.parametrize("command", sorted(CORPUS_COMMANDS))
@pytest.mark.parametrize(
    ("option", "value"), [("--limit", "0"), ("--limit", "-3"), ("--batch-size", "0"), ("--limit", "two")]
)
def test_corpus_commands_refuse_limits_and_batch_sizes_below_one(command, option, value):
    line = run_cli(*CORPUS_COMMANDS[command], f"{option}={value}", "--json").error
    assert option in line and ("must be at least 1" in line or "whole number" in line)
    assert "usage:" not in line


@pytest.mark.parametrize(
    "argv",
    [
        [],  # no command
        ["nonsense"],  # unknown command
        ["special"],  # --corpus missing
        ["special", "--corpus", str(CLASSROOM_SINGLE), "--engine", "spark"],  # not a choice
        ["attention", "--text", "x", "--frobnicate"],  # unknown option
        ["hta", "--text", "x", "--probes", "0"],
        ["special", "--corpus", str(CLASSROOM_SINGLE), "--workers", "0"],
        ["special", "--corpus", str(CLASSROOM_SINGLE), "--cpus-per-worker", "-1"],
    ],
)
def test_argparse_errors_are_one_line_and_exit_2(argv):
    assert run_cli(*argv, "--json").error


def test_a_center_of_mass_without_data_prints_null(tmp_path):
    corpus = tmp_path / "long.txt"
    corpus.write_text(" ".join(["word"] * 40) + "\n")  # longer than the head dimension (32), so nothing is kept
    argv = ["positions", "--corpus", str(corpus), "--identifiable-only", "--probes", "1", "--json"]
    out = run_cli(*argv).out

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON")

    data = json.loads(out, parse_constant=refuse)  # strict: NaN or Infinity would fail here
    assert data["n_inputs"] == 0 and data["n_skipped_longer_than_head_dim"] == 1
    assert data["attention_center_of_mass"] == [None] * 6
    assert np.array(data["attention_head_center_of_mass"]).shape == (6, 12)
    assert all(v is None for row in data["attention_head_center_of_mass"] for v in row)


def test_run_exits_with_the_status_of_main(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["attnlib", "attention", "--text", "   ", "--json"])
    with pytest.raises(SystemExit) as exit_info:
        cli.run()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "error: Sentence A is empty: type a sentence."


def test_commands_import_at_module_level():
    """No import inside a function of the command line (a lazy import there used to dodge an import cycle), but for
    the views extra (plotly), which only `report` needs and every other command runs without."""
    import ast

    def views_extra(node: ast.Import | ast.ImportFrom) -> bool:
        names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [alias.name for alias in node.names]
        return all(name.startswith("attnlib.views") for name in names)

    files = sorted((ROOT / "attnlib" / "cli").rglob("*.py"))
    inner = [
        f"{path.name}:{ast.unparse(node)}"
        for path in files
        for func in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(func, ast.FunctionDef)
        for node in ast.walk(func)
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not views_extra(node)
    ]
    assert len(files) >= 4 and inner == []


def test_the_library_imports_nothing_above_it():
    """Every library module (all of attnlib but the command line, attnlib.cli, and attnlib.views) imported in a
    fresh process loads neither the command line, the views, Streamlit, Plotly nor the app's `ui`."""
    code = """
import importlib, pathlib, sys, attnlib
above = ("attnlib.cli", "attnlib.views", "attnlib.__main__")
root = pathlib.Path(attnlib.__file__).parent
modules = (".".join(("attnlib", *p.relative_to(root).with_suffix("").parts)) for p in root.rglob("*.py"))
names = [m.removesuffix(".__init__") for m in modules if not m.startswith(above)]
for name in names:
    importlib.import_module(name)
loaded = sorted(m for m in sys.modules if m.startswith(above) or m.split(".")[0] in ("streamlit", "plotly", "ui"))
print(len(names), loaded)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    count, loaded = out.stdout.split(" ", 1)
    assert int(count) >= 30 and loaded.strip() == "[]"


# ---------- slow tests


@pytest.mark.slow
def test_attention_json_equals_transformers():
    from transformers import AutoModel, AutoTokenizer

    data = cli_json("attention", "--text", "The cat sat on the mat.", "--json")
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
    data = cli_json("attention", "--text", "I went.", "--pair", "You stayed.", "--json")
    assert data["segments"] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert np.array(data["attentions"]).shape == (6, 12, 9, 9)


@pytest.mark.slow
def test_user_errors_exit_2_with_one_line():
    """The console entry point (`python -m attnlib`) in its own process: exit status 2 and the one line."""
    assert cli_process("attention", "--text", "   ", "--json").error == "error: Sentence A is empty: type a sentence."
    out = cli_process("attention", "--text", "x", "--model", str(ROOT / "data"), "--json")
    assert "config.json" in out.error and "Traceback" not in out.err


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
