"""AppTest of the Live page on a long input (METHODS §19, issue 36): a tiny ModernBERT of 600 positions, whose head and
model views draw the reduced map (equal to reduce_map of the eager maps) and a window's rows (equal to the eager rows),
with the window in the URL; the neuron view of a window's tokens (equal to the eager rows); the head finder says in words
why it is not drawn; the corpus search of a window's token (equal to the eager query's matches)."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest
from PIL import Image

import attnlib.search.vectors as vectors
from attnlib.core.blockwise import reduce_map
from attnlib.core.corpus import read_corpus
from attnlib.core.model import load_model
from attnlib.core.runner import encode, run_encoded
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.search.by_example import IndexOptions, build_index, query_of
from attnlib.views.canvas_html import quantize
from attnlib.views.long_view import MAP_WIDTH, gray_cells
from support.long import long_text, save_long_modernbert
from support.pages import open_live, rerun, view_datas
from support.tolerances import FORWARD_RTOL

pytestmark = pytest.mark.slow
N = 600


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):
    """The tiny ModernBERT's folder, the text, and the eager maps [layers, heads, N, N] of its N tokens."""
    folder = save_long_modernbert(tmp_path_factory.mktemp("long-modernbert"), N)
    lm = load_model(str(folder))
    text = long_text(N)
    encoded = encode(lm, text)
    assert encoded.n == N
    return str(folder), text, run_encoded(lm, [encoded])[0].attentions


def grey_of(b64: str) -> np.ndarray:
    """A view's base64 grey PNG as an array."""
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))))


def dense_lines(packed: dict) -> np.ndarray:
    """pack_sparse's payload back as byte weights [m, rows, cols] (0 where no line is sent)."""
    raw = base64.b64decode(packed["b64"])
    m, rows, cols, nnz = packed["m"], packed["rows"], packed["cols"], packed["nnz"]
    counts = np.frombuffer(raw, "<u2", m * rows)
    columns = np.frombuffer(raw, "<u2", nnz, 2 * m * rows)
    weights = np.frombuffer(raw, np.uint8, nnz, 2 * m * rows + 2 * nnz)
    out = np.zeros((m * rows, cols), np.uint8)
    out[np.repeat(np.arange(m * rows), counts), columns] = weights
    return out.reshape(m, rows, cols)


def test_head_view_draws_the_reduced_map_of_the_eager_maps(long_model):
    folder, text, eager = long_model
    at = open_live(model=folder, a=text, b="", view="head", layer="2", heads="1,3")
    assert any(f"{N} tokens: the map is drawn in cells of 2×2 tokens" in i.value for i in at.info)
    (data,) = view_datas(at)
    pooled, cell = reduce_map(eager[1][[0, 2]], MAP_WIDTH)
    assert (data["cell"], data["cells"], data["heads"], data["layer"]) == (cell, 300, [1, 3], 2)
    assert data["top"] == pytest.approx(float(pooled.max()), abs=1e-6)
    drawn = np.stack([grey_of(b64) for b64 in data["maps"]])
    expected = gray_cells(pooled, float(pooled.max()))
    assert drawn.shape == expected.shape
    # the page's maps come from block-wise runs, the expected ones from eager maps: equal within a grey level
    assert np.abs(drawn.astype(int) - expected.astype(int)).max() <= 1
    assert (drawn != gray_cells(reduce_map(eager[0][[0, 2]], MAP_WIDTH)[0], float(pooled.max()))).any()  # not layer 1
    assert data["window"] is None and "start" not in at.query_params


def test_window_rows_equal_the_eager_rows_and_stay_in_the_url(long_model):
    folder, text, eager = long_model
    at = open_live(model=folder, a=text, b="", view="head", layer="2", heads="2,4", start="101", end="164")
    (data,) = view_datas(at)
    assert data["window"] == [100, 164] and data["leftPos"] == list(range(101, 165))
    rows = eager[1][[1, 3], 100:164]  # layer 2: local, |i - j| <= 2, so lines reach 68 keys
    keys = np.flatnonzero((rows >= 0.01).any(axis=(0, 1)))
    assert len(keys) > 60 and data["rightPos"] == (keys + 1).tolist()
    lines = dense_lines(data["lines"]).astype(int)
    expected = quantize(rows[:, :, keys]).astype(int)
    expected[expected < 3] = 0  # bytes below 0.01 * 255 are not sent
    assert np.abs(lines - expected).max() <= 1
    assert at.query_params["start"] == "101" and at.query_params["end"] == "164"


def test_window_is_bounded_and_the_model_view_draws_every_head(long_model):
    folder, text, eager = long_model
    at = open_live(model=folder, a=text, b="", view="model", layer="2", head="3", start="10", end="600")
    grid, long = view_datas(at)
    pooled, _ = reduce_map(eager, MAP_WIDTH)
    assert len(grid["full"]) > 0 and long["heads"] == [3] and long["window"] == [9, 265]  # 256 rows at most
    assert at.query_params["end"] == "265"
    assert np.abs(grey_of(long["maps"][0]).astype(int) - gray_cells(pooled[1, 2], float(pooled[1, 2].max()))).max() <= 1


def test_finder_says_why_it_is_not_drawn(long_model):
    folder, text, _ = long_model
    at = open_live(model=folder, a=text, b="", view="finder")
    assert not at.get("iframe")
    assert any(f"{N} tokens make too large" in i.value for i in at.info)
    rerun(at)


def test_neuron_view_without_a_window_says_to_choose_one(long_model):
    folder, text, _ = long_model
    at = open_live(model=folder, a=text, b="", view="neuron")
    assert not at.get("iframe")
    assert any("the neuron view draws a window's tokens. Choose a window" in i.value for i in at.info)
    rerun(at)


# The page's softmax comes from float32 q and k of a block-wise pass, the eager row from the model's own float32
# softmax: within FORWARD_RTOL (tests/core/test_blockwise.py measures 1e-8); the page sends it rounded to 4 decimals.
SOFTMAX_SENT = 5e-5 + FORWARD_RTOL


@pytest.mark.parametrize(("layer", "token", "query"), [(1, "120", 119), (2, "5", 100)])  # 5: outside, the first
def test_neuron_view_of_a_window_token_is_the_eager_row(long_model, layer, token, query):
    folder, text, eager = long_model
    at = open_live(
        model=folder, a=text, b="", view="neuron", layer=str(layer), head="2", start="101", end="164", token=token
    )
    (data,) = view_datas(at)
    row = eager[layer - 1, 1, query]  # layer 1 global; layer 2 local, |i - j| <= 2
    assert (data["layer"], data["head"], data["first"], data["n_keys"]) == (layer, 2, 100, N)
    assert data["qi"] == query - 100 and len(data["labels"]) == 64 and len(data["scores"]) == 64
    np.testing.assert_allclose(data["softmax"], row[100:164], rtol=0, atol=SOFTMAX_SENT)
    np.testing.assert_allclose(data["attn"], row[100:164], rtol=0, atol=5e-5)
    mass = float(row[100:164].sum())  # the whole row's weights of the window's keys
    assert data["mass"] == pytest.approx(mass, abs=64 * FORWARD_RTOL) and mass < 1 - 1e-3
    assert any(f"here they sum to {data['mass']:.4f}" in c.value for c in at.caption)
    assert any("equals the model's attention row" in c.value for c in at.caption)
    assert at.query_params["start"] == "101" and at.query_params["end"] == "164"
    assert at.query_params.get("token") == (token if query == int(token) - 1 else None)


def strip_weights(strip: str) -> list[float]:
    """The weights in a match strip's tooltips ('piece: 0.123'), in order of its pieces."""
    return [float(w) for w in re.findall(r"title='[^']*: ([0-9.]+)'", strip)]


def test_search_of_a_window_token_is_the_eager_query_and_shades_the_matches(long_model, monkeypatch):
    """The neuron view's query token (120, in the window) searched in a corpus: its vector from a block-wise pass
    (BLOCKWISE_FROM lowered below N), the matches those of the eager query, shaded by head 1's attention from them."""
    folder, text, _ = long_model
    lm = load_model(folder)
    index = build_index(lm, CLASSROOM_SINGLE, IndexOptions(0))
    expected = index.search(query_of(lm, text, None, 119, index.options), 4)  # N <= BLOCKWISE_FROM: eager
    passes = []
    monkeypatch.setattr(vectors, "BLOCKWISE_FROM", 512)
    run = vectors.run_blockwise
    monkeypatch.setattr(
        vectors, "run_blockwise", lambda *a, **k: passes.append(a[1]["input_ids"].shape) or run(*a, **k)
    )
    at = open_live(
        model=folder, a=text, b="", view="neuron", layer="1", head="2", start="101", end="164", token="120",
        find="1", corpus="classroom-single", k="4",
    )  # fmt: skip
    assert passes == [(1, N)]  # the query's one pass, block-wise
    assert any(c.value.startswith("Query: piece 120 of the input above, layer output, layer 1") for c in at.caption)
    strips = [m.value for m in at.markdown if "attn-strip" in m.value]
    places = [(m.input + 1, m.position + 1) for m in expected.matches]
    assert [tuple(map(int, re.findall(r"input (\d+), token (\d+)", s)[0])) for s in strips] == places
    lines = read_corpus(CLASSROOM_SINGLE)
    for strip, match in zip(strips, expected.matches):
        attention = run_encoded(lm, [encode(lm, lines[match.input].text_a)])[0].attentions  # [layers, heads, n, n]
        np.testing.assert_allclose(strip_weights(strip), attention[0, 0, match.position], rtol=0, atol=5e-4 + 1e-6)
    assert at.query_params["find"] == "1" and at.query_params["token"] == "120"


def test_search_in_the_head_view_picks_a_window_token_and_needs_a_window(long_model):
    folder, text, _ = long_model
    at = open_live(
        model=folder, a=text, b="", view="head", layer="2", heads="1,3", start="101", end="164", token="130",
        find="1", corpus="classroom-single", k="3", fvec="heads",
    )  # fmt: skip
    assert at.selectbox(key="live_token").value == 130
    assert any(
        c.value.startswith("Query: piece 130 of the input above, heads shown, layer 2, heads 1, 3") for c in at.caption
    )
    assert len([m for m in at.markdown if "attn-strip" in m.value]) == 3
    at = open_live(model=folder, a=text, b="", view="head", layer="2", find="1", corpus="classroom-single")
    assert any("Choose a window" in i.value and "then a query token within it" in i.value for i in at.info)
    assert not [m for m in at.markdown if "attn-strip" in m.value]
