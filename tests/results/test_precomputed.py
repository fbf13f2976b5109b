"""Shipped precomputed results: the index, the lookup, freshness, and each file against a fresh computation."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from attnlib.analyses.deps import DepsOptions
from attnlib.analyses.positions import PositionOptions
from attnlib.analyses.probe import ProbeOptions
from attnlib.analyses.roles import RolesOptions
from attnlib.analyses.special import SpecialOptions
from attnlib.cli.entry import parse_command
from attnlib.core.model import DEFAULT_MODEL, TRAINED_MODEL, checkpoints_of
from attnlib.results.files import RESULT_FORMAT, read_result_file, text_pair_sha1
from attnlib.results.precomputed import (
    EXAMPLE_COMMAND,
    INDEX,
    TOLERANCES,
    result_differences,
    round_floats,
    shipped_example,
    shipped_result,
    stale_reasons,
)
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV, EWT_TEST, PRECOMPUTED, PUD_TEST, ROOT
from support.cli import run_cli
from support.precomputed import ENTRIES

pytestmark = pytest.mark.usefixtures("one_thread")
POSITION_DEFAULTS = {"mode": "estimate", "probes": 12, "seed": 0, "drop_special": False, "identifiable_only": False}
HEAD_MAP = SpecialOptions(head_map=True)


def sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def n_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def n_sentences(path: Path) -> int:
    """Sentences of a CoNLL-U file, counted independently of the reader: the `# text =` comments (one per sentence)."""
    return sum(line.startswith("# text =") for line in path.read_text(encoding="utf-8").splitlines())


# ------------------------------------------------------------------------------------------------- helpers by hand


def test_round_floats_keeps_six_significant_digits():
    data = {"a": [0.123456789, 123456.789, -0.000123456789, 0.0, 7, None, "x", True], "b": {"c": 1e-12 * 1.23456789}}
    assert round_floats(data) == {
        "a": [0.123457, 123457.0, -0.000123457, 0.0, 7, None, "x", True],
        "b": {"c": 1.23457e-12},
    }


def test_result_differences_by_hand():
    a = {"created": "yesterday", "result": {"x": [1.0, 2.0], "names": ["a"]}}
    assert result_differences(a, {"created": "today", "result": {"x": [1.00001, 2.0], "names": ["a"]}}) == []
    assert result_differences(a, {"created": "", "result": {"x": [1.01, 2.0], "names": ["a"]}}) == [
        ".result.x[0]: 1.0 != 1.01"
    ]
    assert result_differences(a, {"created": "", "result": {"x": [1.0], "names": ["a"]}}) == [".result.x: 2 != 1 items"]
    assert result_differences(a, {"created": "", "result": {"x": [1.0, 2.0], "names": ["b"]}}) == [
        ".result.names[0]: 'a' != 'b'"
    ]
    assert result_differences({"x": 1}, {"y": 1}) == [": keys ['x', 'y'] differ"]
    assert result_differences({"x": True}, {"x": 1}) == [".x: True != 1"]
    assert result_differences({"x": 1.0}, {"x": 1.0005}, atol=1e-3) == []


def test_text_pair_sha1_is_the_hash_of_the_corpus_line():
    assert text_pair_sha1("A b.", "C d.") == hashlib.sha1(b"A b.\tC d.").hexdigest()
    assert text_pair_sha1("A b.", None) == text_pair_sha1("A b.", "") == hashlib.sha1(b"A b.").hexdigest()


def test_parse_command_refuses_unknown_commands_and_options():
    assert parse_command(["special", "--corpus", "x.txt", "--head-map"]).head_map is True  # type: ignore[union-attr]
    assert parse_command(["no-such-command", "--corpus", "x.txt"]) is None
    assert parse_command(["special", "--corpus", "x.txt", "--no-such-option"]) is None


# --------------------------------------------------------------------------------------------- what ships, and how


def test_every_corpus_page_need_ships():
    corpora = {
        "classroom-single": CLASSROOM_SINGLE,
        "classroom-pairs": CLASSROOM_PAIRS,
        "ewt-dev": EWT_DEV,
        "ewt-test": EWT_TEST,
        "pud-test": PUD_TEST,
    }
    for key, path in corpora.items():
        e = ENTRIES[f"special_{key}"]
        assert (e.command, e.model, e.corpus["sha1"], e.options["head_map"]) == (
            "special",
            DEFAULT_MODEL,
            sha1(path),
            True,
        )
        if key.startswith("classroom"):
            assert e.corpus["n_inputs"] == n_lines(path)
            for name, drop in ((f"positions_{key}", False), (f"positions-drop-special_{key}", True)):
                p = ENTRIES[name]
                assert p.corpus["n_inputs"] == n_lines(path)
                assert (p.options, p.limit) == ({**POSITION_DEFAULTS, "drop_special": drop}, None)
        else:
            assert e.corpus["n_inputs"] == n_sentences(path)
            assert ENTRIES[f"deps_{key}"].corpus["n_inputs"] == n_sentences(path)
            assert ENTRIES[f"deps_{key}"].options == {"min_count": 100, "rule": "mean"}
            assert ENTRIES[f"positions_{key}"].corpus["n_inputs"] == 100
            assert (ENTRIES[f"positions_{key}"].options, ENTRIES[f"positions_{key}"].limit) == (POSITION_DEFAULTS, 100)
    example = ENTRIES["example_live-default"]
    assert (example.command, example.options["mode"]) == (EXAMPLE_COMMAND, "exact")


def test_head_roles_ships_for_the_default_model_and_the_trained_decoder():
    """Head roles opens drawn: the page's request (the default options, detection on the first 20 classroom
    sentences) finds a file for both models, a threshold changed too (it only colours); the trained decoder's holds
    every checkpoint, which the Over training tab and the Tour ask for."""
    steps = tuple(checkpoints_of(TRAINED_MODEL))
    for model in (DEFAULT_MODEL, TRAINED_MODEL):
        for options in (RolesOptions(), RolesOptions(threshold=0.2)):
            found = shipped_result("roles", model, sha1(CLASSROOM_SINGLE), 20, options)
            assert found is not None and found.model == model and found.options["prepend_bos"] is True
        assert shipped_result("roles", model, sha1(CLASSROOM_SINGLE), 19, RolesOptions()) is None
    found = shipped_result("roles", TRAINED_MODEL, sha1(CLASSROOM_SINGLE), 20, RolesOptions(checkpoints=steps))
    assert found is not None and [c["path"] for c in found.result["checkpoints"]] == list(steps)
    assert found.result["causal"] and found.result["detect"]  # its causal check and detection
    none = shipped_result("roles", DEFAULT_MODEL, sha1(CLASSROOM_SINGLE), 20, RolesOptions(checkpoints=steps))
    assert none is None  # the default model's file has no checkpoints


def test_index_lists_every_result_file_and_each_loads():
    result_files = set()
    for path in PRECOMPUTED.rglob("*.json"):
        if path.name != INDEX and json.loads(path.read_text()).get("format") == RESULT_FORMAT:
            result_files.add(str(path.relative_to(PRECOMPUTED)))
    indexed = {e.file for e in ENTRIES.values()} | {e.check_file for e in ENTRIES.values() if e.check_file}
    assert result_files == indexed
    for e in ENTRIES.values():
        record = read_result_file((PRECOMPUTED / e.file).read_bytes(), e.command)
        assert (record.model, record.corpus, record.options) == (e.model, e.corpus, e.options)
        if e.check_file:
            check = read_result_file((PRECOMPUTED / e.check_file).read_bytes(), e.command)
            sliced = {**e.corpus, "n_inputs": min(5, e.corpus["n_inputs"])}
            if "train" in e.corpus:  # the probe's training treebank is cut as well
                sliced["train"] = {**e.corpus["train"], "n_inputs": min(5, e.corpus["train"]["n_inputs"])}
            assert check.corpus == sliced
            assert check.options == e.options


def test_no_absolute_paths_and_small_files():
    total = 0
    for path in PRECOMPUTED.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        total += len(text.encode())
        for fragment in (str(ROOT), "/work/", "/home/", "/tmp/", "\\\\"):
            assert fragment not in text, f"{path.name} holds {fragment}"
    for e in ENTRIES.values():
        assert e.corpus.get("path") is None or not Path(e.corpus["path"]).is_absolute()
        assert all(not Path(a).is_absolute() for a in e.argv)
    assert total < 10e6


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_shipped_file_is_for_the_current_corpus_and_options(name):
    assert stale_reasons(ENTRIES[name]) == []


def test_stale_reasons_notice_a_changed_corpus_size_or_option():
    e = ENTRIES["deps_pud-test"]
    assert stale_reasons(replace(e, corpus={**e.corpus, "sha1": "0" * 40})) == [
        "data/ud/UD_English-PUD/en_pud-ud-test.conllu has changed"
    ]
    assert (
        "inputs; the corpus and --limit now give 1000"
        in stale_reasons(replace(e, corpus={**e.corpus, "n_inputs": 5}))[0]
    )
    assert "lack rule" in stale_reasons(replace(e, options={"min_count": 100}))[0]  # written before --rule
    assert "no option colour" in stale_reasons(replace(e, options={**e.options, "colour": 1}))[0]
    assert "no analysis `dependencies`" in stale_reasons(replace(e, command="dependencies"))[0]
    assert "not a file" in stale_reasons(replace(e, corpus={**e.corpus, "path": "/etc/hostname"}))[0]
    probe = ENTRIES["probe_ewt"]
    train = {**probe.corpus["train"], "sha1": "0" * 40}
    assert stale_reasons(replace(probe, corpus={**probe.corpus, "train": train})) == [
        "data/ud/UD_English-EWT/en_ewt-ud-dev.conllu has changed"
    ]


# ------------------------------------------------------------------------------------------------------ the lookup


def test_shipped_result_finds_the_right_file():
    found = shipped_result("special", DEFAULT_MODEL, sha1(EWT_DEV), n_sentences(EWT_DEV), HEAD_MAP)
    assert found is not None and found.command == "special" and found.corpus["sha1"] == sha1(EWT_DEV)
    assert found.result["head_map"] is not None
    digest, n = sha1(CLASSROOM_PAIRS), n_lines(CLASSROOM_PAIRS)
    plain = shipped_result("positions", DEFAULT_MODEL, digest, n, PositionOptions())
    dropped = shipped_result("positions", DEFAULT_MODEL, digest, n, PositionOptions(drop_special=True))
    assert plain is not None and dropped is not None
    assert (plain.options["drop_special"], dropped.options["drop_special"]) == (False, True)
    assert plain.result["histograms"] != dropped.result["histograms"]
    assert (
        shipped_result("positions", DEFAULT_MODEL, sha1(EWT_DEV), 100, PositionOptions())
        .corpus["path"]
        .endswith("ewt-ud-dev.conllu")
    )
    deps = shipped_result("deps", DEFAULT_MODEL, sha1(EWT_TEST), n_sentences(EWT_TEST), DepsOptions(min_count=5))
    assert deps is not None and deps.state is not None  # the minimum count only chooses what the table shows
    assert shipped_result("deps", DEFAULT_MODEL, sha1(EWT_TEST), n_sentences(EWT_TEST), DepsOptions(rule="max")) is None
    train, test = (sha1(EWT_DEV), n_sentences(EWT_DEV)), (sha1(EWT_TEST), n_sentences(EWT_TEST))
    probe = shipped_result("probe", DEFAULT_MODEL, *test, ProbeOptions(), train=train)
    assert probe is not None and probe.corpus["train"]["sha1"] == train[0]
    assert shipped_result("probe", DEFAULT_MODEL, *test, ProbeOptions(), train=(sha1(PUD_TEST), 1000)) is None
    assert shipped_result("probe", DEFAULT_MODEL, *test, ProbeOptions(epochs=2), train=train) is None


def test_shipped_result_refuses_another_corpus_size_option_model_or_command():
    digest, n = sha1(CLASSROOM_SINGLE), n_lines(CLASSROOM_SINGLE)
    assert shipped_result("special", DEFAULT_MODEL, digest, n, HEAD_MAP) is not None
    assert shipped_result("special", DEFAULT_MODEL, digest, n, SpecialOptions()) is not None  # more than asked for
    assert shipped_result("special", DEFAULT_MODEL, "0" * 40, n, HEAD_MAP) is None
    assert shipped_result("special", DEFAULT_MODEL, digest, n - 1, HEAD_MAP) is None
    assert shipped_result("special", DEFAULT_MODEL, digest, 5, HEAD_MAP) is None  # check slices never serve
    assert shipped_result("special", DEFAULT_MODEL, digest, n, SpecialOptions(all_punct=True)) is None
    assert shipped_result("special", "bert-base-uncased", digest, n, HEAD_MAP) is None
    assert shipped_result("deps", DEFAULT_MODEL, digest, n, DepsOptions()) is None
    assert shipped_result("positions", DEFAULT_MODEL, digest, n, PositionOptions(probes=4)) is None
    assert shipped_result("positions", DEFAULT_MODEL, digest, n, HEAD_MAP) is None  # another analysis's options


def test_shipped_example_is_the_live_pages_default_pair():
    from ui.sources.live_inputs import DEFAULT_A, DEFAULT_B

    example = shipped_example(DEFAULT_MODEL, DEFAULT_A, DEFAULT_B + "  ")
    assert example is not None and example.mode == "exact" and example.probes is None
    n = len(example.tokens)
    assert example.tokens[0] == "[CLS]" and example.tokens.count("[SEP]") == 2
    assert example.input.shape == example.previous.shape == (6, 12, n, n)
    np.testing.assert_allclose(example.input.sum(-1), 1.0, atol=1e-4)  # rows sum to 1, up to the rounding
    np.testing.assert_allclose(example.previous.sum(-1), 1.0, atol=1e-4)
    assert shipped_example(DEFAULT_MODEL, DEFAULT_A, "") is None
    assert shipped_example(DEFAULT_MODEL, "I went to the shop.", DEFAULT_B) is None
    assert shipped_example("bert-base-uncased", DEFAULT_A, DEFAULT_B) is None


# ------------------------------------------------------------------------------ against independent computations


# ---------- slow tests


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_shipped_slice_matches_a_fresh_computation(name, tmp_path, monkeypatch):
    """The job's command on its first 5 inputs (the example: whole), run now, equals the shipped file of that slice."""
    e = ENTRIES[name]
    monkeypatch.chdir(ROOT)  # the arguments name the corpora relative to the repository
    argv = e.check_argv or e.argv
    ran = run_cli(*argv, "--out", str(tmp_path / "fresh.json"))
    assert ran.code == 0, ran.err
    record = read_result_file((tmp_path / "fresh.json").read_bytes())
    shipped = read_result_file((PRECOMPUTED / (e.check_file or e.file)).read_bytes())
    keys = ("result", "options", "state") if e.command == EXAMPLE_COMMAND else ("corpus", "result", "options", "state")
    fresh, expected = ({key: getattr(r, key) for key in keys} for r in (record, shipped))  # the example's name is ours
    tolerances = TOLERANCES.get(e.command, {})
    if isinstance(expected["result"].get("head_map"), dict):
        assert_same_map(expected["result"]["head_map"], fresh["result"]["head_map"], **tolerances)
    assert result_differences(expected, fresh, **tolerances) == []


def assert_same_map(shipped: dict, fresh: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """MDS coordinates are defined up to a rotation or reflection of the plane, and another CPU's float32 rounding moves
    near-zero ones by more than rtol: compare the maps' squared distances, within what the fit itself guarantees when
    the divergences agree within result_differences' tolerance, then drop x and y from both results.

    With dD = atol + rtol D the allowed change of the divergences, the centred Gram matrix G = -C (D*D) C / 2 moves by
    at most |dG| <= |D dD|_F (spectral norm); by Weyl and Davis-Kahan the top-2 part G_2 = X X^T moves by at most
    |dG| (1 + 2 l1 / (l2 - l3)), and each squared distance (e_i - e_j)^T G_2 (e_i - e_j) by twice that."""
    d = np.asarray(shipped["js_divergence"], float)
    k = len(d)
    centre = np.eye(k) - 1.0 / k
    values = np.sort(np.linalg.eigvalsh(-0.5 * centre @ (d**2) @ centre))[::-1]
    moved = np.linalg.norm(d * (atol + rtol * d))
    bound = 2 * moved * (1 + 2 * values[0] / (values[1] - values[2]))
    squared = [squareform(pdist(np.column_stack([m.pop("x"), m.pop("y")]))) ** 2 for m in (shipped, fresh)]
    np.testing.assert_allclose(squared[1], squared[0], rtol=0, atol=bound)
