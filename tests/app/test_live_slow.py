"""AppTest of the live page: typing, layer and head, the views, the pair filter, the level switch, the URL, the finder.

The slow tier; test_live.py holds the quick tests."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.runner import run
from support.apptest import tables
from support.pages import TEXT_A, TEXT_B, open_live, rerun, view_data, view_datas

pytestmark = pytest.mark.slow


@pytest.mark.slow
def test_head_finder_ranks_heads_and_opens_one_in_the_head_view():
    at = open_live(view="finder")
    buttons = [b for b in at.button if b.key and b.key.startswith("pick_")]
    assert len(buttons) == 8 * 3
    assert tables(at)[0].shape[0] == 24
    prev_best = next(b for b in buttons if b.key == "pick_prev_1")
    label = prev_best.label.split(" ")[0]  # "layer-head", 1-based
    prev_best.click()
    rerun(at)
    layer, head = (int(x) for x in label.split("-"))
    data = view_data(at)
    assert data["layer"] == layer and data["heads"] == [head]
    assert at.query_params["view"] == "head" and at.query_params["heads"] == str(head)


def differ_by_hand(lm_a, lm_b) -> str:
    """The largest per-layer difference of the shares (mean over heads), worked out with numpy on both runs."""
    shares = []
    for lm in (lm_a, lm_b):
        r = run(lm, TEXT_A, TEXT_B)
        a, n = r.attentions.astype(np.float64), r.n
        punct = np.isin(r.tokens, [".", ","])
        per = {
            "[CLS] share": a[..., r.cls_mask].sum(-1).mean(-1),
            "[SEP] share": a[..., r.sep_mask].sum(-1).mean(-1),
            "punctuation share": a[..., punct].sum(-1).mean(-1),
            "previous-token share": np.diagonal(a, -1, -2, -1).sum(-1) / n,
            "own-token share": np.diagonal(a, 0, -2, -1).sum(-1) / n,
            "next-token share": np.diagonal(a, 1, -2, -1).sum(-1) / n,
        }
        shares.append({k: v.mean(axis=1) for k, v in per.items()})
    depth = min(len(shares[0]["[CLS] share"]), len(shares[1]["[CLS] share"]))
    k, l = max(
        ((k, l) for k in shares[0] for l in range(depth)),
        key=lambda p: abs(shares[0][p[0]][p[1]] - shares[1][p[0]][p[1]]),
    )
    return f"{k} in layer {l + 1}, {shares[0][k][l]:.2f} vs {shares[1][k][l]:.2f}"


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_two_models_side_by_side_in_the_head_view(minilm, tiny_model_dir, tiny_model):
    at = open_live(cmp=str(tiny_model_dir), layer="4", heads="2,7", token="3")
    first, second = view_datas(at)
    assert (first["layer"], first["heads"]) == (4, [2, 7])
    assert (second["layer"], second["heads"]) == (2, [2])  # the tiny model has 2 layers and 4 heads
    assert tiny_model.facts.name in second["title"] and minilm.facts.name in first["title"]
    assert first["selected"] == second["selected"] == 2
    lines = [c.value for c in at.caption if "largest difference" in c.value]
    assert len(lines) == 1 and differ_by_hand(minilm, tiny_model) in lines[0]
    assert [b.label for b in at.get("download_button")][-2:] == [
        "Download figure (HTML)",
        f"Figure of {tiny_model.facts.name} (HTML)",
    ]
    at.radio(key="live_view").set_value("model")
    rerun(at)
    assert [(d["L"], d["H"], d["sel"]) for d in view_datas(at)] == [(6, 12, [3, 0]), (2, 4, [1, 0])]
