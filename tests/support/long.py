"""Long inputs of a tiny ModernBERT (METHODS §19): the tiny model saved with as many positions as a test needs, and a
text of at least that many tokens (the model truncates it to exactly its positions)."""

from __future__ import annotations

from pathlib import Path

import torch

from support.models import tiny_config, tokenizer_for

WORDS = "the cat sat on the mat because it was warm and then it slept ."  # words of the tiny tokenizer's vocabulary


def save_long_modernbert(folder: Path, positions: int) -> Path:
    """The tiny ModernBERT (layer 0 global, layer 1 local) with `positions` positions, saved to folder; the folder."""
    from transformers import AutoModelForMaskedLM

    tokenizer = tokenizer_for("modernbert")
    tokenizer.model_max_length = positions
    config = tiny_config("modernbert", tokenizer)
    config.max_position_embeddings = positions
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def long_text(tokens: int) -> str:
    """A text of more than `tokens` tokens of the tiny tokenizer (each word of WORDS is one token or a few)."""
    words = WORDS.split()
    return " ".join(words[i % len(words)] for i in range(tokens + 8))
