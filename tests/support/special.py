"""The `special` command run in-process (analyses/test_special.py)."""

from __future__ import annotations

import json

from attnlib.cli import entry as cli


def run_cli(capsys, *argv: str) -> dict:
    assert cli.main(["special", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)
