"""The notebook views in Chromium, offline (every request but local ones refused): a saved page draws, the outputs a
notebook holds draw side by side in one document and fit their frames, and the head view's layer picker works."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attnlib.core.runner import run
from attnlib.views import head_view, model_view, neuron_view
from attnlib.views.canvas_html import quantize
from attnlib.views.deps import head_accuracy_heatmaps
from attnlib.views.neuron_view import neuron_view_html
from attnlib.views.special import layer_lines_with_head_dots
from support.browser import INK, PLOTTED, offline_page

CANVAS = {"head": "#cv", "model": "#grid", "neuron": "#cv"}


@pytest.fixture(scope="module")
def views(minilm) -> dict:
    r = run(minilm, "I went to the store.", "At the store, I bought fresh strawberries.")
    rng = np.random.default_rng(0)
    names = {"cls": "[CLS]", "sep": "[SEP]"}
    return {
        "head": head_view(r, display_mode="light"),  # INK counts what is darker than a white page
        "model": model_view(r, layer=1, head=2, display_mode="light"),
        "neuron": neuron_view(r, layer=1, head=2, query=3),
        "lines": layer_lines_with_head_dots({k: rng.random((6, 12)) for k in names}, names, "Shares", "share"),
        "heatmaps": head_accuracy_heatmaps(rng.random((6, 12, 2)), "nsubj", (1, 2, 0)),
    }


def drawn(frame, kind: str) -> int:
    """Dark pixels of a canvas view, or the traces of a figure, once there are any (0 if none after 30 s)."""
    check = f"() => ({INK})('{CANVAS[kind]}')" if kind in CANVAS else PLOTTED
    try:
        frame.wait_for_function(f"() => ({check})() > 0", timeout=30_000)
    except Exception:
        return 0
    return frame.evaluate(check)


def test_saved_pages_draw_offline(browser, views, tmp_path):
    for kind, view in views.items():
        path = view.save_html(tmp_path / f"{kind}.html")
        with offline_page(browser) as (page, asked):
            page.goto(path.as_uri())
            assert drawn(page.main_frame, kind) > (200 if kind in CANVAS else 0), kind
            assert all(url.startswith(("file:", "data:")) for url in asked), (kind, asked)


def test_notebook_outputs_draw_side_by_side_and_fit_their_frames(browser, views, tmp_path, screenshot_dir):
    """All outputs in one document, as JupyterLab, VS Code and an HTML export hold them: each draws in its own frame
    (the views' element ids meet no other's), and each frame takes its page's height."""
    outputs = "".join(f"<div class='output'>{view._repr_html_()}</div>" for view in views.values())
    path = tmp_path / "outputs.html"
    path.write_text(f"<!DOCTYPE html><html><body>{outputs}</body></html>", encoding="utf-8")
    with offline_page(browser) as (page, asked):
        page.goto(path.as_uri())
        frames = [page.locator("iframe").nth(i) for i in range(len(views))]
        for (kind, _), frame in zip(views.items(), frames):
            content = frame.element_handle().content_frame()
            assert drawn(content, kind) > (200 if kind in CANVAS else 0), kind
            page.wait_for_function(
                "f => Math.abs(f.clientHeight - f.contentDocument.documentElement.getBoundingClientRect().height) < 2",
                arg=frame.element_handle(),
                timeout=10_000,
            )
        assert all(url.startswith(("file:", "data:")) for url in asked), asked
        page.screenshot(path=str(screenshot_dir / "notebook-outputs.png"), full_page=True)
        page.set_viewport_size({"width": 600, "height": 1000})  # narrower than the model view: it scrolls sideways
        for frame in frames:  # and no frame needs to scroll down
            page.wait_for_function(
                "f => f.contentDocument.documentElement.scrollHeight <= f.contentDocument.documentElement.clientHeight",
                arg=frame.element_handle(),
                timeout=10_000,
            )


def test_head_view_layer_picker_switches_layers(browser, views, tmp_path):
    path = views["head"].save_html(tmp_path / "head.html")
    pixels = "() => Array.from(document.querySelector('#cv').getContext('2d').getImageData(0, 0, 400, 400).data)"
    with offline_page(browser) as (page, _):
        page.goto(path.as_uri())
        assert drawn(page.main_frame, "head") > 200
        assert page.locator("#layer option").all_inner_texts() == [f"Layer {l}" for l in range(1, 7)]
        first = page.evaluate(pixels)
        page.select_option("#layer", label="Layer 5")
        assert page.evaluate(pixels) != first
        row = 4 + 18 * 3 + 9  # the middle of the fourth token's row (head_view.js: y0 = 4, rows of 18 px)
        page.locator("#cv").click(position={"x": 20, "y": row})  # pins that query token
        page.locator("#cv").hover(position={"x": page.evaluate("() => xr") + 5, "y": row})  # a key token's weights
        tip = page.locator("#tip").inner_text()
        assert tip.count("head 5-") == 12 and "head 1-" not in tip, tip


# Pixels of a canvas clearly brighter than the dark mode's black background: lines and labels.
LIT = """sel => { const d = document.querySelector(sel).getContext('2d').getImageData(0, 0, 400, 200).data; let k = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] > 60 || d[i + 1] > 60 || d[i + 2] > 60) k++; return k; }"""


def test_encoder_decoder_head_view_switches_to_cross_attention(browser, tmp_path, screenshot_dir):
    """bertviz's encoder-decoder call, dark by default: the select switches to cross attention, which draws the
    decoder's tokens on the left, the encoder's on the right, and the lines between them (a map of 3 x 4)."""
    rng = np.random.default_rng(0)

    def maps(rows: int, cols: int) -> np.ndarray:
        x = np.exp(rng.normal(size=(2, 3, rows, cols)) * 2)
        return (x / x.sum(-1, keepdims=True)).astype(np.float32)

    source, target = ["▁Das", "▁Haus", "▁ist", "▁klein", "</s>"], ["<pad>", "▁The", "▁house"]
    cross = maps(3, 5)
    view = head_view(
        encoder_attention=maps(5, 5),
        decoder_attention=maps(3, 3),
        cross_attention=cross,
        encoder_tokens=source,
        decoder_tokens=target,
    )
    path = view.save_html(tmp_path / "encoder-decoder.html")
    pixels = "() => Array.from(document.querySelector('#cv').getContext('2d').getImageData(0, 0, 400, 200).data)"
    with offline_page(browser) as (page, _):
        page.goto(path.as_uri())
        page.wait_for_function(f"() => ({LIT})('#cv') > 200", timeout=30_000)
        assert page.locator("#kind option").all_inner_texts() == ["Encoder", "Decoder", "Cross"]
        encoder = page.evaluate(pixels)
        page.select_option("#kind", label="Cross")
        assert page.evaluate("() => [Lb, Rb]") == [
            ["<pad>", " The", " house"],
            [" Das", " Haus", " ist", " klein", "</s>"],
        ]
        assert page.evaluate(pixels) != encoder and page.evaluate(f"() => ({LIT})('#cv')") > 200
        key = int(np.argmax(cross[0, 0, 2]))  # the strongest line from the last decoder token, in layer 1, head 1
        row = 4 + 18 * 2 + 9  # the third row's middle (head_view.js: y0 = 4, rows of 18 px)
        page.locator("#cv").click(position={"x": 20, "y": row})  # pins " house"
        page.locator("#cv").hover(position={"x": page.evaluate("() => xr") + 5, "y": 4 + 18 * key + 9})
        tip = page.locator("#tip").inner_text()
        assert f"house → {source[key].replace('▁', ' ')}  (position {key + 1})" in tip, tip
        weight = float(re.search(r"head 1-1: ([0-9.]+)", tip).group(1))
        assert abs(weight - quantize(cross[0, 0, 2, key]) / 255) < 1e-3, tip
        page.screenshot(path=str(screenshot_dir / "encoder-decoder-head-view.png"), full_page=True)


@contextlib.contextmanager
def neuron_page(browser, html: str, path: Path, screenshot: Path) -> Iterator:
    """A neuron view's page opened offline from path once it has drawn; its screenshot taken on the way out."""
    path.write_text(html, encoding="utf-8")
    with offline_page(browser) as (page, _):
        page.goto(path.as_uri())
        assert drawn(page.main_frame, "neuron") > 200
        yield page
        page.screenshot(path=str(screenshot), full_page=True)


def test_cross_attentions_neuron_view_draws_the_queries_left_of_the_keys(browser, tmp_path, screenshot_dir):
    """An encoder-decoder's cross-attention: the target's tokens (queries) in a column on the left, the chosen one
    marked, the source's tokens (keys) beside their vectors; hovering says which is which."""
    rng = np.random.default_rng(0)
    source, target = ["▁Das", "▁Haus", "▁ist", "▁klein", "</s>"], ["<pad>", "▁The", "▁house"]
    queries, keys = rng.normal(size=(3, 8)), rng.normal(size=(5, 8))
    html = neuron_view_html(queries, keys, source, 2, 0, 0, query_labels=target, scale=8**-0.5)
    with neuron_page(browser, html, tmp_path / "cross-neuron.html", screenshot_dir / "cross-neuron-view.png") as page:
        assert "query “▁house” (position 3 of the queries)" in page.locator("#ttl").inner_text()
        (left, rows_top, key_labels) = page.evaluate("() => [xl, y0, xk]")
        page.locator("#cv").hover(position={"x": 10, "y": rows_top + 16 * 1 + 8})  # rows of 16 px
        assert page.locator("#tip").inner_text() == "query ▁The (position 2)"
        page.locator("#cv").hover(position={"x": key_labels + 2, "y": rows_top + 16 * 4 + 8})
        assert page.locator("#tip").inner_text().startswith("</s> (position 5)")
        assert left < key_labels


def test_a_windows_neuron_view_numbers_its_keys_in_the_whole_input(browser, tmp_path, screenshot_dir):
    """A long input's window (keys 4-7 of 10): the query's and the keys' positions are those of the whole input, and
    the hint gives the weight the window's keys receive from the whole row's softmax."""
    rng = np.random.default_rng(0)
    queries, keys = rng.normal(size=(10, 8)), rng.normal(size=(10, 8))
    labels = [f"t{i + 1}" for i in range(10)]
    html = neuron_view_html(queries, keys, labels, 5, 0, 0, shown=(3, 7))
    scores = keys @ queries[5] / np.sqrt(8)
    mass = np.exp(scores[3:7]).sum() / np.exp(scores).sum()
    with neuron_page(browser, html, tmp_path / "window-neuron.html", screenshot_dir / "window-neuron-view.png") as page:
        assert "query “t6” (position 6)" in page.locator("#ttl").inner_text()
        assert f"positions 4–7 of 10, with the softmax over all 10 keys (their weights sum to {mass:.4f})" in (
            page.locator("#hint").inner_text()
        )
        rows_top, key_labels = page.evaluate("() => [y0, xk]")
        page.locator("#cv").hover(position={"x": key_labels - 4, "y": rows_top + 16 * 3 + 8})  # rows of 16 px
        assert page.locator("#tip").inner_text() == "t7 (position 7)"
