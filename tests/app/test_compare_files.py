"""The second model's result from an `--out` file (uploaded under "Compare with"), beside the first model's result
computed, shipped or loaded from its own file; and the views that show both models side by side."""

from __future__ import annotations

import pytest

# --- the checks, without the app ---------------------------------------------------------------------------------


def test_caveats_name_another_corpus_another_size_and_other_options():
    from attnlib.results.files import ResultFile, comparison_caveats

    corpus = {"name": "a.txt", "sha1": "1" * 40, "n_inputs": 5}
    second = ResultFile("positions", "m", dict(corpus), {"mode": "exact", "probes": 12, "seed": 1}, "0", "", {})
    assert comparison_caveats(corpus, {"mode": "exact", "probes": 12}, second, ("mode", "probes")) == []
    assert comparison_caveats(corpus, {"mode": "estimate", "seed": 2}, second, ("mode", "probes")) == [
        "mode is estimate for the first, exact for the second"  # seed is not compared, probes not given
    ]
    second.corpus["n_inputs"] = 4
    assert comparison_caveats(corpus, {}, second, ()) == [
        "the first result covers 5 inputs of a.txt, the second 4 of a.txt"
    ]
    second.corpus |= {"sha1": "2" * 40, "name": "b.txt"}
    assert comparison_caveats(corpus, {}, second, ()) == [
        "the first result is of a.txt, the second of another corpus, b.txt"
    ]


def test_probe_files_of_another_variant_or_malformed_are_result_file_errors():
    from attnlib.analyses.probe import ProbeResult
    from attnlib.results.files import ResultFileError

    with pytest.raises(ResultFileError, match="incomplete or malformed"):
        ProbeResult.from_json({"uas": 0.5})
    with pytest.raises(ResultFileError, match="incomplete or malformed"):
        ProbeResult.from_json([1, 2])  # type: ignore[arg-type]


# --- Special tokens -------------------------------------------------------------------------------------------------


# --- Dependency heads -------------------------------------------------------------------------------------------------


# --- the probe ----------------------------------------------------------------------------------------------------


# --- Local vs global ------------------------------------------------------------------------------------------------


# --- Live: the neuron view of both models ----------------------------------------------------------------------------


# --- a loaded file stays for the session -----------------------------------------------------------------------------
