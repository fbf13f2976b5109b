"""A model without attention layers (Mamba, RWKV: support/models.py NO_ATTENTION_KINDS) is refused by every command
in one `error:` line that says so, exit 2, before its weights are read; the app's sidebar says the same sentence
(app/test_bad_input.py)."""

from __future__ import annotations

import argparse

import pytest

from attnlib.cli.entry import build_parser
from support.cli import run_cli
from support.runs import command_line, small_files

NO_ATTENTION = "has no attention layers"
COMMANDS = sorted(next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_refuses_a_model_without_attention_in_one_line(no_attention_dir, command, tmp_path):
    ran = run_cli(*command_line(command, str(no_attention_dir), **small_files(tmp_path).get(command, {})), "--json")
    assert NO_ATTENTION in ran.error and f"'{no_attention_dir}'" in ran.error, ran
