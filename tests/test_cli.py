"""`python -m attnlib attention`: JSON equal to transformers' own attentions; clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import torch

from attnlib.model import bundled_model_path
from attnlib.shipped import ROOT


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnlib", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


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


def test_attention_pair_segments():
    data = json.loads(_cli("attention", "--text", "I went.", "--pair", "You stayed.", "--json").stdout)
    assert data["segments"] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert np.array(data["attentions"]).shape == (6, 12, 9, 9)


def test_user_errors_exit_2_with_one_line():
    out = _cli("attention", "--text", "   ", "--json")
    assert out.returncode == 2 and out.stderr.strip() == "error: Sentence A is empty: type a sentence."
    out = _cli("attention", "--text", "x", "--model", str(ROOT / "data"), "--json")
    assert out.returncode == 2 and "config.json" in out.stderr and "Traceback" not in out.stderr
