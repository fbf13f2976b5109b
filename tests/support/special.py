"""What test_special.py and test_special_slow.py both use."""

from __future__ import annotations

import json

from attnlib import cli


def run_cli(capsys, *argv: str) -> dict:
    assert cli.main(["special", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)
