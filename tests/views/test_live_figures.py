"""The head, model and neuron view builders on hand-made arrays, and the neuron view's arithmetic on real models."""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

from attnlib.core.runner import run
from attnlib.views.canvas_html import pack_sparse, quantize
from attnlib.views.head_view import filter_positions, head_view_data, head_view_html
from attnlib.views.long_view import long_view_html
from attnlib.views.model_view import model_view_html, pooled_maps, scaled_to_max, thumbnail_atlas
from attnlib.views.neuron_view import neuron_scores, neuron_view_html
from support.reference import independent_norms
from support.views import assert_offline, page_data, unpack


def test_pack_sparse_keeps_weights_at_or_above_the_cut_as_bytes():
    maps = np.array([[[0.5, 0.005, 0.495], [0.0, 1.0, 0.0]], [[0.02, 0.98, 0.0], [0.25, 0.35, 0.4]]], np.float32)
    got = unpack(pack_sparse(maps, 0.01))
    expected = {
        (0, 0, 0): 128,
        (0, 0, 2): 126,
        (0, 1, 1): 255,
        (1, 0, 0): 5,
        (1, 0, 1): 250,
        (1, 1, 0): 64,
        (1, 1, 1): 89,
        (1, 1, 2): 102,
    }
    assert got == expected  # 0.005 * 255 = 1.3 < 0.01 * 255 = 2.55, so it is dropped
    assert quantize(np.array([0.5]))[0] == 128


def test_pair_filter_keeps_the_segments_named():
    segments = [0, 0, 0, 1, 1]
    assert filter_positions(segments, 5, "A→B") == ([0, 1, 2], [3, 4])
    assert filter_positions(segments, 5, "B→A") == ([3, 4], [0, 1, 2])
    assert filter_positions(segments, 5, "B→B") == ([3, 4], [3, 4])
    assert filter_positions(None, 5, "A→B") == (list(range(5)), list(range(5)))
    with pytest.raises(ValueError):
        filter_positions(segments, 5, "C→A")


def test_head_view_data_slices_heads_rows_and_columns():
    attn = np.arange(2 * 5 * 5, dtype=np.float32).reshape(2, 5, 5)
    data = head_view_data(attn, [1], [0, 0, 0, 1, 1], "A→B")
    assert data.left == [0, 1, 2] and data.right == [3, 4] and data.heads == [1]
    np.testing.assert_array_equal(data.maps[0], attn[1, :3, 3:])
    assert head_view_data(attn, [0, 1], None).maps.shape == (2, 5, 5)


def test_head_view_html_carries_the_lines_and_the_selected_rows():
    attn = np.zeros((2, 3, 3), np.float32)
    attn[0] = [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]
    attn[1] = np.eye(3)[[2, 0, 1]]
    html = head_view_html(attn, ["[CLS]", "a</script>", "[SEP]"], [0, 1], layer=4, selected=2)
    assert_offline(html)
    data = page_data(html)
    assert data["layer"] == 5 and data["heads"] == [1, 2]  # 1-based on the page
    assert data["left"][1] == "a</script>"  # labels survive, and cannot close the script early
    assert data["selRows"] == [[0.2, 0.3, 0.5], [0.0, 1.0, 0.0]]
    lines = unpack(data["lines"])
    assert lines[(0, 1, 0)] == lines[(0, 1, 1)] == 128 and lines[(1, 0, 2)] == 255 and (0, 0, 1) not in lines


def test_max_pooling_by_hand():
    maps = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [0, 0, 0, 0, 0], [1, 1, 1, 1, 9], [2, 0, 0, 0, 0]], np.float32)
    pooled, block = pooled_maps(maps, cells=2)  # 5 tokens into 2 cells: blocks of 3, padded with zeros
    assert block == 3
    np.testing.assert_array_equal(pooled, [[8, 10], [2, 9]])
    same, block = pooled_maps(maps, cells=5)
    assert block == 1 and same is maps


def test_heatmap_bytes_by_hand():
    maps = np.array([[0.0, 0.25], [0.5, 0.125]], np.float32)
    grey, peak = scaled_to_max(maps, levels=64)
    # divided by the maximum 0.5: 0, 0.5, 1, 0.25 -> steps of 1/63: 0, 32, 63, 16 -> bytes round(k * 255 / 63)
    np.testing.assert_array_equal(grey, [[0, 130], [255, 65]])
    assert peak == pytest.approx(0.5)


def test_atlas_tiles_each_layer_head_in_its_place():
    rng = np.random.default_rng(1)
    attn = rng.random((2, 3, 4, 4)).astype(np.float32)
    atlas, peaks, tile, block = thumbnail_atlas(attn, cells=2)
    assert (tile, block) == ((2, 2), 2) and atlas.shape == (4, 6)
    pooled, _ = pooled_maps(attn, 2)
    tiles, _ = scaled_to_max(pooled)
    np.testing.assert_array_equal(atlas[2:4, 4:6], tiles[1, 2])
    np.testing.assert_allclose(peaks, attn.max(axis=(-2, -1)))
    assert atlas.max() == 255


@pytest.mark.parametrize("n,mode", [(6, "lines"), (60, "heat")])
def test_model_view_switches_to_heatmaps_for_long_inputs(n, mode):
    rng = np.random.default_rng(2)
    attn = rng.random((2, 2, n, n)).astype(np.float32)
    attn /= attn.sum(-1, keepdims=True)
    html = model_view_html(attn, [f"t{i}" for i in range(n)], selected=(1, 0), lines_max_tokens=48)
    assert_offline(html)
    data = page_data(html)
    assert data["mode"] == mode and data["sel"] == [1, 0]
    if mode == "heat":
        png = base64.b64decode(data["atlas"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert data["fullMax"] == pytest.approx(float(attn[1, 0].max()), abs=1e-6)
    else:
        assert len(unpack(data["lines"])) == int((np.rint(attn * 255) >= 6).sum())  # cut 0.02 -> 5.1 -> 6


def test_neuron_scores_by_hand():
    q = np.array([[1.0, 2.0, 0.0, -1.0], [0, 0, 0, 0]])
    k = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [2.0, 2.0, 5.0, 0.0]])
    ns = neuron_scores(q, k, 0)
    np.testing.assert_array_equal(ns.products[2], [2, 4, 0, 0])
    np.testing.assert_allclose(ns.scores, [0.5, 0.5, 3.0])  # dot products 1, 1, 6 divided by sqrt(4)
    e = np.exp([0.5, 0.5, 3.0])
    np.testing.assert_allclose(ns.softmax, e / e.sum())
    html = neuron_view_html(q[:, :4], np.vstack([k, k])[:2], ["x", "y"], 1, layer=0, head=2)
    assert_offline(html)
    assert page_data(html)["head"] == 3


def test_neuron_view_of_shown_keys_keeps_the_whole_rows_softmax():
    q = np.array([[1.0, 2.0, 0.0, -1.0], [0.0, 2.0, 0.0, 0.0]])
    k = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [2.0, 2.0, 5.0, 0.0], [0.0, 4.0, 0.0, 0.0]])
    row = np.array([0.1, 0.2, 0.3, 0.4])
    data = page_data(neuron_view_html(q, k, list("wxyz"), 1, layer=0, head=0, attention_row=row, shown=(1, 3)))
    e = np.exp([0.0, 1.0, 2.0, 4.0])  # q_1 . k_j = 0, 2, 4, 8, over sqrt(4)
    assert (data["labels"], data["qi"], data["first"], data["n_keys"]) == (["x", "y"], 0, 1, 4)
    np.testing.assert_allclose(data["scores"], [1.0, 2.0])
    np.testing.assert_allclose(data["softmax"], (e / e.sum())[1:3], atol=5e-5)  # rounded to 4 decimals
    assert data["mass"] == pytest.approx((e[1] + e[2]) / e.sum(), rel=1e-12) and data["mass"] < 1
    assert data["k"] == [0, 1, 0, 1, 2, 2, 5, 0] and data["attn"] == [0.2, 0.3]
    assert data["diff"] == pytest.approx(np.abs(e / e.sum() - row).max(), rel=1e-12)  # over the whole row
    assert page_data(neuron_view_html(q, k, list("wxyz"), 1, layer=0, head=0))["mass"] is None
    with pytest.raises(ValueError, match="hold the query 1"):
        neuron_view_html(q, k, list("wxyz"), 1, layer=0, head=0, shown=(2, 4))


def assert_neuron_view_is_honest(lm, text_a, text_b=None):
    """softmax(q·k/√d) from the captured vectors equals the returned attention, every layer, head and row."""
    r = run(lm, text_a, text_b, capture_qk=True)
    d = r.queries.shape[-1]
    scores = np.einsum("lhid,lhjd->lhij", r.queries.astype(np.float64), r.keys.astype(np.float64)) / np.sqrt(d)
    soft = np.exp(scores - scores.max(-1, keepdims=True))
    soft /= soft.sum(-1, keepdims=True)
    np.testing.assert_allclose(soft, r.attentions, atol=1e-5)
    row = neuron_scores(r.queries[-1, 0], r.keys[-1, 0], r.n - 1)  # the function the page uses
    np.testing.assert_allclose(row.softmax, r.attentions[-1, 0, -1], atol=1e-5)


def test_neuron_view_matches_attention_for_the_packaged_model(minilm):
    assert_neuron_view_is_honest(minilm, "I went to the store.", "At the store, I bought fresh strawberries.")


def test_neuron_view_matches_attention_for_tiny_models(tiny_model):
    assert_neuron_view_is_honest(tiny_model, "The cat sat on the mat.", "The dog slept.")


FIGURES = Path(__file__).resolve().parents[2] / "attnlib" / "views"


def _tiny_grid_html() -> str:
    """The queries-and-keys grid of a made-up result: one input of three tokens, two heads."""
    from attnlib.analyses.qk import Fidelity, Picture, QKInput, QKResult
    from attnlib.views.qk import grid_html

    inputs = [QKInput("a", None, 1, ["[CLS]", "a", "[SEP]"], ["cls", "other", "sep"], None, False)]
    x = np.arange(6, dtype=np.float32)
    f = Fidelity(1.0, 1.0, 2.0, 1 / 3)
    pictures = {(0, h, "pca"): Picture(0, h, "pca", x, x[::-1].copy(), f) for h in range(2)}
    return grid_html(QKResult(0, 0, "pca", 1, 2, inputs, pictures, True))


VIEW_BUILDERS = {
    "head_view.js": lambda: head_view_html(np.full((2, 3, 3), 1 / 3, np.float32), ["a", "b", "c"], [0, 1], layer=0),
    "model_view.js": lambda: model_view_html(np.full((1, 2, 3, 3), 1 / 3, np.float32), ["a", "b", "c"]),
    "neuron_view.js": lambda: neuron_view_html(np.eye(3, 4), np.ones((3, 4)), ["a", "b", "c"], 0, layer=0, head=0),
    "qk_grid.js": _tiny_grid_html,
    "long_view.js": lambda: long_view_html(np.full((2, 2, 2), 0.5, np.float32), 2, ["a", "b", "c", "d"], [0, 1], 0),
}


@pytest.mark.parametrize("script", sorted(VIEW_BUILDERS))
def test_view_html_inlines_its_js_files_and_loads_no_script(script):
    html = VIEW_BUILDERS[script]()
    assert_offline(html)
    tags = re.findall(r"<script[^>]*>", html)
    assert tags == ["<script type='application/json' id='data'>", "<script>"]  # the data, then one inline script
    code = html.split("<script>", 1)[1].split("</script>", 1)[0]
    common = (FIGURES / "canvas_common.js").read_text(encoding="utf-8")
    own = (FIGURES / script).read_text(encoding="utf-8")
    assert common in code and own in code and code.index(common) < code.index(own)  # helpers defined before use
    others = [p.read_text(encoding="utf-8") for p in FIGURES.glob("*_view.js") if p.name != script]
    assert len(others) == (3 if script.endswith("_view.js") else 4) and not any(other in code for other in others)


def test_js_files_are_package_data():
    config = tomllib.loads((FIGURES.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert "*.js" in config["tool"]["setuptools"]["package-data"]["attnlib.views"]
    assert {p.name for p in FIGURES.glob("*.js")} == {"canvas_common.js", *VIEW_BUILDERS}


# ---------- value-weighted norms (METHODS §11): an independent computation from the model's own modules ----------


@pytest.mark.parametrize("tiny_model_dir", ["bert", "roberta"], indirect=True)
def test_norm_rows_of_the_library_match_the_independent_computation(tiny_model):
    from attnlib.stats.norms import row_normalised, value_norms_from_values, weighted_norms

    text_a, text_b = "The cat sat on the mat.", "The dog slept."
    r = run(tiny_model, text_a, text_b, capture_norms=True)
    _, vnorm, rows = independent_norms(tiny_model, text_a, text_b)
    value_norm = value_norms_from_values(r.values, r.norm_weights.out_gram)  # what the page draws from
    np.testing.assert_allclose(value_norm, vnorm, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(row_normalised(weighted_norms(r.attentions, value_norm)), rows, atol=1e-5)
    np.testing.assert_allclose(rows.sum(-1), 1.0)


def test_norm_rows_by_hand():
    from attnlib.stats.norms import row_normalised, weighted_norms

    attn = np.array([[[[0.5, 0.5], [0.25, 0.75]]]])  # [1, 1, 2, 2]
    value_norm = np.array([[[1.0, 3.0]]])  # ||f(x_0)|| = 1, ||f(x_1)|| = 3
    # row 0: 0.5 and 1.5 -> 0.25, 0.75; row 1: 0.25 and 2.25 -> 0.1, 0.9
    np.testing.assert_allclose(row_normalised(weighted_norms(attn, value_norm))[0, 0], [[0.25, 0.75], [0.1, 0.9]])


def test_head_and_model_views_name_what_they_draw():
    maps = np.full((1, 2, 3, 3), 1 / 3, np.float32)
    assert page_data(head_view_html(maps[0], ["a", "b", "c"], [0], layer=0))["quantity"] == "weight"
    html = head_view_html(maps[0], ["a", "b", "c"], [0, 1], layer=0, quantity="norm share")
    assert page_data(html)["quantity"] == "norm share"
    assert page_data(model_view_html(maps, ["a", "b", "c"], quantity="norm share"))["quantity"] == "norm share"


def test_value_norm_figure_has_one_bar_per_token_with_one_based_labels():
    from attnlib.views.neuron_view import value_norm_figure

    fig = value_norm_figure(np.array([2.0, 0.5, 1.25]), ["[CLS]", "cat", "[SEP]"], layer=2, head=0)
    bar = fig.data[0]
    np.testing.assert_array_equal(bar.x, [2.0, 0.5, 1.25])
    assert list(bar.y) == ["1: [CLS]", "2: cat", "3: [SEP]"] and bar.orientation == "h"
    assert "3-1" in fig.layout.title.text
