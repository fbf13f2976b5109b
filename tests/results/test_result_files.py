"""Result files: a command's --out file round-trips, is checked when read, writes NaN and infinities as null and reads
NaN back, and keeps dependency counts and the head map whole or refuses them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnlib.analyses.deps import dependency_counts_from_json, dependency_counts_to_json
from attnlib.analyses.positions import PositionsResult
from attnlib.results.files import ResultFileError, json_ready, make_result_file, read_result_file, write_result_file
from attnlib.results.shipped import EWT_DEV
from attnlib.stats.head_distances import special_from_json
from support.scale import N_SENTENCES


def test_out_file_round_trip(special_file):
    record = read_result_file(special_file.read_bytes(), "special")
    assert record.command == "special" and record.model == "all-MiniLM-L6-v2"
    assert record.corpus["name"] == "classroom_single.txt" and record.corpus["n_inputs"] == 6
    assert record.options == {"all_punct": False, "head_map": True, "norms": False}  # --limit is in the corpus
    assert record.run == {"engine": "local", "device": "cpu", "workers": 1, "seconds": record.run["seconds"]}
    from attnlib import __version__

    assert record.library_version == __version__
    assert (
        "computed by `python -m attnlib special` on classroom_single.txt (6 inputs) with all-MiniLM-L6-v2"
        in record.provenance()
    )
    special, hm = special_from_json(record.result)
    assert special.n_inputs == 6 and special.heads["cls"].shape == (6, 12)
    assert json_ready(special.to_json()) == {k: v for k, v in record.result.items() if k not in ("model", "head_map")}
    assert (
        hm.coords.shape == (72, 2)
        and hm.divergence.shape == (72, 72)
        and set(hm.labels) <= {"next", "prev", "broad", "[CLS]", "[SEP]", "punctuation", "other"}
    )


def test_result_file_is_checked(special_file, tmp_path):
    data = special_file.read_bytes()
    with pytest.raises(ResultFileError, match="holds the result of `special`; this page shows `deps`"):
        read_result_file(data, "deps")
    with pytest.raises(ResultFileError, match="not a JSON file"):
        read_result_file(b"\x80\x04pickle")
    with pytest.raises(ResultFileError, match="not a result file"):
        read_result_file(b'{"heads": {}}')
    with pytest.raises(ResultFileError, match="at most"):
        read_result_file(data, "special", max_bytes=100)
    broken = json.loads(data)
    broken["result"]["heads"]["cls"] = [[0.1, 0.2]]
    with pytest.raises(ResultFileError, match="different shapes"):
        special_from_json(read_result_file(json.dumps(broken), "special").result)
    del broken["model"]
    with pytest.raises(ResultFileError, match="'model'"):
        read_result_file(json.dumps(broken))


def test_nan_and_infinities_are_written_as_null_and_nan_read_back(tmp_path, special_file):
    """json_ready writes NaN and +-inf as null (NumPy scalars as Python numbers); a result file holding a NaN is
    strict JSON with null there, and reads back as NaN in that cell only."""
    value = {"a": np.array([1.0, np.nan, np.inf]), 2: (np.float32(-np.inf), np.int64(3)), "b": [float("nan"), "x"]}
    assert json_ready(value) == {"a": [1.0, None, None], "2": [None, 3], "b": [None, "x"]}
    assert type(json_ready(np.int64(3))) is int and type(json_ready(np.float32(0.5))) is float
    record = read_result_file(special_file.read_bytes(), "special")
    record.result["heads"]["sep_to_sep"][0][0] = float("nan")
    path = tmp_path / "nan.json"
    write_result_file(path, record)
    assert "NaN" not in path.read_text() and json.loads(path.read_text())["result"]["heads"]["sep_to_sep"][0][0] is None
    special, _ = special_from_json(read_result_file(path.read_bytes(), "special").result)
    assert np.isnan(special.heads["sep_to_sep"][0, 0]) and not np.isnan(special.heads["sep_to_sep"][0, 1])


def test_dependency_counts_round_trip(local_result, tmp_path):
    counts = local_result[2]
    record = make_result_file(
        "deps", "all-MiniLM-L6-v2", str(EWT_DEV), N_SENTENCES, {}, {"rows": []}, state=dependency_counts_to_json(counts)
    )
    path = tmp_path / "deps.json"
    write_result_file(path, record)
    back = dependency_counts_from_json(read_result_file(path.read_bytes(), "deps").state)
    assert back.relations == counts.relations
    for name in ("totals", "head_hits", "offset_hits", "n_sentences", "n_words"):
        np.testing.assert_array_equal(getattr(back, name), getattr(counts, name))
    assert back.table(min_count=1, held_out=True) == counts.table(min_count=1, held_out=True)
    state = json.loads(path.read_text())["state"]
    state["head_hits"] = state["head_hits"][:1]
    with pytest.raises(ResultFileError, match="head_hits"):
        dependency_counts_from_json(state)
    state = json.loads(path.read_text())["state"]
    state["rule"] = "median"
    with pytest.raises(ResultFileError, match="row rule 'median'"):
        dependency_counts_from_json(state)


def test_malformed_head_map_and_positions_are_result_file_errors(special_file):
    result = read_result_file(special_file.read_bytes(), "special").result
    result["head_map"]["x"] = result["head_map"]["x"][:-1]  # 71 points for 72 heads
    with pytest.raises(ResultFileError, match="head map"):
        special_from_json(result)
    del result["head_map"]["js_divergence"]
    with pytest.raises(ResultFileError, match="head map is incomplete"):
        special_from_json(result)
    result["head_map"] = None
    special, hm = special_from_json(result)
    assert hm is None and special.heads["cls"].shape == (6, 12)
    with pytest.raises(ResultFileError, match="`positions` result is incomplete"):
        PositionsResult.from_json({"n_inputs": 3})
