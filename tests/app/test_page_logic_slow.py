"""Logic that moved from the pages into the library: exact-attribution cost, the attention export table, the
special-token computation shared by page and CLI, and the choice of a shipped precomputed result.

The slow tier; test_page_logic.py holds the quick tests."""

from __future__ import annotations

import json

import pytest

from attnlib.cli import entry as cli
from attnlib.stats.attribution import exact_seconds

pytestmark = pytest.mark.slow


@pytest.mark.slow
def test_hta_exact_states_its_estimate_first(minilm, capsys):
    assert cli.main(["hta", "--text", "Birds sing.", "--mode", "exact", "--json"]) == 0
    captured = capsys.readouterr()
    n = len(json.loads(captured.out)["tokens"])
    assert f"exact attribution of {n} tokens: about {exact_seconds(minilm.facts, n):.0f} s" in captured.err
