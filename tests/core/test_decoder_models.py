"""The tiny decoder-only models of tests/support/models.py, saved and reloaded with transformers itself (not the
library's loader): one causal attention map per layer and query head, rows that sum to 1, nothing above the diagonal,
transformers' own sliding windows (a query at i sees keys j with 0 <= i - j < sliding_window) in Mistral's layers and
in Gemma 2's and Gemma 3's layer 0, and fast tokenizers whose special tokens and ids agree with the config."""

from __future__ import annotations

import pytest
import torch

from support.models import (
    DECODER_KINDS,
    DECODER_KV_HEADS,
    DECODER_SLIDING_LAYERS,
    DECODER_SPECIALS,
    DECODER_WINDOW,
    save_tiny,
)

SENTENCE = "The cat sat on the mat."
LAYERS, HEADS = 2, 4


@pytest.fixture(scope="module", params=DECODER_KINDS)
def decoder(request, tmp_path_factory):
    """Each decoder kind saved by save_tiny and read back by transformers' Auto classes, with eager attention, and
    its attention maps for SENTENCE."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    kind = request.param
    folder = save_tiny(kind, tmp_path_factory.mktemp(f"decoder-{kind}"))
    config = AutoConfig.from_pretrained(folder)
    config._attn_implementation = "eager"
    auto = AutoModelForSequenceClassification if kind == "llama-classifier" else AutoModelForCausalLM
    model = auto.from_pretrained(folder, config=config).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoded = tokenizer(SENTENCE, return_tensors="pt")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            output = model(**encoded, output_attentions=True)
    finally:
        torch.set_num_threads(threads)
    return dict(kind=kind, config=config, model=model, tokenizer=tokenizer, ids=encoded["input_ids"][0], output=output)


def test_one_causal_map_per_layer_and_query_head_whose_rows_sum_to_one(decoder):
    attentions = decoder["output"].attentions
    n = len(decoder["ids"])
    assert len(attentions) == LAYERS
    # float32 softmax: its n-term normaliser errs <= n * 2**-24, exp and division <= 4 ulps (2**-23); summed in float64
    tolerance = (n + 4) * 2**-23
    for weights in attentions:
        assert weights.shape == (1, HEADS, n, n)
        assert weights.dtype == torch.float32
        rows = weights.double().sum(-1)
        assert (rows - 1).abs().max().item() <= tolerance
        above = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        assert (weights[..., above] == 0).all(), "a weight above the diagonal (a later token) is not exactly 0"
    assert decoder["output"].logits.shape == ((1, 2) if decoder["kind"] == "llama-classifier" else (1, n, 600))


def test_sliding_windows_are_transformers_own(decoder):
    """A sliding layer keeps key j for query i when 0 <= i - j < sliding_window (masking_utils.sliding_window_overlay:
    kv_idx > q_idx - sliding_window, and causal); every other layer keeps the whole prefix."""
    kind, config = decoder["kind"], decoder["config"]
    n = len(decoder["ids"])
    assert n > DECODER_WINDOW, "the sentence must be longer than the window for the test to mean anything"
    sliding = DECODER_SLIDING_LAYERS.get(kind, ())
    if sliding:
        assert config.sliding_window == DECODER_WINDOW
    if kind in ("gemma2", "gemma3"):
        assert config.layer_types == ["sliding_attention", "full_attention"]
    i, j = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    outside = (i - j) >= DECODER_WINDOW  # before the window: below the diagonal, DECODER_WINDOW or more back
    inside = (i - j >= 0) & ~outside
    for layer, weights in enumerate(decoder["output"].attentions):
        assert (weights[..., inside] > 0).all(), f"layer {layer}: a weight inside the window is 0"
        if layer in sliding:
            assert (weights[..., outside] == 0).all(), f"layer {layer}: a weight outside the window is not exactly 0"
        else:
            assert (weights[..., outside] > 0).all(), f"layer {layer}: a full-attention weight is 0"


def test_query_heads_share_key_value_heads_as_the_family_does(decoder):
    kind, config, model = decoder["kind"], decoder["config"], decoder["model"]
    kv_heads = DECODER_KV_HEADS.get(kind, HEADS)
    assert getattr(config, "num_key_value_heads", HEADS) == kv_heads
    assert config.num_hidden_layers == LAYERS and config.num_attention_heads == HEADS and config.hidden_size == 32
    if hasattr(config, "head_dim"):
        assert config.head_dim == 8
    if kind in ("gemma2", "gemma3"):
        assert config.query_pre_attn_scalar == 8
    if kind == "gemma2":
        assert (config.attn_logit_softcapping, config.final_logit_softcapping) == (50.0, 30.0)
    if kind == "gpt-neox":
        assert config.rope_parameters["partial_rotary_factor"] == 0.25
    # the key projection's width: one head_dim (8) per key/value head
    keys = {
        name: module.out_features
        for name, module in model.named_modules()
        if name.endswith(("layers.0.self_attn.k_proj", "layers.0.self_attn.qkv_proj"))
    }
    if any(name.endswith("qkv_proj") for name in keys):  # Phi-3: queries, keys and values in one projection
        assert list(keys.values()) == [(HEADS + 2 * kv_heads) * 8]
    elif keys:
        assert list(keys.values()) == [kv_heads * 8]


def test_tokenizer_is_fast_and_agrees_with_the_config(decoder):
    kind, config, tokenizer, ids = decoder["kind"], decoder["config"], decoder["tokenizer"], decoder["ids"]
    specials = DECODER_SPECIALS[kind]
    assert tokenizer.is_fast
    assert tokenizer.model_max_length == 64
    assert config.vocab_size >= len(tokenizer)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        specials["bos"],
        specials["eos"],
        specials["pad"],
    )
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    if specials["add_bos"] is None:  # gpt2, gpt-neox, qwen2, qwen3: the text's own first token
        assert ids[0].item() not in tokenizer.all_special_ids
    else:  # the Llama-style kinds and OPT: the BOS, and nowhere else
        assert ids[0].item() == tokenizer.bos_token_id
        assert tokenizer.bos_token_id not in ids[1:].tolist()
    assert tokenizer.decode(ids, skip_special_tokens=True) == SENTENCE
    offsets = tokenizer(SENTENCE, return_offsets_mapping=True)["offset_mapping"]
    assert offsets[-1][1] == len(SENTENCE)
