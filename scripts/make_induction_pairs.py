"""Write data/pairs/induction_pairs.tsv: clean/corrupted pairs for `attnlib patch --pairs` on tiny-llama-induction
(METHODS §22). Clean: 20 random ordinary words, then their first 10 again; corrupted: 20 other words, then the same 10;
answer: the clean run's 11th word (what an induction head predicts after the repeated 10). Each text is checked to
re-tokenize to one token a word. Deterministic: `python scripts/make_induction_pairs.py`."""

from __future__ import annotations

from pathlib import Path

from attnlib.analyses.roles import probe_words
from attnlib.core.model import TRAINED_MODEL, load_model
from attnlib.core.runner import encode

PAIRS = 40
FIRST, REPEATED = 20, 10
OUT = Path(__file__).resolve().parents[1] / "data" / "pairs" / "induction_pairs.tsv"


def main() -> None:
    lm = load_model(TRAINED_MODEL)
    lines = []
    for seed in range(PAIRS):
        words = probe_words(lm.tokenizer, 2 * FIRST, seed=seed)
        first, other = list(words[:FIRST]), list(words[FIRST:])
        clean = " ".join(first + first[:REPEATED])
        corrupted = " ".join(other + first[:REPEATED])
        for text in (clean, corrupted):  # one token a word, so both runs have as many tokens
            n_words = len(text.split())
            assert encode(lm, text).n - (encode(lm, "x").n - 1) == n_words, text
        lines.append(f"{clean}\t{corrupted}\t {first[REPEATED]}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(lines)} pairs")


if __name__ == "__main__":
    main()
