"""Logic that moved from the pages into the library: exact-attribution cost, the attention export table, the
special-token computation shared by page and CLI, and the choice of a shipped precomputed result."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import numpy as np
import pytest

from attnlib.analyses.positions import POSITIONS, PositionOptions
from attnlib.analyses.registry import analyse
from attnlib.core.corpus import read_text_corpus
from attnlib.core.model import DEFAULT_MODEL
from attnlib.present.export import attention_table
from attnlib.results.precomputed import shipped_result
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE
from attnlib.stats.hta import EXACT_SECONDS_AT_34_TOKENS, exact_seconds
from support.cli import cli_json, run_cli


def test_exact_seconds_follows_the_formula(minilm):
    facts = minilm.facts  # hidden 384, 6 layers: the benchmark's model
    assert exact_seconds(facts, 34) == pytest.approx(EXACT_SECONDS_AT_34_TOKENS)
    assert exact_seconds(facts, 68) == pytest.approx(4 * 32)  # tokens squared
    base = replace(facts, hidden_size=768, n_layers=12)  # bert-base: 2^3 for hidden, 2 for layers
    assert exact_seconds(base, 34) == pytest.approx(32 * 8 * 2)
    assert exact_seconds(replace(facts, n_layers=3), 17) == pytest.approx(32 * 0.25 * 0.5)


def test_attention_table_rows_by_hand():
    maps = np.arange(2 * 2 * 3, dtype=np.float32).reshape(2, 2, 3) / 100  # [heads, rows, cols]
    table = attention_table(maps, layer=4, heads=[1, 5], rows=[0, 2], cols=[0, 1, 3], labels=["a", "b", "c", "d"])
    assert len(table) == 12
    first, last = table.iloc[0], table.iloc[-1]
    assert (first["head"], first.layer_head, first.query_index, first.key_index, first.weight) == (1, "5-2", 0, 0, 0)
    assert (last["head"], last.layer_head, last.query, last.key, last.weight) == (5, "5-6", "c", "d", 0.11)
    row = table[(table["head"] == 5) & (table.query_index == 0) & (table.key_index == 1)].iloc[0]
    assert row.weight == pytest.approx(maps[1, 0, 1]) and row.key == "b"
    assert set(table.layer) == {4}


def test_special_tokens_is_what_the_cli_prints(minilm):
    inputs = read_text_corpus(CLASSROOM_PAIRS)[:4]
    seen = []
    run = analyse(
        "special", minilm, corpus=inputs, all_punct=True, head_map=True, progress=lambda d, t: seen.append(t)
    ).result
    special, hm = run.special, run.head_map
    assert seen and seen[-1] == 4
    argv = ["special", "--corpus", str(CLASSROOM_PAIRS), "--limit", "4", "--all-punct", "--head-map", "--json"]
    out = cli_json(*argv)
    assert out["n_inputs"] == special.n_inputs == 4
    np.testing.assert_allclose(np.array(out["heads"]["sep"]), special.heads["sep"], atol=1e-6)
    assert hm is not None and out["head_map"]["behaviour"] == list(hm.labels)
    no_map = analyse("special", minilm, corpus=inputs, all_punct=True).result
    assert no_map.head_map is None and no_map.norms is None
    np.testing.assert_allclose(no_map.special.heads["punct"], special.heads["punct"], atol=1e-6)


SHIPPED_OPTIONS = PositionOptions()  # estimate mode, 12 probes, seed 0, nothing dropped


def test_shipped_result_needs_every_match():
    sha1 = hashlib.sha1(CLASSROOM_SINGLE.read_bytes()).hexdigest()
    n = len(read_text_corpus(CLASSROOM_SINGLE))
    record = shipped_result("positions", DEFAULT_MODEL, sha1, n, SHIPPED_OPTIONS)
    assert record is not None and record.command == "positions" and record.corpus["sha1"] == sha1
    result = POSITIONS.from_record(record)
    assert result.n_inputs == n and result.options.drop_special is False
    dropped = shipped_result("positions", DEFAULT_MODEL, sha1, n, replace(SHIPPED_OPTIONS, drop_special=True))
    assert dropped is not None and POSITIONS.from_record(dropped).options.drop_special is True
    misses = [
        ("positions", "bert-base-uncased", sha1, n, SHIPPED_OPTIONS),
        ("positions", DEFAULT_MODEL, "0" * 40, n, SHIPPED_OPTIONS),
        ("positions", DEFAULT_MODEL, sha1, n - 1, SHIPPED_OPTIONS),
        ("positions", DEFAULT_MODEL, sha1, n, replace(SHIPPED_OPTIONS, probes=13)),
        ("positions", DEFAULT_MODEL, sha1, n, replace(SHIPPED_OPTIONS, seed=1)),
        ("special", DEFAULT_MODEL, sha1, n, SHIPPED_OPTIONS),
    ]
    assert [shipped_result(*args) for args in misses] == [None] * len(misses)


# ---------- slow tests


@pytest.mark.slow
def test_hta_exact_states_its_estimate_first(minilm):
    ran = run_cli("hta", "--text", "Birds sing.", "--mode", "exact", "--json")
    assert ran.code == 0, ran.err
    captured = ran
    n = len(json.loads(captured.out)["tokens"])
    assert f"exact attribution of {n} tokens: about {exact_seconds(minilm.facts, n):.0f} s" in captured.err
