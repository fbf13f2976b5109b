"""Tiny random models of every supported family, built from transformers' own config classes (2 layers, 4 heads,
hidden 32), each saved with a tokenizer whose special tokens match the config's ids. tests/conftest.py serves them as
fixtures; nothing here downloads anything."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from attnlib.model import bundled_model_path
from attnlib.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE

# every family the library supports, and fine-tuned (classification-head) checkpoints of two of them
FAMILY_KINDS = (
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "distilbert",
    "albert",
    "electra",
    "ernie",
    "deberta",
    "deberta-v2",
    "modernbert",
    "mpnet",
    "roformer",
    "bert-classifier",
    "deberta-v2-tokens",
)
BPE_KINDS = ("roberta", "xlm-roberta", "camembert")  # byte-level BPE with <s> ... </s>; the rest use WordPiece
SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
MODERNBERT_WINDOW = 2  # half-width of ModernBERT's local layer: |i - j| <= 2, shorter than every test sentence


def bert_tokenizer():
    """The bundled model's uncased WordPiece tokenizer, 64 tokens at most."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path()))
    tokenizer.model_max_length = 64
    return tokenizer


@cache
def _bpe_vocabulary():
    from tokenizers import ByteLevelBPETokenizer

    lines = CLASSROOM_SINGLE.read_text().splitlines() + CLASSROOM_PAIRS.read_text().replace("\t", "\n").splitlines()
    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(
        lines, vocab_size=600, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    return bpe


def roberta_tokenizer():
    """A byte-level BPE tokenizer trained in-process on the classroom set, with RoBERTa's special tokens."""
    from tokenizers.processors import RobertaProcessing
    from transformers import RobertaTokenizerFast

    bpe = _bpe_vocabulary()
    bpe._tokenizer.post_processor = RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>"))
    )
    return RobertaTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        model_max_length=64,
    )


def tokenizer_for(kind: str):
    """The tokenizer a tiny model of this kind is saved with."""
    return roberta_tokenizer() if kind in BPE_KINDS else bert_tokenizer()


def _ids(tokenizer) -> dict:
    """The config's special-token ids, from the tokenizer."""
    return dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id
    )


def tiny_config(kind: str, tokenizer):
    """A 2-layer, 4-head, hidden-32 config of this kind (vocabulary and special ids from the tokenizer)."""
    import transformers as tf

    vocab, ids = len(tokenizer), _ids(tokenizer)
    positions = dict(max_position_embeddings=66 if kind in (*BPE_KINDS, "mpnet") else 64)
    if kind in ("bert", "bert-classifier"):
        return tf.BertConfig(vocab_size=vocab, **SIZES, **positions, **ids)
    if kind in BPE_KINDS:
        config_class = {
            "roberta": tf.RobertaConfig,
            "xlm-roberta": tf.XLMRobertaConfig,
            "camembert": tf.CamembertConfig,
        }[kind]
        return config_class(vocab_size=vocab, **SIZES, **positions, **ids, type_vocab_size=1)
    if kind == "distilbert":
        return tf.DistilBertConfig(
            vocab_size=vocab,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            pad_token_id=ids["pad_token_id"],
            **positions,
        )
    if kind == "albert":  # one shared layer applied twice; embeddings narrower than the hidden size
        return tf.AlbertConfig(vocab_size=vocab, embedding_size=16, **SIZES, **positions, **ids, hidden_act="gelu_new")
    if kind == "electra":
        return tf.ElectraConfig(vocab_size=vocab, embedding_size=16, **SIZES, **positions, **ids)
    if kind == "ernie":
        return tf.ErnieConfig(vocab_size=vocab, **SIZES, **positions, **ids, use_task_id=True)
    if kind == "deberta":  # as microsoft/deberta-base: relative attention c2p|p2c, no absolute positions
        return tf.DebertaConfig(
            vocab_size=vocab,
            **SIZES,
            **positions,
            **ids,
            relative_attention=True,
            pos_att_type=["c2p", "p2c"],
            position_biased_input=False,
            max_relative_positions=-1,
            type_vocab_size=0,
        )
    if kind in ("deberta-v2", "deberta-v2-tokens"):  # as microsoft/deberta-v3-base, with 4 log buckets (not 256)
        return tf.DebertaV2Config(
            vocab_size=vocab,
            **SIZES,
            **positions,
            **ids,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            max_relative_positions=-1,
            position_buckets=4,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            type_vocab_size=0,
            num_labels=3,
        )
    if kind == "modernbert":  # layer 0 global, layer 1 local (|i - j| <= MODERNBERT_WINDOW)
        return tf.ModernBertConfig(
            vocab_size=vocab,
            **SIZES,
            **positions,
            **ids,
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            layer_types=["full_attention", "sliding_attention"],
            local_attention=2 * MODERNBERT_WINDOW,
        )
    if kind == "mpnet":
        return tf.MPNetConfig(vocab_size=vocab, **SIZES, **positions, **ids)
    if kind == "roformer":
        return tf.RoFormerConfig(vocab_size=vocab, **SIZES, **positions, **ids)
    raise ValueError(f"no tiny config for {kind!r}")


def tiny_model(kind: str, tokenizer):
    """A random model of this kind (seed 0): masked LM, or for the fine-tuned kinds a classification model."""
    import transformers as tf

    torch.manual_seed(0)
    config = tiny_config(kind, tokenizer)
    if kind == "bert-classifier":
        return tf.BertForSequenceClassification(config)
    if kind == "deberta-v2-tokens":
        return tf.DebertaV2ForTokenClassification(config)
    return tf.AutoModelForMaskedLM.from_config(config)


def save_tiny(kind: str, folder: Path) -> Path:
    """Write a tiny random model of this kind and its tokenizer to folder; the folder."""
    tokenizer = tokenizer_for(kind)
    model = tiny_model(kind, tokenizer)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_config_with_vocab(kind: str, vocab_size: int):
    """tiny_config's config of this kind with another vocabulary size."""
    config = tiny_config(kind, tokenizer_for(kind))
    config.vocab_size = vocab_size
    return config


def save_tiny_bert(folder, layers: int, seed: int):
    """A tiny random BERT of `layers` layers saved to a folder (the comparison's second model)."""
    from transformers import AutoModelForMaskedLM

    tokenizer = bert_tokenizer()
    tokenizer.model_max_length = 64
    config = tiny_config_with_vocab("bert", len(tokenizer))
    config.num_hidden_layers = layers
    torch.manual_seed(seed)
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
