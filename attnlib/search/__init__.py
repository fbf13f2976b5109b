"""Corpus search by example (METHODS §16): an index of a corpus's token vectors and the tokens most like a query."""

from attnlib.search.by_example import (
    CorpusIndex,
    IndexOptions,
    SearchError,
    SearchOptions,
    SearchResult,
    build_index,
    search_corpus,
    search_index,
)

__all__ = [
    "CorpusIndex",
    "IndexOptions",
    "SearchError",
    "SearchOptions",
    "SearchResult",
    "build_index",
    "search_corpus",
    "search_index",
]
