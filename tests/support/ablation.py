"""The sentences the ablation tests (test_ablation.py, test_ablation_slow.py) run on."""

from __future__ import annotations

SENTENCES = ["The cat sat on the mat.", "I went to the store.", "At the store, I bought fresh strawberries."]
