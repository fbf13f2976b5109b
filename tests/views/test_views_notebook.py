"""The notebook views: what they take (a RunResult or any model's arrays), what a notebook gets from them (an iframe
of a page that loads nothing, its JavaScript once), and that every figure builder's figure shows itself too."""

from __future__ import annotations

import html
import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlib.core.runner import run
from attnlib.views import Figure, as_figure, head_view, model_view, neuron_view
from attnlib.views.canvas_html import quantize
from attnlib.views.plotly_js import plotly_js
from support.results import fake_result
from support.views import assert_offline, page_data, unpack

VIEWS = Path(__file__).resolve().parents[2] / "attnlib" / "views"
PAIR = ("I went to the store.", "At the store, I bought fresh strawberries.")


def random_maps(rng: np.random.Generator, layers: int, heads: int, n: int) -> np.ndarray:
    """Attention-like maps [layers, heads, n, n]: non-negative rows that sum to 1."""
    x = rng.random((layers, heads, n, n)).astype(np.float32) ** 3
    return x / x.sum(-1, keepdims=True)


def srcdoc(output: str) -> str:
    """The page inside a notebook output's iframe."""
    match = re.fullmatch(r'<iframe srcdoc="([^"]*)" style="[^"]*" onload="[^"]*"></iframe>', output)
    assert match, output[:200]
    return html.unescape(match.group(1))


@pytest.fixture(scope="module")
def pair_result(minilm):
    return run(minilm, *PAIR)


def test_arrays_as_bertviz_takes_them_give_the_same_views_as_a_run_result(pair_result):
    r = pair_result
    b_start = int(np.flatnonzero(r.segments == 1)[0])
    hf_style = tuple(torch.from_numpy(layer[None]) for layer in r.attentions)  # [1, heads, n, n] per layer, as HF
    assert head_view(hf_style, r.tokens, sentence_b_start=b_start).html == head_view(r).html
    assert head_view(r.attentions, r.tokens, sentence_b_start=b_start).html == head_view(r).html
    by_list = model_view(list(r.attentions), r.tokens, b_start, layer=2, head=5)  # bertviz's third argument
    assert by_list.html == model_view(r, layer=2, head=5).html
    by_arrays = neuron_view(r.queries, r.keys, r.tokens, layer=1, head=3, query=4, attention=hf_style)
    assert by_arrays.html == neuron_view(r, layer=1, head=3, query=4).html
    assert page_data(by_arrays.html)["diff"] < 1e-5  # softmax(q·k/√d) of the arrays is the model's row


def test_head_view_of_an_hf_model_output(tiny_model):
    """Straight from a Hugging Face model's `outputs.attentions`: each layer's lines are that layer's weights."""
    lm = tiny_model
    encoded = lm.tokenizer("The cat sat on the mat.", return_tensors="pt")
    with torch.no_grad():
        attentions = lm.encoder(**encoded, output_attentions=True).attentions
    tokens = lm.tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    view = head_view(attentions, tokens)
    data = page_data(view.html)
    n_layers, n_heads, n = len(attentions), attentions[0].shape[1], len(tokens)
    assert data["layers"] == list(range(1, n_layers + 1)) and data["heads"] == list(range(1, n_heads + 1))
    lines = unpack(data["lines"])
    for layer in range(n_layers):
        expected = quantize(attentions[layer][0].numpy())
        for (k, i, j), byte in lines.items():
            if k // n_heads == layer:
                assert byte == expected[k % n_heads, i, j]
    kept = np.count_nonzero(quantize(torch.stack(attentions)[:, 0].numpy()) >= 3)  # 0.01 * 255 = 2.55: bytes >= 3
    shown = [t.replace("Ġ", " ").replace("▁", " ") for t in tokens]  # bertviz's prettify_tokens, on by default
    assert len(lines) == kept and data["left"] == data["right"] == shown and n == data["lines"]["rows"]
    assert page_data(head_view(attentions, tokens, prettify_tokens=False).html)["left"] == tokens


def test_head_view_carries_every_layer_and_opens_on_the_one_asked():
    rng = np.random.default_rng(3)
    maps = random_maps(rng, 3, 2, 4)
    result = fake_result(maps, ["[CLS]", "a", "b", "[SEP]"])
    data = page_data(head_view(result, layer=2).html)
    assert data["layer"] == 3 and data["layers"] == [1, 2, 3]
    lines = unpack(data["lines"])  # map li * heads + k is head k of the li-th layer drawn
    assert lines[(2 * 2 + 1, 3, 0)] == quantize(maps[2, 1, 3, 0])
    some = page_data(head_view(result, layers=[0, 2], heads=[1]).html)
    assert some["layers"] == [1, 3] and some["layer"] == 1 and some["heads"] == [2]
    assert unpack(some["lines"])[(1, 0, 2)] == quantize(maps[2, 1, 0, 2])


def test_head_view_html_keeps_one_layer_as_the_app_draws_it():
    attn = np.full((2, 3, 3), 1 / 3, np.float32)
    from attnlib.views.head_view import head_view_html

    data = page_data(head_view_html(attn, ["a", "b", "c"], [0, 1], layer=4, selected=0))
    assert data["layers"] == [5] and data["layer"] == 5 and len(data["selRows"]) == 2
    with pytest.raises(ValueError, match="not one of the layers"):
        head_view_html(attn[None], ["a", "b", "c"], [0, 1], layer=4, layers=[0])


def test_pair_filter_of_a_pair_given_as_arrays():
    rng = np.random.default_rng(4)
    maps = random_maps(rng, 1, 1, 5)
    data = page_data(head_view(maps, list("abcde"), sentence_b_start=3, pair_filter="A→B").html)
    assert data["left"] == ["a", "b", "c"] and data["right"] == ["d", "e"]
    assert unpack(data["lines"])[(0, 2, 1)] == quantize(maps[0, 0, 2, 4])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: head_view(m, list("abc")), "4 positions"),
        (lambda m: head_view(m), "give the tokens"),
        (lambda m: head_view(np.stack([m, m], axis=1), list("abcd")), "a batch of 2 inputs"),
        (lambda m: head_view(m[0], list("abcd")), r"expected \[layers\]"),
        (lambda m: head_view(m, list("abcd"), layer=2), "layer 2 is out of range"),
        (lambda m: head_view(m, list("abcd"), heads=[3]), "head 3 is out of range"),
        (lambda m: head_view(m, list("abcd"), pair_filter="A→B"), "single sentence"),
        (lambda m: head_view(m, list("abcd"), sentence_b_start=4), "sentence_b_start"),
        (lambda m: model_view(m[..., :3], list("abcd")), "square"),
        (lambda m: neuron_view(m, None, list("abcd")), "give the keys"),
        (lambda m: neuron_view(m, m[:, :1], list("abcd")), "differs from the queries"),
    ],
)
def test_bad_input_is_named(call, message):
    maps = random_maps(np.random.default_rng(5), 2, 2, 4)
    with pytest.raises(ValueError, match=message):
        call(maps)


def test_a_result_without_queries_has_no_neuron_view():
    result = fake_result(random_maps(np.random.default_rng(6), 1, 1, 3), ["[CLS]", "a", "[SEP]"])
    with pytest.raises(ValueError, match="capture_qk"):
        neuron_view(result)


def notebook_outputs(pair_result) -> dict[str, tuple[object, str]]:
    """Each kind of view and a figure, with the JavaScript file that only it carries."""
    from attnlib.views.special import entropy_figure

    rng = np.random.default_rng(7)
    return {
        "head": (head_view(pair_result), "head_view.js"),
        "model": (model_view(pair_result), "model_view.js"),
        "neuron": (neuron_view(pair_result), "neuron_view.js"),
        "figure": (entropy_figure(rng.random((6, 12)), rng.random((6, 12)), 2.5), ""),
    }


def test_a_notebook_gets_an_iframe_of_a_page_that_loads_nothing_and_holds_its_script_once(pair_result):
    for kind, (view, script) in notebook_outputs(pair_result).items():
        bundle = view._repr_mimebundle_()
        assert set(bundle) == {"text/html", "text/plain"} and bundle["text/html"] == view._repr_html_()
        page = srcdoc(bundle["text/html"])
        assert page == view.page()
        assert_offline(page.replace(plotly_js(), ""))  # the bundle's own text names URLs (links it may draw)
        if kind == "figure":
            assert page.count(plotly_js()) == 1 and page.count("Plotly.newPlot(") == 1
        else:
            assert "src=" not in page and "require" not in page
            assert page.count((VIEWS / "canvas_common.js").read_text()) == 1
            assert page.count((VIEWS / script).read_text()) == 1
            assert page.count("<script>") == 1 and plotly_js()[:300] not in page


def test_ipython_shows_our_page_not_plotlys_renderer(pair_result):
    """IPython (Jupyter, VS Code and Colab run it) formats each view as our iframe: for a figure, not through plotly's
    own display hook, which would pick a renderer (require.js in classic Notebook, a CDN in Colab)."""
    from IPython.core.interactiveshell import InteractiveShell

    formatter = InteractiveShell.instance().display_formatter
    for view, _ in notebook_outputs(pair_result).values():
        data, _ = formatter.format(view)
        assert data["text/html"] == view._repr_html_()
        assert "application/vnd.plotly.v1+json" not in data


def test_save_html_writes_the_page(pair_result, tmp_path):
    view = head_view(pair_result)
    assert view.save_html(tmp_path / "head.html").read_text(encoding="utf-8") == view.page()
    assert repr(view) == f"<Head view: 6 layers, 12 heads, {len(pair_result.tokens)} tokens>"


def test_every_figure_builder_returns_a_figure_that_shows_itself():
    """Each public function of attnlib.views that builds a plotly figure is wrapped so that its figure is a Figure
    (the helpers that take a figure to change it are not builders)."""
    import importlib
    import pkgutil

    import attnlib.views as views

    builders = []
    for info in pkgutil.iter_modules(views.__path__):
        module = importlib.import_module(f"attnlib.views.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ != module.__name__ or name.startswith("_"):
                continue
            if fn.__annotations__.get("return") == "go.Figure" and "fig" not in inspect.signature(fn).parameters:
                builders.append(fn)
                assert getattr(fn, "__wrapped__", None) is not None, f"{module.__name__}.{name} returns a go.Figure"
    assert len(builders) >= 25


def test_as_figure_keeps_the_figure_and_its_json():
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=[1, 2], y=[3, 4]), layout={"title": "t", "height": 300})
    before = fig.to_plotly_json()
    same = as_figure(fig)
    assert same is fig and isinstance(same, Figure) and isinstance(same, go.Figure)
    assert same.to_plotly_json() == before and same.frame_height() == 316 and same.summary() == "Figure: t"
    assert isinstance(same.update_layout(height=200), Figure) and same.frame_height() == 216
