"""The search of METHODS §16: the exact cosine of a query with every candidate of an index (over any subset of a
heads index's heads), the top k, ties by (input, position), and the counts of the matches' labels and of what each
head makes them attend to most."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnlib.core.errors import SearchError
from attnlib.results.files import malformed
from attnlib.search.options import DEFAULT_K
from attnlib.search.vectors import Query

if TYPE_CHECKING:
    from attnlib.search.index import CorpusIndex

SCORE_BLOCK = 8192  # rows widened to float32 at a time when scoring a float16 index


def cosine_scores(vectors: np.ndarray, query: np.ndarray, block: int = SCORE_BLOCK) -> np.ndarray:
    """vectors [N, dims] @ query [dims] in float32; float16 rows are widened block by block (NumPy's float16 to
    float32 conversion is scalar: 5x the matrix-vector product, which is why an index holds its rows as float32)."""
    query = np.asarray(query, np.float32)
    if vectors.dtype == np.float32:
        return vectors @ query
    out = np.empty(len(vectors), np.float32)
    for start in range(0, len(vectors), block):
        np.matmul(vectors[start : start + block].astype(np.float32), query, out=out[start : start + block])
    return out


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the k highest scores, best first, ties by row (an index's rows are in (input, position) order)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, np.int64)
    kth = np.partition(scores, len(scores) - k)[len(scores) - k]
    chosen = np.flatnonzero(scores >= kth)
    return chosen[np.argsort(-scores[chosen], kind="stable")[:k]]


def ordered(counts: Counter) -> dict[str, int]:
    """Counts as a dict, largest first, ties by name."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass
class Match:
    """One match: input index and position (0-based, [CLS] = 0), its piece and word, cosine, gold labels."""

    input: int
    position: int
    token: str
    word: str
    score: float
    upos: str | None = None
    deprel: str | None = None


@dataclass
class HeadTargets:
    """For one head: counts of the class and of the UPOS of the key the matches attend to most."""

    head: int
    classes: dict[str, int]
    upos: dict[str, int] | None  # gold CoNLL-U only; a special-token key counts as its token, e.g. [SEP]


@dataclass
class Summary:
    """§16's counts over the k matches."""

    n: int
    upos: dict[str, int] | None
    deprel: dict[str, int] | None
    attends_to: list[HeadTargets]


@dataclass
class SearchResult:
    """A search: the query, what it searched, the heads (mode heads), the matches best first, the summaries."""

    query: dict
    index: dict
    heads: list[int]
    matches: list[Match]
    summary: Summary

    def to_json(self) -> dict:
        """The `search` command's JSON (0-based)."""
        return {
            "query": self.query,
            "index": self.index,
            "heads": self.heads,
            "matches": [asdict(m) for m in self.matches],
            "summary": asdict(self.summary),
        }

    @classmethod
    def from_json(cls, data: dict) -> SearchResult:
        """Read back to_json's JSON; ResultFileError when malformed."""
        with malformed("`search` result"):
            s = data["summary"]
            summary = Summary(
                int(s["n"]),
                s["upos"],
                s["deprel"],
                [HeadTargets(int(t["head"]), dict(t["classes"]), t["upos"]) for t in s["attends_to"]],
            )
            matches = [Match(**m) for m in data["matches"]]
            return cls(dict(data["query"]), dict(data["index"]), [int(h) for h in data["heads"]], matches, summary)


def candidate_scores(index: CorpusIndex, query: Query, heads: Sequence[int] | None = None) -> np.ndarray:
    """[N] float32 cosine of every candidate with the query (mode heads: over `heads`, default all it holds)."""
    if query.vector.shape[-1] != index.vectors.shape[1]:
        raise SearchError(
            f"the query has {query.vector.shape[-1]} dimensions and the index {index.vectors.shape[1]}: "
            "they are not of the same layer and mode."
        )
    if not index.heads:
        return cosine_scores(index.vectors, query.vector)
    chosen = list(index.heads) if heads is None else sorted(set(heads))
    index.check(heads=chosen)
    slots = [index.heads.index(h) for h in chosen]
    d = index.vectors.shape[1] // len(index.heads)
    q = np.zeros_like(query.vector)
    for s in slots:
        q[s * d : (s + 1) * d] = query.vector[s * d : (s + 1) * d]
    q_norm = float(np.sqrt(np.square(query.head_norms[slots]).sum()))  # type: ignore[index]
    x_norm = np.sqrt(np.square(index.head_norms[:, slots]).sum(axis=1))
    dots = cosine_scores(index.vectors, q)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = dots / (x_norm * q_norm)
    return np.where(x_norm * q_norm > 0, out, 0.0).astype(np.float32)


def search(index: CorpusIndex, query: Query, k: int = DEFAULT_K, heads: Sequence[int] | None = None) -> SearchResult:
    """The top k candidates by cosine (ties by input, then position) and the §16 summaries of them."""
    if k < 1:
        raise SearchError(f"k must be at least 1, not {k}.")
    scores = candidate_scores(index, query, heads)
    rows = top_k(scores, k)
    chosen = tuple(index.heads if heads is None else sorted(set(heads))) if index.heads else ()
    matches = [match(index, int(r), float(scores[r])) for r in rows]
    return SearchResult(
        query=query.describe(),
        index=index.summary_of_meta(),
        heads=list(chosen),
        matches=matches,
        summary=summarise(index, rows, chosen),
    )


def match(index: CorpusIndex, row: int, score: float) -> Match:
    """Candidate `row` as a match."""
    i, position = int(index.input[row]), int(index.position[row])
    word = index.word_of(i, position)
    return Match(
        input=i,
        position=position,
        token=str(index.tokens[index.token_start[i] + position]),
        word=str(index.words[index.word_start[i] + word]) if word >= 0 else "",
        score=score,
        upos=index.label_of(i, word, index.upos_names, index.word_upos),
        deprel=index.label_of(i, word, index.deprel_names, index.word_deprel),
    )


def summarise(index: CorpusIndex, rows: np.ndarray, heads: Sequence[int]) -> Summary:
    """§16: the matches' UPOS and DEPREL counts and, per head (those of S, else every head of the layer), the
    counts of the class and UPOS of the key each attends to most."""
    matches = [match(index, int(r), 0.0) for r in rows]
    layer_heads = [] if index.options.embeddings else list(heads or range(index.argmax.shape[1]))
    targets = []
    for h in layer_heads:
        classes: Counter[str] = Counter()
        upos: Counter[str] = Counter()
        for r in rows:
            i, key = int(index.input[r]), int(index.argmax[r, h])
            classes[index.token_class_of(i, key)] += 1
            if index.gold:
                word = index.word_of(i, key)
                upos[index.label_of(i, word, index.upos_names, index.word_upos) or index.input_tokens(i)[key]] += 1
        targets.append(HeadTargets(h, ordered(classes), ordered(upos) if index.gold else None))
    return Summary(
        n=len(matches),
        upos=ordered(Counter(m.upos for m in matches if m.upos is not None)) if index.gold else None,
        deprel=ordered(Counter(m.deprel for m in matches if m.deprel is not None)) if index.gold else None,
        attends_to=targets,
    )
