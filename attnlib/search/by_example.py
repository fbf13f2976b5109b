"""Corpus search by example (METHODS §16; exBERT, Hoover et al. 2020): an index of every non-special position of a
corpus for one layer (or the embedding output) and mode, and the k positions most like a query token by cosine, with
the counts of their UPOS and DEPREL and of what each head makes them attend to most.

- mode hidden: the layer's output `hidden_states[l + 1][t]` (`hidden_states[0]` for the embedding output);
- mode heads: the concatenated context vectors c[l, h, t] of a set of heads (METHODS §15), taken where the attention
  output projection reads them (attnlib.core.replay), for every family of attnlib.core.families.

An index is built in one batched pass (`build.fill_index`, a Fill run as a core.engines.Scale says). It keeps
the vectors normalised, rounded to float16 (or float32) as its file stores them and held as float32 for the
matrix-vector product of search, and per position only what search and the summaries need: its
input, position, piece and word, the gold UPOS and DEPREL of a CoNLL-U corpus, and the key each head of the layer
attends to most. A heads index keeps every head it was built for, each row normalised over them with each head's
part of the norm: a search over any subset S of them is the exact cosine over S, from the same index. Search is
exact: one float32 matrix-vector product over every row, the top k by score, ties by (input, position).

The package's modules: options (what an index holds), vectors (the model's vectors, the query), index (CorpusIndex:
data and file), build (build_index), scoring (the search); this one searches an index, or a corpus indexed on the way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attnlib.analyses.base import Inputs
from attnlib.core.batches import Progress
from attnlib.core.errors import SearchError as SearchError  # part of this module's API
from attnlib.core.model import LoadedModel, load_model
from attnlib.search.build import build_index
from attnlib.search.index import CorpusIndex, IndexedInput, IndexFileError, IndexRows
from attnlib.search.options import DEFAULT_K, FLOAT16_SCORE_BOUND, IndexOptions, SearchOptions
from attnlib.search.scoring import Match, SearchResult, cosine_scores, top_k
from attnlib.search.vectors import Query, hidden_index, query_of, runs_blockwise

__all__ = [
    "FLOAT16_SCORE_BOUND",
    "CorpusIndex",
    "IndexFileError",
    "IndexOptions",
    "IndexRows",
    "IndexedInput",
    "Match",
    "Query",
    "SearchError",
    "SearchOptions",
    "SearchResult",
    "build_index",
    "cosine_scores",
    "hidden_index",
    "query_of",
    "runs_blockwise",
    "search_corpus",
    "search_index",
    "top_k",
]


def search_index(
    lm: LoadedModel,
    index: CorpusIndex,
    text: str,
    token: int,
    *,
    pair: str | None = None,
    k: int = DEFAULT_K,
    heads: Sequence[int] | None = None,
) -> SearchResult:
    """Search an index with piece `token` of a typed text, its vector made as the index's rows were (layer, mode,
    heads); `heads`: the subset S of a heads index's heads to score (default: all it holds)."""
    index.check(lm, heads=heads)
    return index.search(query_of(lm, text, pair, token, index.options), k, heads)


def search_corpus(
    model: str | LoadedModel,
    text: str,
    token: int,
    corpus: Inputs | None = None,
    *,
    pair: str | None = None,
    index: CorpusIndex | None = None,
    k: int = DEFAULT_K,
    conllu: bool = False,
    limit: int | None = None,
    progress: Progress | None = None,
    **options: Any,
) -> SearchResult:
    """Search a corpus (or an index already built: options given must be its own) for the positions most like piece
    `token` (0-based, [CLS] = 0) of `text`; the index options (layer, embeddings, heads, dtype, all_punct) as keywords.

    >>> attnlib.search_corpus(lm, "The cat sat on the mat.", 5, corpus=EWT_DEV, layer=2, heads="1,4").to_json()"""
    lm = model if isinstance(model, LoadedModel) else load_model(model)
    wanted = IndexOptions(**options).for_model(lm.facts)
    if index is None:
        if corpus is None:
            raise SearchError("give a corpus to index, or an index.")
        index = build_index(lm, corpus, wanted, conllu=conllu, limit=limit, progress=progress)
    elif options:
        index.check(lm, options=wanted)
    heads = wanted.head_list(lm.facts.n_heads) if wanted.heads else None
    return search_index(lm, index, text, token, pair=pair, k=k, heads=heads)
