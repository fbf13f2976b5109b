"""What the search tests share: a few EWT dev sentences, the model's own vectors, and the brute-force check that
search/test_search.py runs on a layer's output (quick) and on the embedding output (slow)."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from attnlib.core.corpus import Sentence, read_conllu
from attnlib.core.runner import encode, model_inputs
from attnlib.results.shipped import EWT_DEV
from attnlib.search.by_example import IndexOptions, build_index, query_of

QUERY = "The cat sat on the mat."


@cache
def ewt_dev_head() -> tuple[Sentence, ...]:
    """The first 40 sentences of EWT dev, read once."""
    return tuple(read_conllu(EWT_DEV)[:40])


def sentences(lm, n: int = 6) -> list[Sentence]:
    """The first n of them."""
    return list(ewt_dev_head()[:n])


def own_vectors(lm, items, layer: int | None) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Every non-special position's hidden state from the model's own forward pass, one input at a time (float64)."""
    rows, where = [], []
    for i, item in enumerate(items):
        enc = encode(lm, item.text_a, item.text_b)
        with torch.no_grad():
            hidden = lm.encoder(**model_inputs(lm, [enc]), output_hidden_states=True).hidden_states
        x = hidden[0 if layer is None else layer + 1][0].double().numpy()
        for t in np.flatnonzero(~np.asarray(enc.special_mask)):
            rows.append(x[t])
            where.append((i, int(t)))
    return np.array(rows), where


def check_top_k_equals_brute_force_cosine(lm, layer: int | None) -> None:
    """float32 index, mode hidden (a layer's output, or the embedding output for layer None): the top 10 are those of
    a brute-force cosine over the model's own hidden states, unpadded, in float64."""
    items = sentences(lm)
    options = IndexOptions(layer=layer or 0, embeddings=layer is None, dtype="float32")
    index = build_index(lm, items, options, batch_size=4)
    own, where = own_vectors(lm, items, layer)
    assert [(int(i), int(p)) for i, p in zip(index.input, index.position)] == where
    query = query_of(lm, QUERY, None, 2, options)
    enc = encode(lm, QUERY)
    with torch.no_grad():
        hidden = lm.encoder(**model_inputs(lm, [enc]), output_hidden_states=True).hidden_states
    q = hidden[0 if layer is None else layer + 1][0, 2].double().numpy()
    brute = own @ q / (np.linalg.norm(own, axis=1) * np.linalg.norm(q))
    result = index.search(query, k=10)
    expected = sorted(range(len(brute)), key=lambda r: (-brute[r], r))[:10]
    # float32 scores of float32 vectors: within a few ulp of the float64 cosine
    np.testing.assert_allclose([m.score for m in result.matches], brute[expected], atol=1e-5)
    got = [(m.input, m.position) for m in result.matches]
    gaps = np.diff(np.sort(brute)[::-1][:11])
    if np.all(np.abs(gaps) > 1e-5):  # no near-tie within float32's reach: the very same order
        assert got == [where[r] for r in expected]
