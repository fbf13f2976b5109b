"""Each command's top-level JSON keys (support/json_keys.py), as the issues that asked for them specified: a guard
against a key renamed or dropped by accident. Tiny inputs, the default model (gradient: a tiny BERT with a masked-LM
head, since the default model has none; retrieval: a tiny GPT-2, a decoder)."""

from __future__ import annotations

import pytest

from attnlib.analyses.registry import ANALYSES
from attnlib.core.model import DEFAULT_MODEL
from support.cli import cli_json
from support.json_keys import KEYS, NESTED, TEST_KEYS
from support.runs import INPUTS, KINDS, command_line


def test_every_command_is_held():
    assert set(KEYS) == set(ANALYSES) == set(INPUTS)


@pytest.mark.parametrize(("name", "tiny_model_dir"), [(name, KINDS.get(name, "bert")) for name in sorted(KEYS)],
                         indirect=["tiny_model_dir"])  # fmt: skip
def test_top_level_keys(name, tiny_model_dir, one_thread):
    model = str(tiny_model_dir) if name in ("gradient", *KINDS) else DEFAULT_MODEL
    printed = cli_json(*command_line(name, model), "--json")
    assert set(printed) == KEYS[name]
    for (command, key), below in NESTED.items():
        if command == name:
            assert set(printed[key]) == below
    if name == "retrieval":
        assert printed["tests"] and all(set(test) == TEST_KEYS for test in printed["tests"])
