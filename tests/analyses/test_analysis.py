"""The analyses' framework: options checked when made, the command line made from them, result files of asdict(options),
the shipped-result rules (adds, view), and every analysis's result through its JSON and a result file."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, replace

import numpy as np
import pytest

import attnlib
from attnlib.analyses.base import OptionError, Options, read_inputs, stored_options
from attnlib.analyses.deps import DEPS, DepsOptions
from attnlib.analyses.positions import POSITIONS, PositionOptions
from attnlib.analyses.registry import ANALYSES, analyse, analysis_named
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.cli.entry import build_parser, command_options
from attnlib.core.corpus import CorpusError
from attnlib.results.files import ResultFileError, read_result_file, write_result_file
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV
from support.runs import INPUTS, KINDS, split_inputs

MINIMAL_ARGS = {  # what each kind of analysis reads, as flags
    "text": ["--text", "A cat."],
    "corpus": ["--corpus", "x.txt"],
    "conllu": ["--conllu", "x.conllu"],
    "treebanks": ["--train", "a.conllu", "--test", "b.conllu"],
    "model": [],  # the model alone
    "options": [],  # its inputs among its options (patch's texts or pair file), or none (compose)
}


def test_options_are_checked_when_made():
    with pytest.raises(OptionError, match="head_map must be True or False, not 'yes'"):
        SpecialOptions(head_map="yes")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="probes must be at least 1, not 0"):
        PositionOptions(probes=0)
    with pytest.raises(OptionError, match="mode must be one of 'exact', 'estimate', not 'fast'"):
        PositionOptions(mode="fast")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="min_count must be a whole number, not True"):
        DepsOptions(min_count=True)
    with pytest.raises(OptionError, match="rule must be one of"):
        DepsOptions(rule="median")  # type: ignore[arg-type]
    assert PositionOptions(probes=3).probes == 3


def test_unknown_options_and_bad_values_name_the_analysis_and_its_options():
    with pytest.raises(OptionError, match=r"special has no option headmap; its options: all_punct, head_map, norms\."):
        SPECIAL.make_options(headmap=True)
    with pytest.raises(OptionError, match="positions: probes must be at least 1, not -2"):
        POSITIONS.make_options(probes=-2)
    with pytest.raises(OptionError, match="attention has no option probes; its options: part, target"):
        analysis_named("attention").make_options(probes=2)


def test_analyse_refuses_before_loading_any_model():
    """Wrong names, inputs and options fail at once: the model named here does not exist and is never loaded."""
    with pytest.raises(ValueError, match="no analysis 'specials'; the analyses: ablate, aggregation, attention"):
        analyse("specials", "no/such/model", corpus=CLASSROOM_SINGLE)
    with pytest.raises(CorpusError, match="deps reads conllu=, not corpus"):
        analyse("deps", "no/such/model", corpus=CLASSROOM_SINGLE)
    with pytest.raises(CorpusError, match="special reads corpus=, not text="):
        analyse("special", "no/such/model", text="A cat.")
    with pytest.raises(CorpusError, match="attention reads text= \\(and pair=\\), not corpus"):
        analyse("attention", "no/such/model", corpus=CLASSROOM_SINGLE)
    with pytest.raises(OptionError, match="special has no option colour"):
        analyse("special", "no/such/model", corpus=CLASSROOM_SINGLE, colour="red")
    with pytest.raises(OptionError, match="special: norms must be True or False"):
        analyse("special", "no/such/model", corpus=CLASSROOM_SINGLE, norms=1)


def test_read_inputs_takes_paths_or_inputs():
    assert len(read_inputs("corpus", CLASSROOM_PAIRS, 3)) == 3 and read_inputs("corpus", ["A b."])[0].text_a == "A b."
    sentences = read_inputs("conllu", EWT_DEV, 2)
    assert len(sentences) == 2 and sentences[0].heads
    with pytest.raises(CorpusError, match="has no input"):
        read_inputs("corpus", [])


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_each_analysis_has_one_command_whose_flags_are_its_options(name):
    """Every option is a flag of the command, with the option's default and help; the defaults parse to the options'
    defaults, and a changed flag to a changed option."""
    analysis = ANALYSES[name]
    assert analysis.name == name and issubclass(analysis.options, Options)
    assert hasattr(analysis.result, "to_json") and hasattr(analysis.result, "from_json")
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    command = sub.choices[name]  # type: ignore[attr-defined]
    args = parser.parse_args([name, *MINIMAL_ARGS[analysis.reads]])
    assert command_options(args) == analysis.options()
    help_text = " ".join(command.format_help().split())
    for f in fields(analysis.options):
        flag = "--" + f.name.replace("_", "-")
        assert flag in command._option_string_actions, flag
        assert " ".join(f.metadata["help"].replace("%(default)s", str(f.default)).split()) in help_text
    for flag in ("--model", "--device", "--json", "--out"):
        assert flag in command._option_string_actions
    if analysis.reads == "model":  # a text or a corpus only adds to what it computes; one process (no engines)
        for flag in ("--text", "--corpus", "--limit"):
            assert flag in command._option_string_actions
    elif analysis.reads == "options":  # no input flags; a pair file fans out on Ray
        for flag in ("--engine", "--workers", "--cpus-per-worker"):
            assert flag in command._option_string_actions
        assert "--text" not in command._option_string_actions and "--corpus" not in command._option_string_actions
    elif analysis.reads != "text":
        for flag in ("--limit", "--batch-size", "--engine", "--workers", "--cpus-per-worker"):
            assert flag in command._option_string_actions


def test_a_changed_flag_is_a_changed_option():
    args = build_parser().parse_args(["positions", "--corpus", "x", "--drop-special", "--probes", "3", "--seed", "2"])
    assert command_options(args) == PositionOptions(probes=3, seed=2, drop_special=True)
    args = build_parser().parse_args(["deps", "--conllu", "x", "--min-count", "0", "--rule", "max"])
    assert command_options(args) == DepsOptions(min_count=0, rule="max")


def test_a_stored_result_answers_what_it_covers():
    stored = asdict(SpecialOptions(head_map=True, norms=True))
    assert SPECIAL.answers(stored, SpecialOptions())  # parts that only add may be there unasked
    assert SPECIAL.answers(stored, SpecialOptions(head_map=True, norms=True))
    assert not SPECIAL.answers(stored, SpecialOptions(all_punct=True))
    assert not SPECIAL.answers(asdict(SpecialOptions()), SpecialOptions(norms=True))  # not computed: not there
    assert DEPS.answers(asdict(DepsOptions()), DepsOptions(min_count=3))  # the table's minimum is only a view
    assert not DEPS.answers(asdict(DepsOptions()), DepsOptions(rule="first"))
    assert DEPS.computed(DepsOptions(min_count=3, rule="max")) == DepsOptions(rule="max")
    assert not SPECIAL.answers({"all_punct": False}, SpecialOptions())  # a file written before an option existed
    assert not SPECIAL.answers(asdict(SpecialOptions()), PositionOptions())  # type: ignore[arg-type]
    assert SPECIAL.compared() == ("all_punct",) and DEPS.compared() == ()


def test_stored_options_are_read_strictly():
    assert POSITIONS.options_from_json(asdict(PositionOptions(probes=4))) == PositionOptions(probes=4)
    with pytest.raises(ResultFileError, match="lack seed"):
        POSITIONS.options_from_json(
            {"mode": "estimate", "probes": 12, "drop_special": False, "identifiable_only": False}
        )
    with pytest.raises(ResultFileError, match="no option limit"):
        POSITIONS.options_from_json({**asdict(PositionOptions()), "limit": None})


def test_the_package_names_the_api():
    for name in ("analyse", "ANALYSES", "load_model", "read_result_file", "OptionError", "ResultFileError"):
        assert name in attnlib.__all__ and hasattr(attnlib, name)
    assert attnlib.analyse is analyse and attnlib.ANALYSES is ANALYSES


def test_inputs_cover_every_analysis():
    assert set(INPUTS) == set(ANALYSES)


@pytest.mark.parametrize(("name", "tiny_model_dir"), [(name, KINDS.get(name, "bert")) for name in sorted(INPUTS)],
                         indirect=["tiny_model_dir"])  # fmt: skip
def test_each_result_survives_its_json_and_a_result_file(name, tiny_model, tmp_path, one_thread):
    """analyse's result, its to_json through strict JSON and from_json, and a result file written and read, say the
    same (arrays compared as JSON: every number the command prints)."""
    from attnlib.analyses.base import run_analysis

    analysis = ANALYSES[name]
    inputs, text, limit, given = split_inputs(name)
    run = run_analysis(analysis, tiny_model, analysis.make_options(**given), inputs=inputs, limit=limit, **text)
    printed = json.loads(json.dumps(run.to_json(), allow_nan=False))
    assert ("model" in printed) == analysis.json_model
    path = tmp_path / "result.json"
    write_result_file(path, run.result_file())
    record = read_result_file(path.read_bytes(), name)
    assert record.options == stored_options(run.options) and record.result == printed
    back = analysis.from_record(record)
    assert json.loads(json.dumps(analysis.to_json(back, tiny_model.facts.name), allow_nan=False)) == printed
    if text:
        assert record.corpus["text_a"] == text["text"] and record.corpus["n_inputs"] == 1
    elif analysis.reads == "options":  # what it read is in its options
        assert record.corpus["n_inputs"] == 0
    else:
        assert record.corpus["n_inputs"] == limit
        assert ("train" in record.corpus) == (analysis.reads == "treebanks")
    with pytest.raises(ResultFileError, match=f"holds the result of `other`, not `{name}`"):
        analysis.from_record(replace(record, command="other"))


def test_results_of_the_text_analyses_have_their_arrays(tiny_model):
    maps = analyse("attention", tiny_model, text="The cat sat.").result
    n = len(maps.tokens)
    assert isinstance(maps.attentions, np.ndarray) and maps.attentions.shape[2:] == (n, n)
    np.testing.assert_allclose(maps.attentions.sum(-1), 1.0, atol=1e-5)
    norms = analyse("norms", tiny_model, text="The cat sat.").result
    assert norms.weighted_norm.shape == maps.attentions.shape


def test_an_option_added_later_is_stored_only_away_from_its_default():
    """Result files keep the shape older attnlib wrote (positions' sampling options at their defaults left out), and
    read back to the same options either way."""
    from dataclasses import replace

    from attnlib.analyses.positions import POSITIONS, PositionOptions

    default, sampled = PositionOptions(), replace(PositionOptions(), sample_rows=64)
    assert "sample_rows" not in stored_options(default) and "sample_from" not in stored_options(default)
    assert stored_options(sampled)["sample_rows"] == 64 and "sample_from" not in stored_options(sampled)
    for options in (default, sampled):
        assert POSITIONS.options_from_json(stored_options(options)) == options
