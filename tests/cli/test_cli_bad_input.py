"""Bad input on the command line: one `error:` line and exit 2, never a traceback; unusual and long text still runs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from support.bad_input import (
    CONLLU_BAD,
    EMPTY_TEXTS,
    INVISIBLE_TEXTS,
    LONG_LINE_CORPUS,
    LONG_TEXT,
    NOT_UTF8,
    ODD_TEXTS,
    VALID,
)
from support.cli import run_cli


def _one_clear_line(err: str) -> str:
    """The command line's error: one line starting with 'error:', never a traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    "text", list(EMPTY_TEXTS.values()) + list(INVISIBLE_TEXTS.values()), ids=list(EMPTY_TEXTS) + list(INVISIBLE_TEXTS)
)
def test_cli_refuses_empty_text(text):
    ran = run_cli("attention", "--text", text, "--json")
    assert ran.code == 2
    assert re.match(r"error: Sentence A (is empty|has nothing the model can read)", _one_clear_line(ran.err))


@pytest.mark.parametrize("text", list(ODD_TEXTS.values()) + [LONG_TEXT], ids=list(ODD_TEXTS) + ["5000 words"])
def test_cli_runs_unusual_and_long_text(tiny_model_dir, text):
    ran = run_cli("attention", "--text", text, "--model", str(tiny_model_dir), "--json")
    assert ran.code == 0, ran.err
    n = len(ran.json["tokens"])
    assert np.array(ran.json["attentions"]).shape[-2:] == (n, n)
    assert ran.json["truncated"] == (text == LONG_TEXT)


@pytest.mark.parametrize("tiny_model_dir", ["roberta"], indirect=True)
def test_cli_roberta(tiny_model_dir):
    ran = run_cli(
        "attention",
        "--text",
        "I went to the store.",
        "--pair",
        "I bought strawberries.",
        "--model",
        str(tiny_model_dir),
        "--json",
    )
    assert ran.code == 0, ran.err
    assert ran.json["tokens"][0] == "<s>" and ran.json["tokens"][-1] == "</s>" and ran.json["segments"][-1] == 1


def test_cli_model_errors(t5_dir, monkeypatch):
    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(model, "_is_cached", lambda repo_id, revision=None: False)
    ran = run_cli("attention", "--text", VALID, "--model", "no-such-user/no-such-model-xyz", "--json")
    assert ran.code == 2 and "not reachable" in _one_clear_line(ran.err)
    ran = run_cli("attention", "--text", VALID, "--model", str(t5_dir), "--json")
    assert ran.code == 2 and "is not the model's own" in _one_clear_line(ran.err)


@pytest.mark.parametrize("case", CONLLU_BAD, ids=CONLLU_BAD.keys())
def test_cli_malformed_conllu(case, tmp_path):
    text, line, what = CONLLU_BAD[case]
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    ran = run_cli("deps", "--conllu", str(path), "--json")
    assert ran.code == 2 and f"bad.conllu, line {line}: " in _one_clear_line(ran.err) and what in ran.err
    ran = run_cli("special", "--corpus", str(path), "--json")
    assert ran.code == 2 and f"line {line}: " in _one_clear_line(ran.err)


def test_cli_not_utf8_and_empty_corpus(tmp_path):
    for name, data, message in (
        ("latin1.txt", NOT_UTF8, "not a UTF-8 text file"),
        ("latin1.conllu", NOT_UTF8, "not a UTF-8 text file"),
        ("blank.txt", b"\n \n", "no usable input"),
        ("blank.conllu", b"\n\n", "no"),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        command = ["deps", "--conllu"] if name.endswith(".conllu") else ["special", "--corpus"]
        ran = run_cli(*command, str(path), "--json")
        assert ran.code == 2 and message in _one_clear_line(ran.err), (name, ran.err)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["special", "positions"])
def test_cli_long_corpus_line_is_truncated_and_counted(tiny_model_dir, tmp_path, command):
    path = tmp_path / "long.txt"
    path.write_text(LONG_LINE_CORPUS)
    extra = ["--probes", "1"] if command == "positions" else []
    ran = run_cli(command, "--corpus", str(path), "--model", str(tiny_model_dir), *extra, "--json")
    assert ran.code == 0, ran.err
    assert ran.json["n_inputs"] == 3 and ran.json["n_truncated"] == 1
