"""The `roles` command's own rules: it runs on the model alone and prints its JSON; a bad value (a flag's, a probe too
long for the model, a text and a corpus at once) is one `error:` line and exit 2."""

from __future__ import annotations

import json

import attnlib
from support.cli import run_cli
from support.models import save_tiny


def test_roles_command_json_and_bad_values(tmp_path, one_thread):
    folder = str(save_tiny("gpt2", tmp_path / "gpt2"))
    out = tmp_path / "roles.json"
    ran = run_cli("roles", "--model", folder, "--sequences", "1", "--repeat-length", "4", "--json", "--out", str(out))
    assert ran.code == 0 and ran.json["probe"]["repeat_length"] == 4 and ran.json["detect"] is None
    back = attnlib.load(out)  # the result file the app opens
    assert json.loads(json.dumps(back.to_json())) == ran.json and back.options.repeat_length == 4
    assert back.corpus["n_inputs"] == 0
    shortened = run_cli("roles", "--model", folder, "--sequences", "1", "--json")  # s = 50 does not fit 64 tokens
    assert shortened.json["probe"]["repeat_length"] == 32 == len(shortened.json["probe"]["tokens"][0]) // 2
    assert "s = 32 tokens 2 times (not 50)" in shortened.err and "s = 32" in shortened.json["notes"]["probe"]
    assert "--repeats" in run_cli("roles", "--model", folder, "--repeats", "1", "--json").error
    assert "at most 64 tokens" in run_cli("roles", "--model", folder, "--repeats", "65", "--json").error
    assert "not allowed with" in run_cli("roles", "--model", folder, "--text", "a", "--corpus", "b").error
