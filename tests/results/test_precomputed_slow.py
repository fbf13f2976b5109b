"""Shipped precomputed results: the index, the lookup, freshness, and each file against a fresh computation.

The slow tier; test_precomputed.py holds the quick tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from attnlib.cli import entry as cli
from attnlib.results.files import read_result_file
from attnlib.results.precomputed import EXAMPLE_COMMAND, TOLERANCES, result_differences
from attnlib.results.shipped import PRECOMPUTED, ROOT
from support.precomputed import ENTRIES

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_shipped_slice_matches_a_fresh_computation(name, tmp_path, monkeypatch, capsys):
    """The job's command on its first 5 inputs (the example: whole), run now, equals the shipped file of that slice."""
    e = ENTRIES[name]
    monkeypatch.chdir(ROOT)  # the arguments name the corpora relative to the repository
    argv = e.check_argv or e.argv
    assert cli.main([*argv, "--out", str(tmp_path / "fresh.json")]) == 0
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
