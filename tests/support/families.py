"""The text pair and the command runner of the family tests (core/test_families.py)."""

from __future__ import annotations


def _cli(capsys, argv: list[str]) -> dict:
    """Run one command in-process; it must succeed and print one JSON object."""
    import json

    from attnlib.cli.entry import main

    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


TEXT_A, TEXT_B = "The cat sat on the mat because it was warm.", "It slept."
