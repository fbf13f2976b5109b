"""`attnlib attention` for long inputs (issue 36): --layers, --heads and --rows keep part of the maps (computed
block-wise where the family allows, so a whole layer's map is never held), --out FILE.npz writes them as NumPy, and
maps too large to print are refused in words that name those options."""

from __future__ import annotations

import numpy as np
import pytest

import attnlib.cli.entry as cli
from attnlib.analyses.attention import parse_indices, parse_rows
from attnlib.analyses.base import OptionError
from attnlib.core.blockwise import default_block_rows, supports_blockwise
from attnlib.core.memory import MAX_RUN_MB_ENV, estimate_peak_bytes, run_size
from attnlib.core.model import load_model
from attnlib.core.runner import encode
from support.cli import cli_json, run_cli
from support.models import save_tiny

TEXT = "The quick brown fox jumps over the lazy dog because it was bored."


@pytest.fixture(scope="module", params=["modernbert", "deberta-v2", "mistral"])
def model_dir(request, tmp_path_factory):
    """Two block-wise families (ModernBERT with a local layer; Mistral, grouped-query heads and sliding windows) and one
    on the eager path (DeBERTa-v2), whose selection is cut from the whole maps."""
    return str(save_tiny(request.param, tmp_path_factory.mktemp(request.param)))


def test_indices_and_rows_parse_as_documented():
    assert parse_indices("", 3, "--layers") == [0, 1, 2]
    assert parse_indices("0,3:5, 1", 6, "--heads") == [0, 3, 4, 1]
    assert parse_rows("", 9) == (0, 9) and parse_rows("2:5", 9) == (2, 5) and parse_rows("7:100", 9) == (7, 9)
    for text, size in (("3", 3), ("2:2", 4), ("x", 4), ("-1:2", 4), ("0:1:2", 4)):
        with pytest.raises(OptionError):
            parse_indices(text, size, "--layers")
    for text in ("5:2", "9:12", "a:b", "3"):
        with pytest.raises(OptionError):
            parse_rows(text, 9)


def test_selection_is_the_slice_of_the_whole_maps(model_dir):
    whole = cli_json("attention", "--text", TEXT, "--model", model_dir, "--json")
    full = np.array(whole["attentions"], np.float32)
    n = full.shape[-1]
    args = ["--layers", "1", "--heads", "2,0", "--rows", f"3:{n - 2}"]
    ran = run_cli("attention", "--text", TEXT, "--model", model_dir, *args, "--json")
    assert ran.code == 0, ran.err
    got = np.array(ran.json["attentions"], np.float32)
    expected = full[np.ix_([1], [2, 0])][:, :, 3 : n - 2]
    # the block-wise path sums each row's products in another order than the eager one: a few float32 ulps of
    # weights that are at most 1
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    assert ran.json["selection"] == {"layers": [1], "heads": [2, 0], "rows": [3, n - 2]}
    assert ran.json["tokens"] == whole["tokens"] and "selection" not in whole


def test_npz_holds_what_the_json_holds(tmp_path):
    folder = str(save_tiny("bert", tmp_path / "bert"))
    whole = cli_json("attention", "--text", TEXT, "--model", folder, "--json")
    out = tmp_path / "maps.npz"
    ran = run_cli("attention", "--text", TEXT, "--model", folder, "--out", str(out), "--json")
    assert ran.code == 0, ran.err
    n = len(whole["tokens"])
    assert "attentions" not in ran.json and ran.json["npz"] == str(out) and ran.json["shape"] == [2, 4, n, n]
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["attentions"], np.array(whole["attentions"], np.float32))
        assert saved["tokens"].tolist() == whole["tokens"]
        assert saved["layers"].tolist() == [0, 1] and saved["heads"].tolist() == [0, 1, 2, 3]


def test_maps_too_large_to_print_are_refused_in_one_line(tmp_path, monkeypatch):
    folder = str(save_tiny("bert", tmp_path / "bert"))
    monkeypatch.setattr(cli, "MAX_JSON_VALUES", 100)
    ran = run_cli("attention", "--text", TEXT, "--model", folder, "--json")
    assert ran.code == 2 and ran.err.startswith("error: ") and ran.err.count("\n") == 1
    assert all(flag in ran.err for flag in ("--layers", "--heads", "--rows", "--out maps.npz"))
    ran = run_cli(
        "attention", "--text", TEXT, "--model", folder, "--layers", "0", "--heads", "0", "--rows", "0:3", "--json"
    )
    assert ran.code == 0, ran.err
    ran = run_cli("attention", "--text", TEXT, "--model", folder, "--layers", "2", "--json")
    assert ran.code == 2 and "outside 0..1" in ran.err and ran.err.count("\n") == 1


def test_maps_too_large_for_memory_are_refused_in_words_that_name_what_fits(model_dir, tmp_path, monkeypatch):
    """A run limit between the block-wise and the whole-maps estimate: `--out maps.npz` of every map is refused in
    one line; on a block-wise family it names --layers, --heads and --rows, and a choice made with them is written
    under the same limit; on the others it says that they do not make the run smaller."""
    lm = load_model(model_dir)
    size = run_size(lm, encode(lm, TEXT).n)
    blocks, whole = estimate_peak_bytes(size, default_block_rows(size.n, size.heads)), estimate_peak_bytes(size)
    assert blocks < whole
    monkeypatch.setenv(MAX_RUN_MB_ENV, str((blocks + whole) / 2 / 2**20))
    out = str(tmp_path / "maps.npz")
    ran = run_cli("attention", "--text", TEXT, "--model", model_dir, "--out", out, "--json")
    assert ran.code == 2 and ran.err.startswith("error: ") and ran.err.count("\n") == 1, ran.err
    assert f"{size.n:,} tokens" in ran.err and "Use a shorter text" in ran.err
    if supports_blockwise(lm.encoder):
        assert "choose some of the maps with --layers, --heads or --rows" in ran.err
        chosen = run_cli(
            "attention", "--text", TEXT, "--model", model_dir, "--layers", "0", "--heads", "0", "--rows", "0:3",
            "--out", out, "--json",
        )  # fmt: skip
        assert chosen.code == 0 and chosen.json["shape"] == [1, 1, 3, size.n], chosen.err
    else:
        assert "does not run block-wise" in ran.err
