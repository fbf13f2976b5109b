"""The `probe` analysis: Clark's attention probe, every head's word-level map combined to predict each word's head,
trained on one treebank and scored on another (METHODS §14)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np
import torch

from attnlib.analyses.base import Analysis, Options, option
from attnlib.analyses.deps import DIRECTIONS, OFFSETS, DependencyCounts
from attnlib.core.batches import Progress, accumulate
from attnlib.core.corpus import CorpusError, CorpusInput, Sentence
from attnlib.core.hooks import ATTENTION, Capture
from attnlib.core.model import LoadedModel
from attnlib.core.runner import RunResult
from attnlib.results.files import malformed

if TYPE_CHECKING:
    import pandas as pd

Variant = Literal["attention", "words"]
VARIANTS: tuple[Variant, ...] = ("attention", "words")
LEARNING_RATE = 0.002
PUNCT = "punct"


def word_embedding_table(lm: LoadedModel) -> np.ndarray:
    """The model's own input word embeddings [vocab, hidden] (no position or segment parts), float32."""
    return lm.encoder.get_input_embeddings().weight.detach().float().cpu().numpy()


def first_piece_ids(result: RunResult, present: np.ndarray) -> np.ndarray:
    """Token id of each word's first piece [m], -1 for a word without pieces (present: bool [m] from deps)."""
    firsts: dict[int, int] = {}
    for token_id, word in zip(result.input_ids, result.word_ids):
        if word is not None and word not in firsts:
            firsts[word] = token_id
    ids = np.full(len(present), -1, dtype=np.int64)
    ids[np.flatnonzero(present)] = [firsts[w] for w in range(int(present.sum()))]
    return ids


@dataclass
class ProbeCorpus:
    """Accumulator: per sentence the float32 word-level maps of every head [K, m+2, m+2] kept for training, with the
    gold tree, the words that had pieces, and (with an embedding table) each word's input embedding [m, hidden].

    It also fills the section 7 DependencyCounts of the same sentences, for the best single head and fixed offset."""

    n_layers: int
    n_heads: int
    embedding_table: np.ndarray | None = None  # [vocab, hidden]; only needed while adding, never merged
    sentences: list[Sentence] = field(default_factory=list)
    maps: list[np.ndarray] = field(default_factory=list)  # [K, m+2, m+2] float32: CLS, the m words, SEP
    present: list[np.ndarray] = field(default_factory=list)  # bool [m]
    embeddings: list[np.ndarray] = field(default_factory=list)  # [m, hidden] float32, zero for a word without pieces
    counts: DependencyCounts | None = None
    n_skipped: int = 0  # sentences longer than the model takes
    captures: ClassVar[frozenset[Capture]] = ATTENTION  # what each input's run holds for it

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = DependencyCounts(self.n_layers, self.n_heads)

    def add(self, result: RunResult, item: CorpusInput) -> None:
        """Keep one sentence's maps; a truncated sentence is only counted as skipped (as DependencyCounts does)."""
        assert self.counts is not None
        # the section 7 counts refuse anything but single gold sentences and hand back the mean-row word maps
        added = self.counts.add_with_maps(result, item)
        if added is None:
            self.n_skipped += 1
            return
        assert isinstance(item, Sentence)
        word_map, present = added
        k = self.n_layers * self.n_heads
        self.maps.append(word_map.astype(np.float32).reshape((k,) + word_map.shape[-2:]))
        self.present.append(present)
        self.sentences.append(item)
        if self.embedding_table is not None:
            ids = first_piece_ids(result, present)
            vectors = np.zeros((len(ids), self.embedding_table.shape[1]), dtype=np.float32)
            vectors[ids >= 0] = self.embedding_table[ids[ids >= 0]]
            self.embeddings.append(vectors)

    def merge(self, other: ProbeCorpus) -> ProbeCorpus:
        """Both parts' sentences in file order (by line; self first on equal lines), as training takes them."""
        assert self.counts is not None and other.counts is not None
        if (self.n_layers, self.n_heads) != (other.n_layers, other.n_heads):
            raise ValueError("Only maps of the same model shape can be merged.")
        sentences = self.sentences + other.sentences
        order = sorted(range(len(sentences)), key=lambda i: sentences[i].line)  # Ray shards hold batches, not runs

        def ordered(items: list) -> list:
            return [items[i] for i in order] if items else []

        return ProbeCorpus(
            self.n_layers,
            self.n_heads,
            None,
            ordered(sentences),
            ordered(self.maps + other.maps),
            ordered(self.present + other.present),
            ordered(self.embeddings + other.embeddings),
            self.counts.merge(other.counts),
            self.n_skipped + other.n_skipped,
        )

    def __len__(self) -> int:
        return len(self.maps)


def empty_corpus(lm: LoadedModel, table: np.ndarray | None) -> ProbeCorpus:
    """An empty map store for the model; a decoder's section 7 counts predict from the visible side (METHODS §18)."""
    f = lm.facts
    return ProbeCorpus(f.n_layers, f.n_heads, table, counts=DependencyCounts(f.n_layers, f.n_heads, causal=f.causal))


def extract_maps(
    lm: LoadedModel,
    sentences: Sequence[Sentence],
    with_embeddings: bool = False,
    batch_size: int = 32,
    progress: Progress | None = None,
) -> ProbeCorpus:
    """Run the model once over the sentences in batches and keep every head's word-level maps."""
    corpus = empty_corpus(lm, word_embedding_table(lm) if with_embeddings else None)
    accumulate(lm, sentences, [corpus], batch_size=batch_size, progress=progress)
    corpus.embedding_table = None
    return corpus


# ------------------------------------------------------------------------------------------------------ scores


def candidate_scores(
    maps: torch.Tensor,
    dep_weights: torch.Tensor,
    head_weights: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dep_weights_of_candidate: torch.Tensor | None = None,
    head_weights_of_candidate: torch.Tensor | None = None,
) -> torch.Tensor:
    """Scores [m, m+1] of every word i's head candidates (column 0 ROOT, column j word j; word i itself -inf).

    maps [K, m+2, m+2]. The weight of map k for the pair (i, j) is dep_weights[i, k] + dep_weights_of_candidate[j, k]
    for dep->head and likewise for head<-dep: [m, K] each, or [K] for one weight per map (the attention-only probe);
    the words variant splits [e_i; e_j] . V_k into its e_i and e_j halves. ROOT adds no candidate part.
    """
    k, m = maps.shape[0], maps.shape[-1] - 2
    inner = maps[:, 1:-1, 1:-1]  # [K, m, m]: row i is what word i attends to
    if dep_weights.dim() == 1:  # one weight per map: two matrix-vector products
        flat = inner.reshape(k, m * m)
        words = (dep_weights @ flat).reshape(m, m) + (head_weights @ flat).reshape(m, m).T
        dep_weights, head_weights = dep_weights.expand(m, k), head_weights.expand(m, k)
    else:
        words = torch.einsum("ik,kij->ij", dep_weights, inner) + torch.einsum("ik,kji->ij", head_weights, inner)
    if dep_weights_of_candidate is not None:
        words = words + torch.einsum("jk,kij->ij", dep_weights_of_candidate, inner)
    if head_weights_of_candidate is not None:
        words = words + torch.einsum("jk,kji->ij", head_weights_of_candidate, inner)
    to_root = a * maps[:, 1:-1, 0] + b * maps[:, 1:-1, -1]  # [K, m]: word i to CLS and to the final SEP
    from_root = a * maps[:, 0, 1:-1] + b * maps[:, -1, 1:-1]  # [K, m]: CLS and SEP to word i
    root = (dep_weights * to_root.T).sum(dim=1) + (head_weights * from_root.T).sum(dim=1)
    scores = torch.cat([root[:, None], words], dim=1)
    itself = torch.arange(m)
    return scores.index_put((itself, itself + 1), torch.tensor(float("-inf")))


class AttentionProbe(torch.nn.Module):
    """The 2K + 2 parameters: w (dep->head) and u (head<-dep) per head, and a, b for ROOT; w = u = 0, a = b = 1."""

    def __init__(self, n_maps: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(n_maps))
        self.u = torch.nn.Parameter(torch.zeros(n_maps))
        self.a = torch.nn.Parameter(torch.ones(()))
        self.b = torch.nn.Parameter(torch.ones(()))

    def forward(self, maps: torch.Tensor, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        return candidate_scores(maps, self.w, self.u, self.a, self.b)


class WordsProbe(torch.nn.Module):
    """The "attention + words" probe: w_k(i, j) = [e_i; e_j] . V_k and u_k(i, j) = [e_i; e_j] . U_k, plus a and b.

    V and U start at zero (a = b = 1), so training starts exactly where the attention-only probe starts: every weight 0,
    every candidate equally likely but ROOT's; nothing is drawn at random, and the seed only fixes torch's generator."""

    def __init__(self, n_maps: int, hidden: int) -> None:
        super().__init__()
        self.v = torch.nn.Parameter(torch.zeros(n_maps, 2 * hidden))  # [K, 2 hidden]: the e_i half, then the e_j half
        self.u = torch.nn.Parameter(torch.zeros(n_maps, 2 * hidden))
        self.a = torch.nn.Parameter(torch.ones(()))
        self.b = torch.nn.Parameter(torch.ones(()))

    def forward(self, maps: torch.Tensor, embeddings: torch.Tensor | None = None) -> torch.Tensor:
        if embeddings is None:
            raise ValueError("the words probe needs each word's embedding")
        hidden = embeddings.shape[1]
        # ROOT's e_j is the zero vector, so its weights are the e_i halves alone
        return candidate_scores(
            maps,
            embeddings @ self.v[:, :hidden].T,
            embeddings @ self.u[:, :hidden].T,
            self.a,
            self.b,
            embeddings @ self.v[:, hidden:].T,
            embeddings @ self.u[:, hidden:].T,
        )


def _inputs(corpus: ProbeCorpus, index: int, variant: Variant) -> tuple[torch.Tensor, torch.Tensor | None]:
    maps = torch.from_numpy(corpus.maps[index])
    return maps, torch.from_numpy(corpus.embeddings[index]) if variant == "words" else None


def make_probe(variant: Variant, n_maps: int, hidden: int = 0) -> torch.nn.Module:
    """A probe at its starting point."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, not {variant!r}")
    return AttentionProbe(n_maps) if variant == "attention" else WordsProbe(n_maps, hidden)


def train_probe(
    corpus: ProbeCorpus,
    variant: Variant = "attention",
    epochs: int = 1,
    seed: int = 0,
    progress: Progress | None = None,
) -> torch.nn.Module:
    """Adam (lr 0.002), one sentence per step in corpus order; loss: cross-entropy summed over the sentence's words."""
    if epochs < 1:
        raise ValueError("epochs must be at least 1")
    if not len(corpus):
        raise CorpusError(f"no training sentence: all {corpus.n_skipped} are longer than the model takes.")
    if variant == "words" and len(corpus.embeddings) != len(corpus):
        raise ValueError("the words probe needs a corpus extracted with_embeddings=True")
    hidden = corpus.embeddings[0].shape[1] if variant == "words" and len(corpus) else 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        probe = make_probe(variant, corpus.n_layers * corpus.n_heads, hidden)
        optimizer = torch.optim.Adam(probe.parameters(), lr=LEARNING_RATE)
        gold = [torch.tensor(s.heads, dtype=torch.long) for s in corpus.sentences]
        total = epochs * len(corpus)
        for epoch in range(epochs):
            for index in range(len(corpus)):
                optimizer.zero_grad()
                scores = probe(*_inputs(corpus, index, variant))
                loss = torch.nn.functional.cross_entropy(scores, gold[index], reduction="sum")
                loss.backward()
                optimizer.step()
                done = epoch * len(corpus) + index + 1
                if progress is not None and (done % 32 == 0 or done == total):
                    progress(done, total)
    return probe


def predict(probe: torch.nn.Module, corpus: ProbeCorpus, variant: Variant = "attention") -> list[np.ndarray]:
    """Per sentence the argmax candidate of each word [m] (0 = ROOT, ties to the lowest; -1: word without pieces)."""
    out = []
    with torch.no_grad():
        for index in range(len(corpus)):
            predicted = probe(*_inputs(corpus, index, variant)).argmax(dim=1).numpy()
            predicted[~corpus.present[index]] = -1
            out.append(predicted)
    return out


# ------------------------------------------------------------------------------------------------------ result


@dataclass
class TestSentence:
    """One test sentence as the page draws it: words, gold tree, the probe's predicted heads (1-based, 0 = ROOT)."""

    sent_id: str
    words: list[str]
    heads: list[int]
    deprels: list[str]
    predicted: list[int]


@dataclass
class ProbeResult:
    """The probe's UAS on the test set next to the best single head and fixed offset on the same (non-punct) words."""

    variant: str
    epochs: int
    n_layers: int
    n_heads: int
    n_train: int
    n_test: int
    n_words: int
    uas: float
    best_head_accuracy: float
    best_head: dict  # layer, head (0-based), direction
    baseline_accuracy: float
    baseline_offset: int
    uas_by_relation: dict  # relation: {count, uas, best_head_accuracy, baseline_accuracy}, by frequency
    weights: dict | None  # dep_to_head, head_to_dep: [layer][head] (attention-only probe), else None
    root_weights: dict  # a (CLS), b (SEP)
    n_skipped: int
    n_skipped_train: int
    n_skipped_test: int
    sentences: list[TestSentence]

    def to_json(self) -> dict:
        """The command line's JSON object (0-based layers and heads)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ProbeResult:
        """Read back what to_json wrote (a result file's `result`); ResultFileError when malformed."""
        with malformed("`probe` result"):
            values = {name: data[name] for name in cls.__dataclass_fields__}
            values["sentences"] = [TestSentence(**s) for s in data["sentences"]]
            result = cls(**values)
            for s in result.sentences:
                if not len(s.words) == len(s.heads) == len(s.deprels) == len(s.predicted):
                    raise ValueError(f"sentence {s.sent_id!r}: words, heads, labels and predictions differ in length")
            if result.weights is not None:
                for key in ("dep_to_head", "head_to_dep"):
                    if np.shape(result.weights[key]) != (result.n_layers, result.n_heads):
                        raise ValueError(f"weights {key!r} are not [layer][head]")
            return result

    def weight_grid(self) -> np.ndarray:
        """Weights [L, H, 2] (direction last, 0 = dep->head), as deps' accuracy grids."""
        if self.weights is None:
            raise ValueError("the words probe has no single weight per head")
        return np.stack([np.array(self.weights["dep_to_head"]), np.array(self.weights["head_to_dep"])], axis=-1)

    def largest_weights(self, n: int = 5) -> list[tuple[int, int, str, float]]:
        """The n heads with the largest weights: (layer, head, direction, weight), 0-based."""
        grid = self.weight_grid()
        order = np.argsort(-grid, axis=None, kind="stable")[:n]
        return [
            (int(layer), int(head), DIRECTIONS[d], float(grid[layer, head, d]))
            for layer, head, d in zip(*np.unravel_index(order, grid.shape))
        ]

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """The probe's summary row (layers and heads 1-based) and its accuracy per relation, as long tables."""
        import pandas as pd

        best = self.best_head
        summary = {
            "model": model,
            "uas": self.uas,
            "best_head_accuracy": self.best_head_accuracy,
            "best_head_layer": best["layer"] + 1,
            "best_head_head": best["head"] + 1,
            "best_head_direction": best["direction"],
            "baseline_accuracy": self.baseline_accuracy,
            "baseline_offset": self.baseline_offset,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "n_words": self.n_words,
            "n_skipped_train": self.n_skipped_train,
            "n_skipped_test": self.n_skipped_test,
        }
        relations = pd.DataFrame([{"relation": r, **v} for r, v in self.uas_by_relation.items()])
        relations.insert(0, "model", model)
        return {
            "Probe against the best single head and fixed offset": pd.DataFrame([summary]),
            "UAS per relation": relations,
        }


def _scored(sentence: Sentence) -> np.ndarray:
    """bool [m]: the words UAS counts (punctuation excluded)."""
    return np.array([r != PUNCT for r in sentence.deprels], dtype=bool)


def score_probe(
    probe: torch.nn.Module,
    train: ProbeCorpus,
    test: ProbeCorpus,
    variant: Variant = "attention",
    epochs: int = 1,
) -> ProbeResult:
    """UAS, per relation, of the trained probe on the test corpus, beside the best head and offset on the same words."""
    assert test.counts is not None
    predictions = predict(probe, test, variant)
    relations: dict[str, list[int]] = {}  # relation: [count, correct]
    for sentence, predicted in zip(test.sentences, predictions):
        hits = predicted == np.asarray(sentence.heads)
        for relation, hit, scored in zip(sentence.deprels, hits, _scored(sentence)):
            if scored:
                tally = relations.setdefault(relation, [0, 0])
                tally[0] += 1
                tally[1] += int(hit)
    view = test.counts.view()
    index = {r: i for i, r in enumerate(test.counts.relations)}
    kept = [index[r] for r in relations]  # DependencyCounts holds every label; sum all but punct for "all"
    head_hits, offset_hits = view.head_hits[kept].sum(axis=0), view.offset_hits[kept].sum(axis=0)
    n_words = sum(count for count, _ in relations.values())
    if n_words != int(view.totals[kept].sum()):
        raise AssertionError("the probe and the dependency counts scored different words")
    layer, head, direction = np.unravel_index(int(head_hits.argmax()), head_hits.shape)
    k = int(offset_hits.argmax())
    by_relation = {}
    for relation, (count, correct) in sorted(relations.items(), key=lambda item: (-item[1][0], item[0])):
        i = index[relation]
        by_relation[relation] = {
            "count": count,
            "uas": correct / count,
            "best_head_accuracy": float(view.head_hits[i].max() / count),
            "baseline_accuracy": float(view.offset_hits[i].max() / count),
        }
    weights = None
    if isinstance(probe, AttentionProbe):
        shape = (test.n_layers, test.n_heads)
        weights = {
            "dep_to_head": probe.w.detach().numpy().reshape(shape).tolist(),
            "head_to_dep": probe.u.detach().numpy().reshape(shape).tolist(),
        }
    sentences = [
        TestSentence(s.sent_id, s.words, list(s.heads), list(s.deprels), p.tolist())
        for s, p in zip(test.sentences, predictions)
    ]
    return ProbeResult(
        variant=variant,
        epochs=epochs,
        n_layers=test.n_layers,
        n_heads=test.n_heads,
        n_train=len(train),
        n_test=len(test),
        n_words=n_words,
        uas=sum(c for _, c in relations.values()) / n_words if n_words else 0.0,
        best_head_accuracy=float(head_hits[layer, head, direction] / n_words) if n_words else 0.0,
        best_head={"layer": int(layer), "head": int(head), "direction": DIRECTIONS[direction]},
        baseline_accuracy=float(offset_hits[k] / n_words) if n_words else 0.0,
        baseline_offset=int(OFFSETS[k]),
        uas_by_relation=by_relation,
        weights=weights,
        root_weights={"a": float(probe.a.detach()), "b": float(probe.b.detach())},
        n_skipped=train.n_skipped + test.n_skipped,
        n_skipped_train=train.n_skipped,
        n_skipped_test=test.n_skipped,
        sentences=sentences,
    )


@dataclass(frozen=True)
class ProbeOptions(Options):
    """Which probe, and how it is trained."""

    variant: Variant = option(
        "attention", "attention: one weight per head and direction; words: weights from the two words' embeddings"
    )
    epochs: int = option(1, "passes over the training file (default %(default)s)", minimum=1, compare=True)
    seed: int = option(0, "torch seed while training (default %(default)s)", compare=True)


def probe_accumulators(lm: LoadedModel, options: ProbeOptions) -> list:
    """An empty map store for the model (with its word embedding table for the words variant); a decoder's single
    heads predict from the visible side (METHODS §18)."""
    return [empty_corpus(lm, word_embedding_table(lm) if options.variant == "words" else None)]


def train_and_score(
    train: ProbeCorpus, test: ProbeCorpus, options: ProbeOptions, progress: Progress | None = None
) -> ProbeResult:
    """Train the probe on one corpus's maps and score it on the other's."""
    probe = train_probe(train, options.variant, options.epochs, options.seed, progress)
    return score_probe(probe, train, test, options.variant, options.epochs)


def probe_result(train: list, test: list, options: ProbeOptions) -> ProbeResult:
    """The finish of the probe analysis: the two files' filled map stores, trained and scored."""
    return train_and_score(train[0], test[0], options)


def run_probe(
    lm: LoadedModel,
    train: Sequence[Sentence],
    test: Sequence[Sentence],
    options: ProbeOptions = ProbeOptions(),
    batch_size: int = 32,
    progress: Progress | None = None,
) -> ProbeResult:
    """The probe analysis in this process, progress(done, total) over every step: both corpora's maps, then training."""
    total = len(train) + len(test) + options.epochs * len(train)

    def stage(offset: int) -> Progress | None:
        return None if progress is None else (lambda done, _: progress(offset + done, total))

    words = options.variant == "words"
    train_maps = extract_maps(lm, train, words, batch_size, stage(0))
    test_maps = extract_maps(lm, test, words, batch_size, stage(len(train)))
    result = train_and_score(train_maps, test_maps, options, stage(len(train) + len(test)))
    if progress is not None:
        progress(total, total)
    return result


PROBE: Analysis[ProbeOptions, ProbeResult] = Analysis(
    name="probe",
    help="train Clark's attention probe on one CoNLL-U file, score UAS on another",
    options=ProbeOptions,
    reads="treebanks",
    result=ProbeResult,
    methods=(14,),
    accumulators=probe_accumulators,
    finish=probe_result,
    json_model=False,
)
