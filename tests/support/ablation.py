"""What test_ablation.py and test_ablation_slow.py both use."""

from __future__ import annotations

SENTENCES = ["The cat sat on the mat.", "I went to the store.", "At the store, I bought fresh strawberries."]
