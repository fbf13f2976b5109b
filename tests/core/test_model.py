"""Model loading: facts, masked-LM detection, and clear errors for what cannot be loaded."""

from __future__ import annotations

import pytest
import torch

from attnlib.core.model import ModelLoadError, load_model, resolve_model_source, size_text


def test_tiny_model_with_trained_head_reports_it(tiny_model):
    assert tiny_model.facts.has_mlm_head and tiny_model.mlm is not None
    assert tiny_model.facts.n_layers == 2 and tiny_model.facts.n_heads == 4 and tiny_model.facts.head_dim == 8


def test_encoder_saved_without_head_has_no_mlm(tmp_path):
    from transformers import BertConfig, BertModel

    from support.models import bert_tokenizer

    tokenizer = bert_tokenizer()
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
    ).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    assert lm.facts.has_mlm_head is False and lm.mlm is None


def test_folder_without_model_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match=r"config\.json"):
        load_model(str(tmp_path))


def test_local_folders_can_be_switched_off(tmp_path):
    with pytest.raises(ModelLoadError, match="switched off"):
        resolve_model_source(str(tmp_path), allow_local=False)


def test_unknown_hub_id_without_network_fails_fast(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"not reachable|not a model"):
        load_model("no-such-user/no-such-model-xyz")


def test_empty_name_is_refused():
    with pytest.raises(ModelLoadError, match="No model"):
        load_model("  ")


@pytest.mark.parametrize(
    ("parameters", "text"),
    [
        (22_713_216, "22.7 M parameters, about 87 MB in float32"),  # all-MiniLM-L6-v2: 4 bytes each, 86.6 MiB
        (2_000_000, "2.0 M parameters, about 7.6 MB in float32"),  # 7.63 MiB
        (110_000, "110,000 parameters, about 0.4 MB in float32"),  # 0.42 MiB: said "about 0 MB" before
        (10_000, "10,000 parameters, under 0.1 MB in float32"),  # 0.038 MiB
    ],
)
def test_size_text_says_a_small_model_size(parameters, text):
    assert size_text(parameters) == text
