"""bertviz's own calls, unchanged, with `from attnlib.views import head_view, model_view`: its positional and keyword
arguments, prettified tokens, display modes, html_action, the encoder-decoder form, and what an empty output says."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
import torch

from attnlib.views import View, head_view, model_view
from attnlib.views.canvas_html import head_color, quantize
from attnlib.views.inputs import kinds_of
from attnlib.views.model_view import pooled_maps, thumbnail_atlas
from support.views import page_data, unpack

# bertviz's signatures (bertviz/head_view.py and bertviz/model_view.py at jessevig/bertviz@d085ef5): name, default
BERTVIZ_HEAD_VIEW = [
    ("attention", None),
    ("tokens", None),
    ("sentence_b_start", None),
    ("prettify_tokens", True),
    ("layer", None),
    ("heads", None),
    ("encoder_attention", None),
    ("decoder_attention", None),
    ("cross_attention", None),
    ("encoder_tokens", None),
    ("decoder_tokens", None),
    ("include_layers", None),
    ("html_action", "view"),
]
BERTVIZ_MODEL_VIEW = [
    ("attention", None),
    ("tokens", None),
    ("sentence_b_start", None),
    ("prettify_tokens", True),
    ("display_mode", "dark"),
    ("encoder_attention", None),
    ("decoder_attention", None),
    ("cross_attention", None),
    ("encoder_tokens", None),
    ("decoder_tokens", None),
    ("include_layers", None),
    ("include_heads", None),
    ("html_action", "view"),
]
TOKENS = ["[CLS]", "the", "cat", "[SEP]", "sat", "[SEP]"]
SOURCE = ["▁Das", "▁Haus", "▁ist", "</s>"]  # the encoder's tokens
TARGET = ["<pad>", "▁The", "▁house"]  # the decoder's


def softmax_maps(seed: int, layers: int, heads: int, rows: int, cols: int) -> np.ndarray:
    """Attention-like maps [layers, heads, rows, cols]: a softmax of random numbers over each row."""
    x = np.exp(np.random.default_rng(seed).normal(size=(layers, heads, rows, cols)) * 2)
    return (x / x.sum(-1, keepdims=True)).astype(np.float32)


def hf_style(maps: np.ndarray) -> tuple:
    """What a transformers model returns: a tuple of per-layer tensors [1, heads, rows, cols]."""
    return tuple(torch.from_numpy(layer[None]) for layer in maps)


@pytest.fixture(scope="module")
def encoder_decoder() -> dict:
    """bertviz's encoder-decoder keywords: 2 layers, 3 heads; 4 source tokens, 3 target tokens."""
    return {
        "encoder_attention": hf_style(softmax_maps(1, 2, 3, 4, 4)),
        "decoder_attention": hf_style(softmax_maps(2, 2, 3, 3, 3)),
        "cross_attention": hf_style(softmax_maps(3, 2, 3, 3, 4)),
        "encoder_tokens": SOURCE,
        "decoder_tokens": TARGET,
    }


def prettified(tokens: list[str]) -> list[str]:
    """bertviz's format_special_chars, written out again."""
    return [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in tokens]


def styles(html: str) -> str:
    """The page's CSS."""
    return "".join(re.findall(r"<style>(.*?)</style>", html, re.S))


def lines_of(part: dict) -> np.ndarray:
    """The byte weights of a kind's packed lines as one array [maps, rows, cols] (0 where a line was left out)."""
    packed = part["lines"]
    out = np.zeros((packed["m"], packed["rows"], packed["cols"]), np.uint8)
    for (k, i, j), byte in unpack(packed).items():
        out[k, i, j] = byte
    return out


def kept_bytes(maps: np.ndarray, cut: int) -> np.ndarray:
    """maps [layers, heads, rows, cols] as the page's bytes [layers * heads, rows, cols], those under `cut` as 0."""
    q = quantize(maps).reshape(-1, *maps.shape[-2:])
    return np.where(q >= cut, q, 0)


@pytest.mark.parametrize("view, bertviz", [(head_view, BERTVIZ_HEAD_VIEW), (model_view, BERTVIZ_MODEL_VIEW)])
def test_parameters_come_in_bertvizs_order_with_its_defaults(view, bertviz):
    params = list(inspect.signature(view).parameters.values())
    ours = [(p.name, p.default) for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert ours == bertviz


def test_a_third_positional_argument_is_sentence_b_start():
    maps = softmax_maps(4, 2, 2, 6, 6)
    data = page_data(head_view(hf_style(maps), TOKENS, 4).html)
    names = [k["name"] for k in data["kinds"]]
    assert names == ["All", *(f"Sentence {a} → Sentence {b}" for a, b in ("AA", "BB", "AB", "BA"))]
    a_to_b = data["kinds"][3]
    assert a_to_b["left"] == TOKENS[:4] and a_to_b["right"] == TOKENS[4:]
    assert a_to_b["leftPos"] == [1, 2, 3, 4] and a_to_b["rightPos"] == [5, 6]
    np.testing.assert_array_equal(lines_of(a_to_b), kept_bytes(maps[..., :4, 4:], 3))  # 0.01 * 255 -> bytes >= 3
    one = page_data(head_view(maps, TOKENS, 4, pair_filter="A→B").html)  # one filter alone, as before
    assert "kinds" not in one and one["left"] == TOKENS[:4] and one["right"] == TOKENS[4:]
    model = page_data(model_view(maps, TOKENS, 4).html)
    assert [k["name"] for k in model["kinds"]] == names and model["kinds"][4]["left"] == TOKENS[4:]


def test_tokens_are_prettified_as_bertviz_does_unless_asked_not_to():
    tokens = ["<s>", "Ġthe", "▁cat", "##s", "sat</w>"]
    maps = softmax_maps(5, 1, 2, 5, 5)
    shown = page_data(head_view(maps, tokens).html)
    assert shown["left"] == shown["right"] == ["<s>", " the", " cat", "##s", "sat"] == prettified(tokens)
    assert page_data(head_view(maps, tokens, None, False).html)["left"] == tokens  # prettify_tokens, 4th
    assert page_data(model_view(maps, tokens).html)["right"] == prettified(tokens)


def test_display_modes():
    maps = softmax_maps(6, 1, 2, 6, 6)
    light = model_view(maps, TOKENS, None, True, "light")  # display_mode, model_view's 5th argument
    dark = model_view(maps, TOKENS)  # bertviz's default
    assert "theme" not in page_data(light.html) and page_data(dark.html)["theme"] == "dark"
    assert "background:#fff" in styles(light.html) and "background:#000" not in styles(light.html)
    assert styles(dark.html).rindex("background:#000") > styles(dark.html).rindex("background:#fff")  # wins
    for view in (head_view, model_view):
        assert page_data(view(maps, TOKENS, display_mode="light").html).get("theme") is None
        with pytest.raises(ValueError, match=r"display_mode must be one of \['dark', 'light'\], not 'sepia'"):
            view(maps, TOKENS, display_mode="sepia")


def test_html_action_return_gives_the_html_and_displays_nothing(monkeypatch):
    import IPython.core.display_functions
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.append(a))
    monkeypatch.setattr(IPython.core.display_functions, "display", lambda *a, **k: shown.append(a))
    maps = softmax_maps(7, 2, 2, 6, 6)
    for view in (head_view, model_view):
        returned = view(hf_style(maps), TOKENS, html_action="return")
        assert isinstance(returned, View) and returned.data == returned.page() == returned.html
        assert returned.data.startswith("<!DOCTYPE html>") and page_data(returned.data)
        assert view(maps, TOKENS, html_action="view").data == returned.data
        with pytest.raises(ValueError, match="html_action must be one of"):
            view(maps, TOKENS, html_action="show")
    assert shown == []


def test_encoder_decoder_view_carries_three_maps_of_the_right_shapes(encoder_decoder):
    data = page_data(head_view(**encoder_decoder).html)
    kinds = {k["name"]: k for k in data["kinds"]}
    assert list(kinds) == ["Encoder", "Decoder", "Cross"]
    shapes = {name: (k["lines"]["m"], k["lines"]["rows"], k["lines"]["cols"]) for name, k in kinds.items()}
    assert shapes == {"Encoder": (6, 4, 4), "Decoder": (6, 3, 3), "Cross": (6, 3, 4)}  # 2 layers x 3 heads each
    assert kinds["Encoder"]["left"] == kinds["Encoder"]["right"] == prettified(SOURCE)
    assert kinds["Decoder"]["left"] == kinds["Decoder"]["right"] == prettified(TARGET)
    cross = kinds["Cross"]
    assert cross["left"] == prettified(TARGET) and cross["right"] == prettified(SOURCE)  # queries: the target
    assert cross["leftPos"] == [1, 2, 3] and cross["rightPos"] == [1, 2, 3, 4]
    expected = np.stack([t[0].numpy() for t in encoder_decoder["cross_attention"]])
    np.testing.assert_array_equal(lines_of(cross), kept_bytes(expected, 3))
    assert data["layer"] == 1 and cross["layers"] == [1, 2] and cross["heads"] == [1, 2, 3]


def test_the_kinds_builder_keeps_cross_attention_rectangular(encoder_decoder):
    kinds = kinds_of(None, None, prettify_tokens=False, **encoder_decoder)
    assert [(k.name, k.maps.shape) for k in kinds] == [
        ("Encoder", (2, 3, 4, 4)),
        ("Decoder", (2, 3, 3, 3)),
        ("Cross", (2, 3, 3, 4)),
    ]
    assert (kinds[2].left, kinds[2].right) == (TARGET, SOURCE)


@pytest.mark.parametrize(
    "given", [("cross_attention",), ("encoder_attention", "cross_attention"), ("decoder_attention",)]
)
def test_any_of_the_three_may_be_given(encoder_decoder, given):
    args = {k: v for k, v in encoder_decoder.items() if k in given or k.endswith("tokens")}
    data = page_data(head_view(**args).html)
    names = [name.split("_")[0].capitalize() for name in given]
    if len(given) == 1:  # one kind: no select, its fields at the top level
        assert "kinds" not in data
        cross = given == ("cross_attention",)
        assert data["left"] == prettified(TARGET) and data["right"] == prettified(SOURCE if cross else TARGET)
    else:
        assert [k["name"] for k in data["kinds"]] == names
    model = page_data(model_view(**args).html)
    assert [k["name"] for k in model.get("kinds", [])] == (names if len(given) > 1 else [])


def test_encoder_decoder_model_view(encoder_decoder):
    data = page_data(model_view(**encoder_decoder, include_heads=[2]).html)
    cross = data["kinds"][2]
    assert cross["name"] == "Cross" and (cross["L"], cross["H"], cross["mode"]) == (2, 1, "lines")
    assert cross["left"] == prettified(TARGET) and cross["right"] == prettified(SOURCE)
    assert cross["headNums"] == [3] and cross["colors"] == [head_color(2)] and "layerNums" not in cross
    expected = np.stack([t[0].numpy() for t in encoder_decoder["cross_attention"]])[:, 2:]
    np.testing.assert_array_equal(lines_of(cross), kept_bytes(expected, 6))  # 0.02 * 255 -> bytes >= 6


def test_a_long_cross_attention_becomes_a_rectangular_heatmap():
    cross = softmax_maps(8, 2, 2, 30, 130)
    data = page_data(
        model_view(
            cross_attention=cross, encoder_tokens=[f"s{i}" for i in range(130)], decoder_tokens=list("t" * 30)
        ).html
    )
    assert data["mode"] == "heat" and data["block"] == 3 and data["tile"] == [10, 44]  # ceil(130 / 64) = 3
    assert len(data["left"]) == 30 and len(data["right"]) == 130
    assert data["fullMax"] == pytest.approx(float(cross[0, 0].max()), abs=1e-6)


def test_max_pooling_a_rectangular_map_by_hand():
    maps = np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [0, 0, 0, 0, 9]], np.float32)  # 3 queries, 5 keys
    pooled, block = pooled_maps(maps, cells=2)  # the longer side, 5, into 2 cells: blocks of 3, zero padded
    assert block == 3
    np.testing.assert_array_equal(pooled, [[8, 10]])
    atlas, _, tile, _ = thumbnail_atlas(np.stack([np.stack([maps, maps * 0.5])]), cells=2)
    assert tile == (1, 2) and atlas.shape == (1, 4)


def test_layers_and_heads_as_bertviz_names_them():
    maps = softmax_maps(9, 3, 4, 6, 6)
    head = page_data(head_view(maps, TOKENS, None, True, 2, [1, 3], include_layers=[1, 2]).html)
    assert head["layer"] == 3 and head["layers"] == [2, 3] and head["heads"] == [2, 4]
    np.testing.assert_array_equal(lines_of(head)[3], kept_bytes(maps[2:, 3:], 3)[0])  # layer 3, head 4: map 1 * 2 + 1
    model = page_data(model_view(maps, TOKENS, include_layers=[0, 2], include_heads=[3, 1], layer=2, head=1).html)
    assert (model["L"], model["H"], model["sel"]) == (2, 2, [1, 1])
    assert model["layerNums"] == [1, 3] and model["headNums"] == [4, 2]
    np.testing.assert_array_equal(lines_of(model)[2], kept_bytes(maps[2:, 3:], 6)[0])  # layer 3, head 4
    with pytest.raises(ValueError, match="not one of those drawn"):
        model_view(maps, TOKENS, include_layers=[1], layer=0)
    with pytest.raises(ValueError, match="not both"):
        head_view(maps, TOKENS, include_layers=[1], layers=[1])


@pytest.mark.parametrize("view", [head_view, model_view])
@pytest.mark.parametrize("attention", [(), [], None])
def test_an_empty_output_says_what_to_pass(view, attention):
    with pytest.raises(ValueError) as raised:
        view(attention, TOKENS)
    message = str(raised.value)
    assert "outputs.attentions" in message and "output_attentions=True" in message
    assert "encoder_attention=outputs.encoder_attentions" in message
    assert "decoder_attention=outputs.decoder_attentions" in message
    assert "cross_attention=outputs.cross_attentions" in message


@pytest.mark.parametrize(
    "change, message",
    [
        ({"attention": hf_style(softmax_maps(0, 1, 1, 6, 6)), "tokens": TOKENS}, "not both"),
        ({"encoder_tokens": None}, "encoder_tokens: give them for encoder_attention"),
        ({"decoder_tokens": TARGET[:2]}, "decoder_tokens: 2 tokens for attention over 3 positions"),
        ({"sentence_b_start": 2}, "sentence_b_start and pair_filter are for `attention`"),
        ({"include_layers": [2]}, "encoder_attention: layer 2 is out of range"),
        ({"cross_attention": [None, None]}, "attn_implementation='eager'"),
    ],
)
def test_bad_encoder_decoder_calls_are_named(encoder_decoder, change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        head_view(**{**encoder_decoder, **change})


def test_a_tiny_t5s_outputs_as_they_come():
    """A real encoder-decoder's outputs: 2 encoder and 3 decoder layers, cross attention [1, heads, target, source]."""
    from transformers import T5Config, T5Model

    sizes = {"d_model": 16, "d_kv": 4, "d_ff": 24, "num_heads": 2, "vocab_size": 32}
    config = T5Config(num_layers=2, num_decoder_layers=3, attn_implementation="eager", **sizes)
    torch.manual_seed(0)
    with torch.no_grad():
        out = T5Model(config).eval()(
            input_ids=torch.tensor([[5, 6, 7, 1]]), decoder_input_ids=torch.tensor([[0, 8, 9]]), output_attentions=True
        )
    view = head_view(
        encoder_attention=out.encoder_attentions,
        decoder_attention=out.decoder_attentions,
        cross_attention=out.cross_attentions,
        encoder_tokens=SOURCE,
        decoder_tokens=TARGET,
    )
    kinds = page_data(view.html)["kinds"]
    assert [k["layers"] for k in kinds] == [[1, 2], [1, 2, 3], [1, 2, 3]]
    assert (kinds[2]["lines"]["rows"], kinds[2]["lines"]["cols"]) == (3, 4)
    assert repr(view) == "<Head view (Encoder, Decoder, Cross): 2 layers, 2 heads, 4 tokens>"
