"""Inputs and summaries of a circuit study (METHODS §22): a corrupted prompt made from a clean one (the first
occurrence of its longest repeated span replaced by random one-token words), and the mean Q-, K- and V-composition
from earlier heads into given receivers, at one model or over a model's training checkpoints."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from attnlib.analyses.compose import CompositionResult
from attnlib.analyses.roles import checkpoint_step, probe_words
from attnlib.core.errors import InputError
from attnlib.core.model import LoadedModel, load_model
from attnlib.core.ov_circuit import head_weights
from attnlib.core.runner import encode
from attnlib.results.shipped import INDUCTION_PAIRS as INDUCTION_PAIRS  # the trained decoder's pairs, for the pages
from attnlib.stats.composition import KINDS, composition_scores

if TYPE_CHECKING:
    import pandas as pd

TRIES = 5  # seeds tried before a corrupted prompt with as many tokens is given up


def longest_repeat(ids: Sequence[int]) -> tuple[int, int, int]:
    """(first start, later start, length) of the longest span of ids that occurs twice without overlapping, the
    earliest first occurrence among the longest; length 0 where no id repeats."""
    n = len(ids)
    best = (0, 0, 0)
    run = [0] * (n + 1)  # run[j]: the common length of the spans starting at i and at j (row i+1's, updated in place)
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            run[j] = min(run[j + 1] + 1, j - i) if ids[i] == ids[j] else 0
            if run[j] > best[2] or (run[j] == best[2] and run[j] and i <= best[0]):
                best = (i, j, run[j])
        run[i] = 0
    return best


def corrupted_prompt(lm: LoadedModel, text: str, seed: int = 0) -> str:
    """The clean prompt with the tokens of the first occurrence of its longest repeated span replaced by as many
    random one-token words, so that the prompt has as many tokens and the repeat no longer repeats; InputError in
    words where nothing repeats or no such replacement keeps the token count."""
    tok = lm.tokenizer
    if not text.strip():
        raise InputError("the clean prompt is empty: type one first.")
    if not getattr(tok, "is_fast", False):
        raise InputError(f"{lm.facts.name}'s tokenizer gives no character offsets: type the corrupted prompt.")
    found = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(found["input_ids"]), list(found["offset_mapping"])
    first, _, length = longest_repeat(ids)
    if length == 0:
        raise InputError(
            "the clean prompt repeats no token, so it has no first occurrence to replace: type the corrupted prompt."
        )
    start, end = int(offsets[first][0]), int(offsets[first + length - 1][1])
    lead = text[start : len(text) - len(text[start:].lstrip())]  # a space the first token's offsets include is kept
    n_clean = encode(lm, text).n
    used = {w.lower() for w in text.split()}
    for attempt in range(TRIES):
        words = [w for w in probe_words(tok, 2 * length + len(used), seed=seed + attempt) if w.lower() not in used]
        corrupted = text[:start] + lead + " ".join(words[:length]) + text[end:]
        if len(words) >= length and encode(lm, corrupted).n == n_clean:
            return corrupted
    raise InputError(
        f"no run of {length} random words replaced the first occurrence of the repeat with as many tokens: type the "
        "corrupted prompt."
    )


def receivers_mean(result: CompositionResult, receivers: Sequence[tuple[int, int]]) -> dict[str, float]:
    """Each kind's mean composition from every head of an earlier layer into the receivers (layer, head), 0-based;
    NaN where no receiver has an earlier layer."""
    values: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for layer, head in receivers:
        for kind in KINDS:
            values[kind].extend(np.asarray(getattr(result, kind))[:layer, :, layer, head].ravel().tolist())
    return {kind: float(np.mean(v)) if v else float("nan") for kind, v in values.items()}


def composition_over_checkpoints(names: Sequence[str], receivers: Sequence[tuple[int, int]]) -> pd.DataFrame:
    """One row per checkpoint (in the order given): its step, name, each kind's mean composition into the receivers
    from every earlier head, and 1/sqrt(d) (d the residual stream's width: about the score of random matrices, the
    baseline Elhage et al. compare with)."""
    import pandas as pd

    rows = []
    for index, name in enumerate(names):
        lm = load_model(name)
        found = composition_scores(head_weights(lm))
        means = receivers_mean(CompositionResult(found.q, found.k, found.v), receivers)
        rows.append({"step": checkpoint_step(name, index), "checkpoint": name, **means,
                     "baseline": 1 / np.sqrt(lm.facts.hidden_size)})  # fmt: skip
    return pd.DataFrame(rows)
