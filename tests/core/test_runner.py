"""The model runner: shapes, rows summing to 1, batched equals single, truncation, alignment, against transformers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.core.model import bundled_model_path
from attnlib.core.runner import InputError, encode, run, run_batches

PAIR = ("I went to the store.", "At the store, I bought fresh strawberries.")
SENTENCES = [
    ("The cat sat on the mat.", None),
    ("Unbelievably, the strawberries were eaten by the children before lunch.", None),
    PAIR,
    ("She said that he would come.", "He did not come."),
    ("Hi.", None),
]


def test_packaged_model_facts(minilm):
    f = minilm.facts
    assert (f.n_layers, f.n_heads, f.head_dim, f.hidden_size) == (6, 12, 32, 384)
    assert (f.cls_token, f.sep_token, f.max_length) == ("[CLS]", "[SEP]", 512)
    assert f.has_mlm_head is False  # all-MiniLM-L6-v2 is a sentence encoder: its checkpoint has no MLM head
    assert minilm.encoder.config._attn_implementation == "eager"
    assert not minilm.encoder.training


def test_run_pair_tokens_segments_and_shapes(minilm):
    r = run(minilm, *PAIR)
    assert r.tokens == [
        "[CLS]",
        "i",
        "went",
        "to",
        "the",
        "store",
        ".",
        "[SEP]",
        "at",
        "the",
        "store",
        ",",
        "i",
        "bought",
        "fresh",
        "straw",
        "##berries",
        ".",
        "[SEP]",
    ]
    assert r.segments.tolist() == [0] * 8 + [1] * 11
    assert r.cls_mask.nonzero()[0].tolist() == [0]
    assert r.sep_mask.nonzero()[0].tolist() == [7, 18]
    assert r.attentions.shape == (6, 12, 19, 19) and r.attentions.dtype == np.float32
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert r.queries.shape == r.keys.shape == (6, 12, 19, 32)
    assert r.words[13] == "strawberries" and r.word_ids[15] == r.word_ids[16] == 13
    assert not r.truncated


def test_attentions_equal_transformers_output(minilm):
    from transformers import AutoModel, AutoTokenizer

    path = str(bundled_model_path())
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(path)
    with torch.no_grad():
        ref = model(**tok(*PAIR, return_tensors="pt"), output_attentions=True).attentions
    ref = torch.stack(ref)[:, 0].numpy()
    np.testing.assert_allclose(run(minilm, *PAIR).attentions, ref, atol=1e-6)


def test_softmax_of_captured_queries_and_keys_gives_attention(minilm):
    r = run(minilm, *PAIR)
    scores = r.queries @ r.keys.transpose(0, 1, 3, 2) / np.sqrt(minilm.facts.head_dim)
    soft = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(soft / soft.sum(-1, keepdims=True), r.attentions, atol=1e-5)


def test_batched_equals_single(minilm):
    batched = list(run_batches(minilm, SENTENCES, batch_size=3))
    assert len(batched) == len(SENTENCES)
    for (a, b), rb in zip(SENTENCES, batched):
        single = run(minilm, a, b, capture_qk=False)
        assert rb.tokens == single.tokens
        np.testing.assert_allclose(rb.attentions, single.attentions, atol=1e-5)


def test_truncation_is_reported(minilm):
    r = run(minilm, "word " * 600, capture_qk=False)
    assert r.truncated and r.n == 512 and r.n_tokens_full == 602
    assert r.tokens[0] == "[CLS]" and r.tokens[-1] == "[SEP]"


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_empty_text_is_a_clear_error(minilm, text):
    with pytest.raises(InputError, match="empty"):
        encode(minilm, text)


def test_words_given_as_a_list_align_to_pieces(minilm):
    e = encode(minilm, ["Unbelievably", ",", "it", "worked"])
    assert e.words == ["Unbelievably", ",", "it", "worked"]
    pieces_of_first = [t for t, w in zip(e.tokens, e.word_ids) if w == 0]
    assert len(pieces_of_first) > 1 and "".join(pieces_of_first).replace("##", "") == "unbelievably"


def test_tiny_models_share_the_model_agnostic_path(tiny_model):
    r = run(tiny_model, *PAIR)
    f = tiny_model.facts
    assert r.attentions.shape == (f.n_layers, f.n_heads, r.n, r.n)
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
    assert r.tokens[0] == f.cls_token and r.tokens[-1] == f.sep_token
    assert r.cls_mask.sum() == 1 and r.sep_mask.sum() >= 2  # RoBERTa puts two </s> between the sentences
    assert set(r.segments.tolist()) == {0, 1}
    assert [w for w in r.words] == [
        "I",
        "went",
        "to",
        "the",
        "store",
        ".",
        "At",
        "the",
        "store",
        ",",
        "I",
        "bought",
        "fresh",
        "strawberries",
        ".",
    ]
    scores = r.queries @ r.keys.transpose(0, 1, 3, 2) / np.sqrt(f.head_dim)
    soft = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(soft / soft.sum(-1, keepdims=True), r.attentions, atol=1e-5)
    batched = list(run_batches(tiny_model, SENTENCES, batch_size=2))
    for (a, b), rb in zip(SENTENCES, batched):
        np.testing.assert_allclose(rb.attentions, run(tiny_model, a, b).attentions, atol=1e-5)


def test_tiny_model_split_words_keep_word_boundaries(tiny_model):
    e = encode(tiny_model, ["the", "store"], ["at", "the", "store"])
    assert e.words == ["the", "store", "at", "the", "store"]
    assert [w for w in e.word_ids if w is not None] == sorted(w for w in e.word_ids if w is not None)
    r = run(tiny_model, "x " * 200)
    assert r.truncated and r.n == tiny_model.facts.max_length
