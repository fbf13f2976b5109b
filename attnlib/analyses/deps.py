"""The `deps` analysis: dependency-head accuracy of single attention heads against a fixed-offset baseline on gold
trees (METHODS §6-7, Clark Table 1)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np

from attnlib.analyses.base import Analysis, Options, option
from attnlib.core.batches import MADE_IN_POST_INIT
from attnlib.core.corpus import CorpusInput, Sentence
from attnlib.core.hooks import ATTENTION, Capture
from attnlib.core.model import LoadedModel
from attnlib.core.runner import RunResult
from attnlib.core.words import ROW_RULES, RowRule, word_groups, word_level_attention
from attnlib.results.files import ResultFileError, malformed, numeric_array

if TYPE_CHECKING:
    import pandas as pd

DIRECTIONS: tuple[str, str] = ("dep->head", "head<-dep")  # index 0: the dependent attends to its head
OFFSETS = np.array([-3, -2, -1, 1, 2, 3])  # baseline: predicted head = i + k; ties go to the first in this order
EXCLUDED_RELATIONS = ("root", "punct")  # never listed as their own row, but pooled in "all"
ALL = "all"

PAPER_MODELS = ("bert-base-uncased", "google-bert/bert-base-uncased")  # the model Clark et al. Table 1 is about
# Clark et al. (2019) Table 1, BERT-base uncased on WSJ dev (Stanford Dependencies). Layer-head are 1-based as printed;
# accuracies in percent; the closest UD label is ours (None where UD has no counterpart: prepositions attach as `case`).
CLARK_TABLE1: tuple[tuple[str, str | None, str, float, float, int], ...] = (
    # (paper relation, closest UD relation, layer-head, accuracy, baseline accuracy, baseline offset)
    ("all", "all", "7-6", 34.7, 26.7, 1),
    ("prep", None, "7-4", 66.7, 61.8, -1),
    ("pobj", None, "9-6", 76.3, 34.6, -2),
    ("det", "det", "8-11", 94.3, 51.7, 1),
    ("nn", "compound", "4-10", 70.4, 70.2, 1),
    ("nsubj", "nsubj", "8-2", 58.5, 45.5, 1),
    ("amod", "amod", "4-10", 75.6, 68.3, 1),
    ("dobj", "obj", "8-10", 86.8, 40.0, -2),
    ("advmod", "advmod", "7-6", 48.8, 40.2, 1),
    ("aux", "aux", "4-10", 81.1, 71.5, 1),
    ("poss", "nmod:poss", "7-6", 80.5, 47.7, 1),
    ("auxpass", "aux:pass", "4-10", 94.1, 82.5, 1),
    ("ccomp", "ccomp", "8-1", 48.8, 12.4, -2),
    ("mark", "mark", "8-2", 50.7, 14.5, 2),
    ("prt", "compound:prt", "6-7", 99.1, 91.4, -1),
)


def clark_table1() -> pd.DataFrame:
    """Clark et al. (2019) Table 1 (BERT-base uncased, WSJ dev): each paper relation with the closest UD label (None
    where UD has none), its best head (layer-head, 1-based), accuracy and baseline accuracy in percent, and offset."""
    import pandas as pd

    return pd.DataFrame(
        [
            {"paper relation": rel, "relation": ud, "paper head": head, "paper accuracy %": acc,
             "paper baseline offset": offset, "paper baseline accuracy %": base}
            for rel, ud, head, acc, base, offset in CLARK_TABLE1
        ]
    )  # fmt: skip


def paper_rows(relations: Sequence[str]) -> pd.DataFrame:
    """Clark et al. Table 1 for the UD relations given, by the closest UD label, accuracies as fractions."""
    paper = clark_table1()
    paper = paper[paper["relation"].isin(list(relations))].reset_index(drop=True)
    percent = {"paper accuracy %": "paper accuracy", "paper baseline accuracy %": "paper baseline accuracy"}
    for column in percent:
        paper[column] = paper[column] / 100
    paper = paper.rename(columns=percent)
    return paper[["relation", "paper relation", "paper head", "paper accuracy", "paper baseline offset",
                  "paper baseline accuracy"]]  # fmt: skip


def predict_heads(word_map: np.ndarray, causal: bool = False) -> np.ndarray:
    """1-based head predictions [2, ..., m] (dep->head, head<-dep) from word-level maps [..., m+2, m+2] with CLS first, SEP last.

    Causal maps (a decoder's, METHODS §18) predict from the visible side only: dep->head among earlier words, head<-dep
    among later ones, so the first word has no dep->head candidate and the last none for head<-dep (-1: wrong)."""
    inner = np.array(word_map[..., 1:-1, 1:-1], copy=True)
    m = inner.shape[-1]
    diagonal = np.arange(m)
    inner[..., diagonal, diagonal] = 0.0
    if causal:  # row i's candidates j < i and column i's rows j > i: both the strict lower triangle
        inner = np.where(np.tril(np.ones((m, m), bool), -1), inner, -np.inf)
    # np.argmax returns the first maximum, so ties go to the lowest index
    predicted = np.stack([inner.argmax(axis=-1), inner.argmax(axis=-2)]) + 1
    if causal and m:
        predicted[0, ..., 0] = predicted[1, ..., m - 1] = -1
    return predicted


def offset_hits(heads: Sequence[int] | np.ndarray) -> np.ndarray:
    """bool [len(OFFSETS), m]: whether head = i + k (1-based, inside 1..m) is word i's gold head."""
    gold = np.asarray(heads)
    m = len(gold)
    predicted = np.arange(1, m + 1)[None, :] + OFFSETS[:, None]
    return (predicted >= 1) & (predicted <= m) & (predicted == gold[None, :])


@dataclass(frozen=True)
class Baseline:
    """The best fixed offset for a set of dependents and its accuracy."""

    offset: int
    accuracy: float
    count: int


def best_offset_baseline(
    heads: Sequence[Sequence[int]], deprels: Sequence[Sequence[str]], relation: str = ALL
) -> Baseline:
    """Best offset (ties to the first of OFFSETS) for one relation, or every word with relation "all", over sentences."""
    hits = np.zeros(len(OFFSETS), dtype=np.int64)
    count = 0
    for sentence_heads, sentence_rels in zip(heads, deprels):
        chosen = np.array([relation == ALL or r == relation for r in sentence_rels], dtype=bool)
        hits += offset_hits(sentence_heads)[:, chosen].sum(axis=1)
        count += int(chosen.sum())
    best = int(hits.argmax())
    return Baseline(int(OFFSETS[best]), float(hits[best] / count) if count else 0.0, count)


def sentence_half(item: CorpusInput) -> int:
    """0 or 1 from a hash of the sentence's words: a fixed split, the same whoever adds it, whatever the order."""
    words = item.text_a if isinstance(item.text_a, str) else "\x1f".join(item.text_a)
    return hashlib.blake2b(words.encode("utf-8"), digest_size=1).digest()[0] & 1


def _present_words(result: RunResult, words: Sequence[str]) -> np.ndarray:
    """Indices of the sentence's words that got at least one wordpiece (a tokenizer may drop, e.g., a lone control char)."""
    present, j = [], 0
    for i, w in enumerate(words):
        if j < len(result.words) and result.words[j] == w:
            present.append(i)
            j += 1
    return np.array(present, dtype=np.int64)


def sentence_word_map(result: RunResult, words: Sequence[str], rule: RowRule = "mean") -> tuple[np.ndarray, np.ndarray]:
    """Word-level maps [L, H, m+2, m+2] (CLS, the m words, SEP) and a bool [m] mask of the words that had wordpieces."""
    m = len(words)
    # float64: near-ties between two words (relative gaps of a few 1e-7 occur in EWT) must not hang on float32 rounding
    word_map = word_level_attention(result.attentions.astype(np.float64), result.word_ids, rule)
    if word_map.shape[-1] == m + 2:
        return word_map, np.ones(m, dtype=bool)
    # A word without pieces keeps an all-zero row and column; its predictions are marked wrong by the caller. A special
    # token first goes to slot 0, any later one to slot m + 1 (a decoder may have neither: those stay zero).
    present = _present_words(result, words)
    units: list[int] = []
    for group in word_groups(result.word_ids):
        word = result.word_ids[group[0]]
        units.append((m + 1 if units else 0) if word is None else int(present[word]) + 1)
    if len(set(units)) < len(units):
        raise ValueError("dependency heads need one sentence with at most one special token before and after it.")
    full = np.zeros(word_map.shape[:-2] + (m + 2, m + 2), dtype=word_map.dtype)
    slots = np.array(units)
    full[..., slots[:, None], slots[None, :]] = word_map
    mask = np.zeros(m, dtype=bool)
    mask[present] = True
    return full, mask


@dataclass(frozen=True)
class HeadOnSentence:
    """One head's predicted heads on one sentence, against the gold arcs of one relation (or ALL)."""

    predicted: np.ndarray  # [m] 1-based predicted heads; -1 for a word without wordpieces
    focus: list[bool]  # [m] the relation's dependents
    hits: int  # dependents of the relation whose predicted head is their gold head

    @property
    def n_arcs(self) -> int:
        """How many of the sentence's arcs have the relation."""
        return sum(self.focus)


def head_on_sentence(
    word_map: np.ndarray,  # [L, H, m+2, m+2], as sentence_word_map gives
    present: np.ndarray,  # bool [m]
    sentence: Sentence,
    relation: str,
    layer: int,
    head: int,
    direction: str,
    causal: bool = False,
) -> HeadOnSentence:
    """What head (layer, head, 0-based) predicts for each word in one DIRECTIONS direction (from the visible side for
    a decoder), and its hits on the relation."""
    predicted = predict_heads(word_map[layer, head], causal)[DIRECTIONS.index(direction)]
    predicted[~present] = -1
    focus = [relation == ALL or r == relation for r in sentence.deprels]
    hits = sum(int(p == g) for p, g, f in zip(predicted, sentence.heads, focus) if f)
    return HeadOnSentence(predicted, focus, hits)


@dataclass(frozen=True)
class DependencyRow:
    """One row of the table: a relation's best head (0-based layer and head) against its best fixed offset."""

    relation: str
    count: int
    layer: int
    head: int
    direction: str
    accuracy: float
    baseline_offset: int
    baseline_accuracy: float
    ceiling: dict[str, float] | None = None  # a decoder's (§18): direction -> share of heads on its visible side

    @property
    def margin(self) -> float:
        return self.accuracy - self.baseline_accuracy


@dataclass
class DependencyTable:
    """The table with its corpus sizes; with held_out, heads and offsets were chosen on half 0 and scored on half 1."""

    rows: list[DependencyRow]
    n_sentences: int
    n_words: int
    n_skipped: int
    held_out: bool = False
    n_select_sentences: int = 0
    n_report_sentences: int = 0

    def as_json(self) -> dict:
        """The command line's JSON object."""
        return {
            "n_sentences": self.n_sentences,
            "n_words": self.n_words,
            "n_skipped": self.n_skipped,
            "rows": [_row_json(r) for r in self.rows],
        }

    def shown_frame(self) -> pd.DataFrame:
        """The table as the Dependency heads page shows and downloads it: heads 1-based, accuracies in percent; a
        decoder's ceilings last."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "relation": r.relation,
                    "count": r.count,
                    "best head": f"{r.layer + 1}-{r.head + 1}",
                    "layer": r.layer + 1,
                    "head": r.head + 1,
                    "direction": r.direction,
                    "accuracy %": 100 * r.accuracy,
                    "baseline offset": f"{r.baseline_offset:+d}",
                    "baseline accuracy %": 100 * r.baseline_accuracy,
                    "margin (points)": 100 * r.margin,
                }
                | ({} if r.ceiling is None else {f"ceiling {d} %": 100 * r.ceiling[d] for d in DIRECTIONS})
                for r in self.rows
            ]
        )


def _row_json(row: DependencyRow) -> dict:
    """One row's JSON object; `ceiling` only where there is one (a decoder's), so an encoder's rows read as before."""
    out = asdict(row)
    if row.ceiling is None:
        del out["ceiling"]
    return out


def visible_heads(heads: Sequence[int] | np.ndarray) -> np.ndarray:
    """bool [2, m]: whether word i's gold head (1-based; 0 = root) lies left of it (dep->head sees it in a causal
    map) and right of it (head<-dep does)."""
    gold = np.asarray(heads)
    position = np.arange(1, len(gold) + 1)
    return np.stack([(gold >= 1) & (gold < position), gold > position])


@dataclass
class _View:
    """Counts of one half, or of both summed."""

    totals: np.ndarray  # [R]
    head_hits: np.ndarray  # [R, L, H, 2]
    offset_hits: np.ndarray  # [R, K]
    visible: np.ndarray  # [R, 2]
    n_sentences: int
    n_words: int

    def relation(self, index: int | None) -> tuple[int, np.ndarray, np.ndarray]:
        """(dependents, head hits [L, H, 2], offset hits [K]) of one relation index, or pooled over all (None)."""
        if index is None:
            return int(self.totals.sum()), self.head_hits.sum(axis=0), self.offset_hits.sum(axis=0)
        return int(self.totals[index]), self.head_hits[index], self.offset_hits[index]

    def ceiling(self, index: int | None) -> dict[str, float] | None:
        """Per direction, the share of the relation's dependents (all pooled: None) whose head a causal map can see."""
        total = self.totals.sum() if index is None else self.totals[index]
        visible = self.visible.sum(axis=0) if index is None else self.visible[index]
        return {d: float(v / total) for d, v in zip(DIRECTIONS, visible)} if total else None


@dataclass
class DependencyCounts:
    """Accumulator: per relation and sentence half, correct predictions of every (layer, head, direction) and offset."""

    n_layers: int
    n_heads: int
    rule: RowRule = "mean"
    relations: list[str] = field(default_factory=list)
    causal: bool = False  # a decoder's maps: predictions from the visible side (METHODS §18)
    totals: np.ndarray = MADE_IN_POST_INIT  # [2, R] dependents
    head_hits: np.ndarray = MADE_IN_POST_INIT  # [2, R, L, H, 2] correct predictions, direction last (0 = dep->head)
    offset_hits: np.ndarray = MADE_IN_POST_INIT  # [2, R, K] correct baseline predictions per offset in OFFSETS
    visible: np.ndarray = MADE_IN_POST_INIT  # [2, R, 2] dependents whose gold head is left / right of them
    n_sentences: np.ndarray = field(default_factory=lambda: np.zeros(2, dtype=np.int64))
    n_words: np.ndarray = field(default_factory=lambda: np.zeros(2, dtype=np.int64))
    n_skipped: int = 0  # sentences longer than the model takes
    captures: ClassVar[frozenset[Capture]] = ATTENTION  # what each input's run holds for it

    def __post_init__(self) -> None:
        r = len(self.relations)
        if self.totals is None:
            self.totals = np.zeros((2, r), dtype=np.int64)
            self.head_hits = np.zeros((2, r, self.n_layers, self.n_heads, 2), dtype=np.int64)
            self.offset_hits = np.zeros((2, r, len(OFFSETS)), dtype=np.int64)
        if self.visible is None:
            self.visible = np.zeros((2, r, 2), dtype=np.int64)

    def _relation_ids(self, deprels: Sequence[str]) -> np.ndarray:
        """Index of each label, growing the count arrays for labels not seen before."""
        index = {r: i for i, r in enumerate(self.relations)}
        new = [r for r in dict.fromkeys(deprels) if r not in index]
        if new:
            for r in new:
                index[r] = len(self.relations)
                self.relations.append(r)
            grow = len(new)
            self.totals = np.concatenate([self.totals, np.zeros((2, grow), np.int64)], axis=1)
            self.head_hits = np.concatenate(
                [self.head_hits, np.zeros((2, grow) + self.head_hits.shape[2:], np.int64)], axis=1
            )
            self.offset_hits = np.concatenate([self.offset_hits, np.zeros((2, grow, len(OFFSETS)), np.int64)], axis=1)
            self.visible = np.concatenate([self.visible, np.zeros((2, grow, 2), np.int64)], axis=1)
        return np.array([index[r] for r in deprels], dtype=np.int64)

    def add(self, result: RunResult, item: CorpusInput) -> None:
        """Score every head on one sentence; a truncated sentence is only counted as skipped."""
        self.add_with_maps(result, item)

    def add_with_maps(self, result: RunResult, item: CorpusInput) -> tuple[np.ndarray, np.ndarray] | None:
        """add(), returning the sentence's word-level maps and word mask it scored (None when skipped)."""
        if not isinstance(item, Sentence) or item.text_b is not None:
            raise TypeError("Dependency counts need single sentences with gold or parsed heads.")
        if result.truncated:
            self.n_skipped += 1
            return None
        if result.attentions.shape[:2] != (self.n_layers, self.n_heads):
            raise ValueError(
                f"attention of shape {result.attentions.shape[:2]}, counts of ({self.n_layers}, {self.n_heads})"
            )
        m = len(item.heads)
        word_map, present = sentence_word_map(result, item.words, self.rule)
        predictions = predict_heads(word_map, self.causal)  # [2, L, H, m]
        if not present.all():
            predictions[..., ~present] = -1
        gold = np.asarray(item.heads)
        used, inverse = np.unique(self._relation_ids(item.deprels), return_inverse=True)
        onehot = np.zeros((m, len(used)), dtype=np.float32)
        onehot[np.arange(m), inverse] = 1.0
        # sums of 0/1 over at most a few hundred words are exact in float32, and BLAS makes them cheap
        head_hits = (predictions == gold).reshape(-1, m).astype(np.float32) @ onehot  # [2*L*H, U]
        head_hits = head_hits.reshape(2, self.n_layers, self.n_heads, len(used)).transpose(3, 1, 2, 0)
        half = sentence_half(item)
        self.head_hits[half, used] += head_hits.astype(np.int64)
        self.offset_hits[half, used] += (offset_hits(gold).astype(np.float32) @ onehot).T.astype(np.int64)
        self.visible[half, used] += (visible_heads(gold).astype(np.float32) @ onehot).T.astype(np.int64)
        self.totals[half, used] += onehot.sum(axis=0).astype(np.int64)
        self.n_sentences[half] += 1
        self.n_words[half] += m
        return word_map, present

    def merge(self, other: DependencyCounts) -> DependencyCounts:
        """Counts over both corpora (labels matched by name)."""
        if (self.n_layers, self.n_heads, self.rule, self.causal) != (
            other.n_layers,
            other.n_heads,
            other.rule,
            other.causal,
        ):
            raise ValueError("Only counts of the same model shape, kind and row rule can be merged.")
        out = DependencyCounts(
            self.n_layers,
            self.n_heads,
            self.rule,
            causal=self.causal,
            n_skipped=self.n_skipped + other.n_skipped,
            n_sentences=self.n_sentences + other.n_sentences,
            n_words=self.n_words + other.n_words,
        )
        for part in (self, other):
            ids = out._relation_ids(part.relations)
            out.totals[:, ids] += part.totals
            out.head_hits[:, ids] += part.head_hits
            out.offset_hits[:, ids] += part.offset_hits
            out.visible[:, ids] += part.visible
        return out

    def view(self, half: int | None = None) -> _View:
        """The counts of sentence half 0 or 1, or of all sentences (None)."""
        parts = slice(None) if half is None else slice(half, half + 1)
        return _View(
            self.totals[parts].sum(axis=0),
            self.head_hits[parts].sum(axis=0),
            self.offset_hits[parts].sum(axis=0),
            self.visible[parts].sum(axis=0),
            int(self.n_sentences[parts].sum()),
            int(self.n_words[parts].sum()),
        )

    def relation_order(self, min_count: int = 100) -> list[str]:
        """Relations by frequency in all sentences (ties by name), without root and punct, with >= min_count dependents."""
        totals = self.totals.sum(axis=0)
        chosen = [
            (-int(t), r) for r, t in zip(self.relations, totals) if r not in EXCLUDED_RELATIONS and t >= min_count
        ]
        return [r for _, r in sorted(chosen)]

    def _index(self, relation: str) -> int | None:
        return None if relation == ALL else self.relations.index(relation)

    def accuracy_grid(self, relation: str, half: int | None = None) -> np.ndarray:
        """Accuracy [L, H, 2] of every head and direction on one relation (NaN when it has no dependents)."""
        total, hits, _ = self.view(half).relation(self._index(relation))
        return hits / total if total else np.full(hits.shape, np.nan)

    def table(self, min_count: int = 100, held_out: bool = False) -> DependencyTable:
        """The "all" row, then each relation: best head and best offset, chosen on the same data or on the other half."""
        select = self.view(0 if held_out else None)
        report = self.view(1 if held_out else None)
        rows = []
        for relation in [ALL] + self.relation_order(min_count):
            index = self._index(relation)
            select_total, select_hits, select_offsets = select.relation(index)
            count, hits, offsets = report.relation(index)
            if select_total == 0 or count == 0:
                continue
            # flat argmax over C-ordered (layer, head, direction): ties go to the lowest layer, head, then dep->head
            layer, head, direction = np.unravel_index(int(select_hits.argmax()), select_hits.shape)
            k = int(select_offsets.argmax())
            rows.append(
                DependencyRow(
                    relation,
                    count,
                    int(layer),
                    int(head),
                    DIRECTIONS[direction],
                    float(hits[layer, head, direction] / count),
                    int(OFFSETS[k]),
                    float(offsets[k] / count),
                    report.ceiling(index) if self.causal else None,
                )
            )
        whole = self.view()
        return DependencyTable(
            rows, whole.n_sentences, whole.n_words, self.n_skipped, held_out, select.n_sentences, report.n_sentences
        )


DEPENDENCY_ARRAYS = {"totals": 2, "head_hits": 5, "offset_hits": 3, "n_sentences": 1, "n_words": 1}  # name -> rank
CAUSAL_ARRAYS = {"visible": 3}  # only a decoder's counts carry them


def dependency_counts_to_json(counts: DependencyCounts) -> dict:
    """Every count of a DependencyCounts, so a page can rebuild its tables and grids (`causal` and the ceilings' counts
    only for a decoder's, so an encoder's counts read as before)."""
    state = {f.name: getattr(counts, f.name) for f in fields(counts)}
    if not counts.causal:
        del state["causal"], state["visible"]
    return state


def dependency_counts_from_json(state: dict) -> DependencyCounts:
    """The DependencyCounts written by dependency_counts_to_json, shapes checked; ResultFileError when malformed."""
    with malformed("`deps` counts"):
        causal = bool(state.get("causal", False))
        if causal and "visible" not in state:
            raise ResultFileError("this decoder's `deps` counts have no ceilings ('visible'): compute them again.")
        ranks = DEPENDENCY_ARRAYS | (CAUSAL_ARRAYS if causal else {})
        arrays = {name: numeric_array(state[name], name, ndim, np.int64) for name, ndim in ranks.items()}
        relations = [str(r) for r in state["relations"]]
        layers, heads, r = int(state["n_layers"]), int(state["n_heads"]), len(relations)
        shapes = {
            "totals": (2, r),
            "head_hits": (2, r, layers, heads, 2),
            "offset_hits": (2, r, len(OFFSETS)),
            "n_sentences": (2,),
            "n_words": (2,),
            "visible": (2, r, 2),
        }
        for name in arrays:
            shape = shapes[name]
            if arrays[name].shape != shape:
                raise ResultFileError(f"{name!r} has shape {arrays[name].shape}, expected {shape}.")
        rule = str(state["rule"])
        if rule not in ROW_RULES:
            raise ResultFileError(f"row rule {rule!r} is not one of {', '.join(ROW_RULES)}.")
        return DependencyCounts(
            layers,
            heads,
            cast(RowRule, rule),
            relations,
            causal=causal,
            n_skipped=int(state["n_skipped"]),
            **arrays,
        )


@dataclass(frozen=True)
class DepsOptions(Options):
    """How a word's attention row is made from its pieces', and which relations the table lists (the counts hold
    every relation)."""

    min_count: int = option(
        100,
        "list relations with at least this many dependents (default %(default)s); 'all' is always listed",
        minimum=0,
        view=True,
    )
    rule: RowRule = option(
        "mean", "a word's row from its pieces' rows: their mean (the paper), the first's, or their maximum renormalised"
    )


@dataclass
class DepsResult:
    """A treebank's dependency counts (every head, relation and sentence half) and the table they give."""

    counts: DependencyCounts
    table: DependencyTable

    def to_json(self) -> dict:
        """The table: n_sentences (analysed), n_words, n_skipped (too long for the model), one row per relation."""
        return self.table.as_json()

    def for_options(self, options: DepsOptions) -> DepsResult:
        """The table at these options' minimum count."""
        return DepsResult(self.counts, self.counts.table(min_count=options.min_count))

    def state_json(self) -> dict:
        """Every count, so a page can make the table for any minimum count, the grids and the halves."""
        return dependency_counts_to_json(self.counts)

    @classmethod
    def from_json(cls, data: dict, state: dict | None) -> DepsResult:
        """The counts of a result file's state and its table; ResultFileError when malformed."""
        if state is None:
            raise ResultFileError("the `deps` result file has no counts (state).")
        with malformed("`deps` table"):
            rows = [DependencyRow(**row) for row in data["rows"]]
            table = DependencyTable(rows, int(data["n_sentences"]), int(data["n_words"]), int(data["n_skipped"]))
        return cls(dependency_counts_from_json(state), table)

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """The best head per relation against the best fixed offset (layers and heads 1-based); for a model of Clark et
        al.'s, beside their Table 1."""
        import pandas as pd

        frame = pd.DataFrame([asdict(r) for r in self.table.rows])
        frame.insert(0, "model", model)
        frame["layer"] += 1
        frame["head"] += 1
        tables = {"Best head per relation against the best fixed offset": frame}
        if model in PAPER_MODELS:
            paper = paper_rows(list(frame["relation"]))
            tables["This model next to Clark et al. (2019) Table 1"] = frame[
                ["model", "relation", "layer", "head", "accuracy", "baseline_accuracy"]
            ].merge(paper, on="relation")
        return tables


def dependency_accumulators(lm: LoadedModel, options: DepsOptions) -> list:
    """Empty dependency counts for the model, word rows merged by the options' rule."""
    return [DependencyCounts(lm.facts.n_layers, lm.facts.n_heads, options.rule, causal=lm.facts.causal)]


def dependency_result(accumulators: list, options: DepsOptions) -> DepsResult:
    """The filled counts and their table at the options' minimum count."""
    counts: DependencyCounts = accumulators[0]
    return DepsResult(counts, counts.table(min_count=options.min_count))


DEPS: Analysis[DepsOptions, DepsResult] = Analysis(
    name="deps",
    help="dependency-head accuracy of every head on a CoNLL-U file (Clark et al. Table 1)",
    options=DepsOptions,
    reads="conllu",
    result=DepsResult,
    methods=(6, 7, 10),
    accumulators=dependency_accumulators,
    finish=dependency_result,
    json_model=False,
)
