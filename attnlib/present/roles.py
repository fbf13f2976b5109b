"""What the Head roles page and the Tour show of a head (METHODS §20): the probe as a text the Live page opens (random
words of the model's vocabulary, then the same words again), and the link that opens a head on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from attnlib.core.model import LoadedModel
from attnlib.present.tour import page_link

LINK_REPEAT = 20  # words in each repeat of the Live page's probe: an induction stripe, and a head view that reads


@dataclass(frozen=True)
class ProbeText:
    """A probe as text: its words, said twice; `exact` when the model's tokenizer reads it as one token per word
    (so an induction head's stripe lies exactly at offset 1 - s)."""

    words: tuple[str, ...]
    text: str
    exact: bool

    @property
    def length(self) -> int:
        """s: the words in one repeat."""
        return len(self.words)


def _ordinary_ids(tokenizer) -> set[int]:
    """The tokenizer's special and added tokens' ids."""
    return set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})


def _single(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def probe_words(tokenizer, length: int = LINK_REPEAT, seed: int = 0) -> tuple[str, ...]:
    """`length` distinct words of letters, each one ordinary token of the vocabulary that the tokenizer reads back as
    one token, with or without a space before it; drawn in a seeded random order."""
    special = _ordinary_ids(tokenizer)
    words: list[str] = []
    for token_id in np.random.default_rng(seed).permutation(len(tokenizer)):
        if int(token_id) in special:
            continue
        word = tokenizer.decode([int(token_id)]).strip()
        if len(word) < 2 or not (word.isascii() and word.isalpha()) or word.lower() in {w.lower() for w in words}:
            continue
        if len(_single(tokenizer, word)) == 1 and _single(tokenizer, " " + word) == [int(token_id)]:
            words.append(word)
            if len(words) == length:
                break
    return tuple(words)


def probe_text(lm: LoadedModel, length: int = LINK_REPEAT, seed: int = 0) -> ProbeText:
    """The probe as a text for the Live page: `length` random words, then the same words again."""
    words = probe_words(lm.tokenizer, length, seed)
    text = " ".join(words + words)
    ids = [i for i in _single(lm.tokenizer, text) if i not in _ordinary_ids(lm.tokenizer)]
    s = len(words)
    exact = len(ids) == 2 * s and ids[1:s] == ids[s + 1 :]
    return ProbeText(words, text, exact)


def live_head_link(model: str, text: str, layer: int, head: int) -> str:
    """The Live page's head view of one head (0-based) of `model` on `text`, that head alone drawn."""
    return page_link("", model=model, a=text, view="head", layer=layer + 1, head=head + 1, heads=head + 1)


def checkpoint_table(result: Any) -> pd.DataFrame:
    """One row per checkpoint of a roles result (`checkpoints` of its JSON): its step and path, each score's largest
    value over the heads (`max_<score>`, NaN where undefined) and its in-context gain (NaN without an LM head)."""
    rows = []
    for point in result.to_json()["checkpoints"] or []:
        row: dict[str, Any] = {"step": point["step"], "path": point["path"]}
        for name, values in point["scores"].items():
            row[f"max_{name}"] = np.nan if values is None else float(np.nanmax(np.asarray(values, float)))
        gain = point["in_context_gain"]
        rows.append({**row, "in_context_gain": np.nan if gain is None else float(gain)})
    return pd.DataFrame(rows)
