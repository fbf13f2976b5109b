"""Corpus search by example (METHODS §16; exBERT, Hoover et al. 2020): an index of every non-special position of a
corpus for one layer (or the embedding output) and mode, and the k positions most like a query token by cosine, with
the counts of their UPOS and DEPREL and of what each head makes them attend to most.

- mode hidden: the layer's output `hidden_states[l + 1][t]` (`hidden_states[0]` for the embedding output);
- mode heads: the concatenated context vectors c[l, h, t] of a set of heads (METHODS §15), taken where the attention
  output projection reads them (attnlib.core.replay), for every family of attnlib.core.families.

An index is built in one batched pass (`fill_index`, a Fill of the corpus engines: in-process or on Ray). It keeps
the vectors normalised, rounded to float16 (or float32) as its file stores them and held as float32 for the
matrix-vector product of search, and per position only what search and the summaries need: its
input, position, piece and word, the gold UPOS and DEPREL of a CoNLL-U corpus, and the key each head of the layer
attends to most. A heads index keeps every head it was built for, each row normalised over them with each head's
part of the norm: a search over any subset S of them is the exact cosine over S, from the same index. Search is
exact: one float32 matrix-vector product over every row, the top k by score, ties by (input, position).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import sys
import weakref
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from attnlib.analyses.base import DEFAULT_BATCH_SIZE, Inputs, OptionError, Options, option, read_inputs
from attnlib.core.batches import Progress
from attnlib.core.blockwise import BLOCKWISE_FROM, Block, run_blockwise, supports_blockwise
from attnlib.core.corpus import CorpusInput, Sentence
from attnlib.core.engines import plan_batches, run_accumulators
from attnlib.core.errors import SearchError as SearchError  # part of this module's API
from attnlib.core.families import SUPPORTED_NAMES, UnsupportedModelError, family_for, layout
from attnlib.core.hooks import attentions_returned
from attnlib.core.memory import MemoryLimitError, check_memory, memory_limit, run_size
from attnlib.core.model import LoadedModel, ModelFacts, load_model
from attnlib.core.replay import editing_contexts
from attnlib.core.runner import Encoded, InputError, encode, model_inputs, returned_weights
from attnlib.results.files import ResultFileError, corpus_record, malformed
from attnlib.results.version import __version__
from attnlib.stats.special import CLASS_KEYS, punct_mask

Dtype = Literal["float16", "float32"]
INDEX_FORMAT = "attnlib-index"
INDEX_FORMAT_VERSION = 1
FLOAT16_SCORE_BOUND = 2e-3  # METHODS §16: float16 scores agree with float32 within this
DEFAULT_K = 20
SCORE_BLOCK = 8192  # rows widened to float32 at a time when scoring a float16 index
MAX_INDEX_BYTES = 2 * 1024**3


class IndexFileError(SearchError):
    """A file that is not an index, or an index of another model, corpus or options."""


# ------------------------------------------------------------------------------------------------------ options


def parse_heads(text: str) -> tuple[int, ...]:
    """'7,1,4' -> (1, 4, 7): 0-based heads, sorted, each once; '' -> (); OptionError for anything else."""
    heads = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise OptionError(f"heads must be 0-based head numbers separated by commas (or 'all'), not {text!r}")
        heads.add(int(part))
    return tuple(sorted(heads))


@dataclass(frozen=True)
class IndexOptions(Options):
    """What an index holds: a layer's output, the embedding output, or context vectors of heads of a layer."""

    layer: int = option(0, "0-based layer: its output (mode hidden) or its heads' context vectors (--heads)", minimum=0)
    embeddings: bool = option(False, "the embedding output instead of a layer's output (mode hidden)")
    heads: str = option("", "mode heads: 0-based heads of the layer, e.g. 1,4,7, or 'all'; without: mode hidden")
    dtype: Dtype = option("float16", "how the index stores its vectors (default %(default)s)")
    all_punct: bool = option(False, "the class 'punct' takes every punctuation token, not only '.' and ','")

    def __post_init__(self) -> None:
        super().__post_init__()
        text = self.heads.strip().lower()
        canonical = "all" if text == "all" else ",".join(map(str, parse_heads(text)))
        object.__setattr__(self, "heads", canonical)
        if self.embeddings and self.heads:
            raise OptionError("the embedding output has no heads: give a layer with heads, or no heads")
        if self.embeddings and self.layer:
            raise OptionError("give a layer or the embedding output, not both")

    @property
    def mode(self) -> Literal["hidden", "heads"]:
        return "heads" if self.heads else "hidden"

    def head_list(self, n_heads: int) -> tuple[int, ...]:
        """The heads of mode heads (every head for 'all'); () in mode hidden."""
        return tuple(range(n_heads)) if self.heads == "all" else parse_heads(self.heads)

    def for_model(self, facts: ModelFacts) -> IndexOptions:
        """These options with 'all' spelled out; SearchError when the layer or a head is not the model's."""
        if not self.embeddings and self.layer >= facts.n_layers:
            raise SearchError(
                f"layer {self.layer} is not a layer of {facts.name}: it has {facts.n_layers} (0-{facts.n_layers - 1})."
            )
        heads = self.head_list(facts.n_heads)
        outside = [h for h in heads if h >= facts.n_heads]
        if outside:
            raise SearchError(
                f"head {outside[0]} is not a head of {facts.name}: each layer has {facts.n_heads} "
                f"(0-{facts.n_heads - 1})."
            )
        return replace(self, heads=",".join(map(str, heads)))

    def describe(self) -> str:
        """In words, 0-based: 'layer 2 output', 'embedding output', 'layer 2, heads 1,4 (context vectors)'."""
        if self.embeddings:
            return "embedding output"
        if self.heads:
            return f"layer {self.layer}, heads {self.heads} (context vectors)"
        return f"layer {self.layer} output"


@dataclass(frozen=True)
class SearchOptions(Options):
    """How many matches a search returns."""

    k: int = option(DEFAULT_K, "how many matches (default %(default)s)", minimum=1)


# ------------------------------------------------------------------------------------------------------ vectors


@dataclass
class BatchVectors:
    """One forward pass's vectors: [batch, n_max, dims] float32, normalised over the index's heads (or the hidden
    state), each head's part of that norm [batch, n_max, heads] (mode heads), and per head of the layer the key that
    each position attends to most [batch, heads, n_max] (none for the embedding output)."""

    vectors: torch.Tensor
    head_norms: torch.Tensor | None
    argmax: torch.Tensor | None


def heads_layout(lm: LoadedModel):
    """The layout that finds the heads' context vectors; SearchError naming what works instead."""
    if family_for(lm.encoder.config) is None:
        raise SearchError(
            f"search by heads is not available for '{lm.encoder.config.model_type}' models: attnlib finds the heads' "
            f"context vectors only for {SUPPORTED_NAMES}. Search by hidden state (no heads) works for this model."
        )
    try:
        return layout(lm.encoder, "norms")
    except UnsupportedModelError as exc:
        raise SearchError(f"search by heads is not available for this model: {exc}") from exc


def hidden_index(options: IndexOptions) -> int:
    """The index into transformers' `hidden_states` of mode hidden's vectors: 0 the embedding output, l + 1 layer l's
    output (the last after the final norm, where the model applies one)."""
    return 0 if options.embeddings else options.layer + 1


def head_columns(lay, contexts: torch.Tensor, heads: Sequence[int]) -> torch.Tensor:
    """The chosen heads' context vectors [batch, n, |heads| * d] float32, from a layer's [batch, n, heads * d]."""
    d = lay.head_dim
    columns = torch.cat([torch.arange(h * d, (h + 1) * d) for h in heads]).to(contexts.device)
    return contexts.index_select(-1, columns).float()


def normalised(x: torch.Tensor, heads: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Vectors [batch, n, dims] divided by their norms, and (mode heads) each head's part of that norm."""
    x = x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    return x, (x.unflatten(-1, (len(heads), -1)).norm(dim=-1) if heads else None)


def batch_vectors(lm: LoadedModel, encoded: Sequence[Encoded], options: IndexOptions) -> BatchVectors:
    """Run a padded batch once and return the §16 vectors of every position (options resolved for the model)."""
    layer = None if options.embeddings else options.layer
    heads = options.head_list(lm.facts.n_heads)
    contexts: list[torch.Tensor] = []
    with ExitStack() as stack:
        if heads:
            lay = heads_layout(lm)

            def keep(index: int, c: torch.Tensor) -> None:
                if index == layer:
                    contexts.append(c.detach())

            stack.enter_context(editing_contexts(lay, keep))
        if layer is not None:
            stack.enter_context(attentions_returned([lm.encoder]))
        with torch.inference_mode():
            out = lm.encoder(**model_inputs(lm, encoded), output_hidden_states=not heads)
    x = head_columns(lay, contexts[0], heads) if heads else out.hidden_states[hidden_index(options)].float()
    x, head_norms = normalised(x, heads)
    argmax = None
    if layer is not None:
        attentions = returned_weights(out.attentions)[layer]  # [batch, heads, n, n]
        if attentions.dim() != 4:
            raise SearchError(
                "the model's attention maps are not [batch, heads, n, n]; it must run with eager attention."
            )
        argmax = attentions.argmax(-1)  # ties: torch returns the first (lowest) index of the maximum
    return BatchVectors(x, head_norms, argmax)


def runs_blockwise(lm: LoadedModel, encoded: Encoded) -> bool:
    """Whether a query's input runs block-wise (METHODS §19): longer than BLOCKWISE_FROM, on a family that can."""
    return encoded.n > BLOCKWISE_FROM and supports_blockwise(lm.encoder)


def blockwise_vectors(lm: LoadedModel, encoded: Encoded, options: IndexOptions) -> BatchVectors:
    """batch_vectors of one long input from one block-wise pass (options resolved for the model), keeping only what
    the vectors are made of: the one hidden state of mode hidden, or the layer's context vectors of mode heads; no
    attention map is kept (a query needs no argmax)."""
    heads = options.head_list(lm.facts.n_heads)
    batch = model_inputs(lm, [encoded])

    def drop(_block: Block) -> None:
        """The blocks' probabilities: nothing of them is kept."""

    if not heads:
        x = run_blockwise(lm, batch, drop, hidden_state=hidden_index(options)).float()
        return BatchVectors(*normalised(x, heads), None)
    lay = heads_layout(lm)
    contexts: list[torch.Tensor] = []

    def keep(index: int, c: torch.Tensor) -> None:
        if index == options.layer:
            contexts.append(head_columns(lay, c.detach(), heads))

    with editing_contexts(lay, keep):
        run_blockwise(lm, batch, drop)
    return BatchVectors(*normalised(contexts[0], heads), None)


def token_classes(encoded: Encoded, all_punct: bool) -> np.ndarray:
    """[n] int8: the METHODS §1 class of each position, as an index into special.CLASS_KEYS."""
    punct = punct_mask(encoded.tokens, encoded.special_mask, all_punct)
    classes = np.full(encoded.n, CLASS_KEYS.index("other"), np.int8)
    classes[punct] = CLASS_KEYS.index("punct")
    classes[np.asarray(encoded.sep_mask, bool)] = CLASS_KEYS.index("sep")
    classes[np.asarray(encoded.cls_mask, bool)] = CLASS_KEYS.index("cls")
    return classes


# ------------------------------------------------------------------------------------------------------ building


@dataclass
class IndexedInput:
    """One input of an index: what it was, its pieces and words, and its candidate positions' rows."""

    line: int
    text_a: str
    text_b: str  # "" for a single sentence
    tokens: list[str]
    classes: np.ndarray  # [n] int8, METHODS §1 class of each position
    word_ids: np.ndarray  # [n] int32, the word owning each piece, -1 for special tokens
    words: list[str]
    upos: list[str] | None  # per word, gold CoNLL-U only
    deprels: list[str] | None
    positions: np.ndarray  # [m] int32: the candidates (non-special positions)
    vectors: np.ndarray  # [m, dims] in the index's dtype
    head_norms: np.ndarray | None  # [m, heads] float32
    argmax: np.ndarray | None  # [m, layer heads] int16


def indexed_input(item: CorpusInput, enc: Encoded, b: int, got: BatchVectors, options: IndexOptions) -> IndexedInput:
    """Row b of a batch's vectors as one input of the index."""
    positions = np.flatnonzero(~np.asarray(enc.special_mask, bool)).astype(np.int32)
    rows = torch.from_numpy(positions).to(got.vectors.device)
    vectors = got.vectors[b].index_select(0, rows).cpu().numpy().astype(options.dtype)
    head_norms = None if got.head_norms is None else got.head_norms[b].index_select(0, rows).cpu().numpy()
    argmax = None if got.argmax is None else got.argmax[b][:, rows].T.cpu().numpy().astype(np.int16)
    gold = isinstance(item, Sentence) and bool(item.upos)
    text_a = item.text_a if isinstance(item.text_a, str) else " ".join(item.text_a)
    text_b = "" if item.text_b is None else item.text_b if isinstance(item.text_b, str) else " ".join(item.text_b)
    return IndexedInput(
        line=item.line,
        text_a=text_a,
        text_b=text_b,
        tokens=list(enc.tokens),
        classes=token_classes(enc, options.all_punct),
        word_ids=np.array([-1 if w is None else w for w in enc.word_ids], np.int32),
        words=list(enc.words),
        upos=list(item.upos) if gold else None,  # type: ignore[attr-defined]
        deprels=list(item.deprels) if gold else None,  # type: ignore[attr-defined]
        positions=positions,
        vectors=vectors,
        head_norms=None if head_norms is None else head_norms.astype(np.float32),
        argmax=argmax,
    )


@dataclass
class IndexRows:
    """Accumulator: the indexed inputs; two halves merge into the whole in corpus order (by line)."""

    inputs: list[IndexedInput] = field(default_factory=list)

    def add(self, row: IndexedInput) -> None:
        """Keep one indexed input."""
        self.inputs.append(row)

    def merge(self, other: IndexRows) -> IndexRows:
        """Both parts' inputs by line (self first on equal lines): Ray shards hold batches, not runs of the corpus."""
        both = self.inputs + other.inputs
        return IndexRows(sorted(both, key=lambda row: row.line))


def index_accumulators(lm: LoadedModel, options: IndexOptions) -> list:
    """Empty accumulators of an index."""
    return [IndexRows()]


def fill_index(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    accumulators: list,
    batch_size: int,
    progress: Progress | None = None,
    options: IndexOptions = IndexOptions(),
) -> list:
    """The engines' Fill: every input run once, in the padded batches of the local engine, into IndexRows."""
    rows: IndexRows = accumulators[0]
    done = 0
    for batch in plan_batches(lm, inputs, batch_size):
        items = [inputs[i] for i in batch]
        encoded = [encode(lm, item.text_a, item.text_b) for item in items]
        got = batch_vectors(lm, encoded, options)
        for b, (item, enc) in enumerate(zip(items, encoded)):
            rows.add(indexed_input(item, enc, b, got, options))
        done += len(batch)
        if progress is not None:
            progress(done, len(inputs))
    return [rows]


_FINGERPRINTS: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()


def model_fingerprint(lm: LoadedModel) -> str:
    """SHA-1 of every parameter's name, shape and first values: tells two checkpoints of one name apart."""
    if lm.encoder not in _FINGERPRINTS:
        digest = hashlib.sha1()
        for name, tensor in lm.encoder.state_dict().items():
            digest.update(f"{name}{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().flatten()[:64].float().cpu().numpy().tobytes())
        _FINGERPRINTS[lm.encoder] = digest.hexdigest()
    return _FINGERPRINTS[lm.encoder]


def _numbered(items: list[CorpusInput]) -> list[CorpusInput]:
    """Inputs whose lines order them (a file's do); others renumbered 1.. in the given order, so that Ray's merge
    by line keeps it."""
    lines = [item.line for item in items]
    if all(a < b for a, b in itertools.pairwise(lines)):
        return items
    return [replace(item, line=i + 1) for i, item in enumerate(items)]


def build_index(
    model: str | LoadedModel,
    corpus: Inputs,
    options: IndexOptions = IndexOptions(),
    *,
    conllu: bool = False,
    limit: int | None = None,
    engine: str = "local",
    device: str = "cpu",
    workers: int = 2,
    cpus_per_worker: float = 1.0,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> CorpusIndex:
    """The index of a corpus (a file's path, or inputs; `conllu`: read the file as CoNLL-U whatever its name) for
    these options, in one batched pass of the local or the Ray engine."""
    lm = model if isinstance(model, LoadedModel) else load_model(model, device=device)
    options = options.for_model(lm.facts)
    if options.heads:
        heads_layout(lm)  # refused before the pass, not inside it
    items = _numbered(read_inputs("conllu" if conllu else "corpus", corpus, limit))
    if isinstance(corpus, str | Path):
        described = corpus_record(corpus, len(items))
    else:
        described = {"name": f"{len(items)} inputs", "path": None, "n_inputs": len(items), "sha1": None}
    run = run_accumulators(
        lm,
        items,
        partial(index_accumulators, options=options),
        partial(fill_index, options=options),
        engine=engine,
        device=device,
        workers=workers,
        batch_size=batch_size,
        cpus_per_worker=cpus_per_worker,
        progress=progress,
    )
    meta = {
        "model": lm.facts.name,
        "model_fingerprint": model_fingerprint(lm),
        "n_layers": lm.facts.n_layers,
        "n_heads": lm.facts.n_heads,
        "corpus": described,
        "options": asdict(options),
        "library_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "run": run.describe(),
    }
    return CorpusIndex.from_rows(run.accumulators[0], meta)


# ------------------------------------------------------------------------------------------------------ the index


def _codes(values: list[list[str] | None]) -> tuple[np.ndarray, np.ndarray]:
    """Per-word labels of every input as int16 codes into a sorted vocabulary (-1 where an input has none)."""
    names = sorted({v for labels in values if labels for v in labels})
    code = {name: i for i, name in enumerate(names)}
    flat = [code[v] for labels in values if labels for v in labels]
    return np.array(flat, np.int16), np.array(names, dtype=str)


@dataclass
class CorpusIndex:
    """An index of a corpus: candidates' vectors and where they are, each input's pieces and words, and what
    built it (meta: model, fingerprint, corpus with SHA-1, options, version)."""

    meta: dict
    vectors: np.ndarray  # [N, dims] float32, normalised (a float16 index: its float16 values, widened); rows in
    # (input, position) order
    head_norms: np.ndarray  # [N, heads] float32: each head's part of the norm (mode heads), else [N, 0]
    argmax: np.ndarray  # [N, layer heads] int16: the key each head attends to most (none for embeddings: [N, 0])
    input: np.ndarray  # [N] int32
    position: np.ndarray  # [N] int32
    token_start: np.ndarray  # [inputs + 1] int64: each input's tokens in the flat token arrays
    tokens: list[str]  # [T] every piece, special tokens included
    token_class: np.ndarray  # [T] int8, METHODS §1 (index into CLASS_KEYS)
    token_word: np.ndarray  # [T] int32: word within its input, -1 for special tokens
    word_start: np.ndarray  # [inputs + 1] int64
    words: list[str]  # [W]
    word_upos: np.ndarray  # [W] int16 codes into upos_names (gold CoNLL-U; [0] otherwise)
    word_deprel: np.ndarray  # [W] int16 codes into deprel_names
    upos_names: np.ndarray
    deprel_names: np.ndarray
    text_a: list[str]  # [inputs] (a CoNLL-U sentence's words joined by spaces)
    text_b: list[str]  # [inputs], "" for a single sentence

    ARRAYS = ("vectors", "head_norms", "argmax", "input", "position", "token_start", "token_class", "token_word",
              "word_start", "word_upos", "word_deprel", "upos_names", "deprel_names")  # fmt: skip
    STRINGS = ("tokens", "words", "text_a", "text_b")  # stored as UTF-8 bytes and offsets

    @classmethod
    def from_rows(cls, rows: IndexRows, meta: dict) -> CorpusIndex:
        """The index of filled IndexRows."""
        options = IndexOptions(**meta["options"])
        inputs = sorted(rows.inputs, key=lambda row: row.line)  # batches run sorted by length: back to corpus order
        n_heads = len(options.head_list(meta["n_heads"]))
        n_layer_heads = 0 if options.embeddings else meta["n_heads"]
        dims = inputs[0].vectors.shape[1] if inputs else 0
        gold = bool(inputs) and all(row.upos is not None for row in inputs)
        upos, upos_names = _codes([row.upos for row in inputs] if gold else [])
        deprel, deprel_names = _codes([row.deprels for row in inputs] if gold else [])

        def stacked(get, width: int, dtype) -> np.ndarray:
            parts = [get(row) for row in inputs]
            parts = [p for p in parts if p is not None]
            return np.concatenate(parts).astype(dtype) if parts else np.zeros((0, width), dtype)

        def flat(parts: list[np.ndarray], dtype) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        def starts(lengths: list[int]) -> np.ndarray:
            return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

        meta = {**meta, "n_inputs": len(inputs), "gold": gold}
        index = cls(
            meta=meta,
            vectors=stacked(lambda r: r.vectors, dims, np.float32),
            head_norms=stacked(lambda r: r.head_norms, n_heads, np.float32),
            argmax=stacked(lambda r: r.argmax, n_layer_heads, np.int16),
            input=flat([np.full(len(r.positions), i, np.int32) for i, r in enumerate(inputs)], np.int32),
            position=flat([r.positions for r in inputs], np.int32),
            token_start=starts([len(r.tokens) for r in inputs]),
            tokens=[t for r in inputs for t in r.tokens],
            token_class=flat([r.classes for r in inputs], np.int8),
            token_word=flat([r.word_ids for r in inputs], np.int32),
            word_start=starts([len(r.words) for r in inputs]),
            words=[w for r in inputs for w in r.words],
            word_upos=upos,
            word_deprel=deprel,
            upos_names=upos_names,
            deprel_names=deprel_names,
            text_a=[r.text_a for r in inputs],
            text_b=[r.text_b for r in inputs],
        )
        index.meta["n_positions"] = len(index.input)
        return index

    # ---- what it is

    @property
    def options(self) -> IndexOptions:
        return IndexOptions(**self.meta["options"])

    @property
    def heads(self) -> tuple[int, ...]:
        """The heads whose context vectors it holds (mode heads), 0-based; () in mode hidden."""
        return self.options.head_list(self.meta["n_heads"])

    @property
    def gold(self) -> bool:
        """Whether every input has gold UPOS and DEPREL (a CoNLL-U corpus)."""
        return bool(self.meta["gold"])

    @property
    def n_inputs(self) -> int:
        return len(self.token_start) - 1

    def __len__(self) -> int:
        return len(self.input)

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays and strings in memory."""
        strings = sum(sys.getsizeof(text) for name in self.STRINGS for text in getattr(self, name))
        return sum(getattr(self, name).nbytes for name in self.ARRAYS) + strings

    def describe(self) -> str:
        """One line: what, of which corpus and model."""
        corpus = self.meta["corpus"]
        return (
            f"{self.options.describe()} of {self.meta['model']} over {corpus.get('name', '?')} "
            f"({self.n_inputs} inputs, {len(self)} positions, {self.options.dtype})"
        )

    def input_tokens(self, i: int) -> list[str]:
        """The pieces of input i, special tokens included."""
        return self.tokens[self.token_start[i] : self.token_start[i + 1]]

    def input_words(self, i: int) -> list[str]:
        return self.words[self.word_start[i] : self.word_start[i + 1]]

    def word_of(self, i: int, position: int) -> int:
        """The word (index within input i) that owns the piece at this position, -1 for a special token."""
        return int(self.token_word[self.token_start[i] + position])

    def token_class_of(self, i: int, position: int) -> str:
        return CLASS_KEYS[int(self.token_class[self.token_start[i] + position])]

    def label_of(self, i: int, word: int, names: np.ndarray, codes: np.ndarray) -> str | None:
        """A gold label of a word of input i (None without gold labels or for no word)."""
        if not self.gold or word < 0:
            return None
        return str(names[codes[self.word_start[i] + word]])

    # ---- checks

    def check(
        self,
        lm: LoadedModel | None = None,
        corpus_sha1: str | None = None,
        options: IndexOptions | None = None,
        heads: Sequence[int] | None = None,
    ) -> None:
        """IndexFileError unless it is of this model, this corpus (by SHA-1), these options and holds these heads."""
        meta = self.meta
        if lm is not None and (meta["model"], meta["model_fingerprint"]) != (lm.facts.name, model_fingerprint(lm)):
            same_name = meta["model"] == lm.facts.name
            raise IndexFileError(
                f"this index is of the model {meta['model']}{' (other weights of that name)' if same_name else ''}, "
                f"not of {lm.facts.name}: build one for it (attnlib index --model {lm.facts.name} ... --out FILE)."
            )
        sha1 = meta["corpus"].get("sha1")
        if corpus_sha1 is not None and sha1 != corpus_sha1:
            raise IndexFileError(
                f"this index is of the corpus {meta['corpus'].get('name')} (SHA-1 {str(sha1)[:10]}), not of the "
                f"corpus given (SHA-1 {corpus_sha1[:10]}): build one for that corpus."
            )
        if options is not None:
            mine = self.options
            wanted = replace(options, heads=mine.heads) if options.heads and mine.heads else options
            differ = [
                f"{f} {getattr(mine, f)!r} (asked: {getattr(wanted, f)!r})"
                for f in ("layer", "embeddings", "all_punct")
                if getattr(mine, f) != getattr(wanted, f)
            ]
            if mine.mode != options.mode:
                differ.append(f"mode {mine.mode} (asked: {options.mode})")
            if differ:
                raise IndexFileError(f"this index holds {mine.describe()}, not what was asked: {'; '.join(differ)}.")
        if heads is not None:
            missing = sorted(set(heads) - set(self.heads))
            if missing:
                held = ",".join(map(str, self.heads)) or "none (mode hidden)"
                raise IndexFileError(f"this index holds the heads {held}; head {missing[0]} is not among them.")

    # ---- search

    def scores(self, query: Query, heads: Sequence[int] | None = None) -> np.ndarray:
        """[N] float32 cosine of every candidate with the query (mode heads: over `heads`, default all it holds)."""
        if query.vector.shape[-1] != self.vectors.shape[1]:
            raise SearchError(
                f"the query has {query.vector.shape[-1]} dimensions and the index {self.vectors.shape[1]}: "
                "they are not of the same layer and mode."
            )
        if not self.heads:
            return cosine_scores(self.vectors, query.vector)
        chosen = list(self.heads) if heads is None else sorted(set(heads))
        self.check(heads=chosen)
        slots = [self.heads.index(h) for h in chosen]
        d = self.vectors.shape[1] // len(self.heads)
        q = np.zeros_like(query.vector)
        for s in slots:
            q[s * d : (s + 1) * d] = query.vector[s * d : (s + 1) * d]
        q_norm = float(np.sqrt(np.square(query.head_norms[slots]).sum()))  # type: ignore[index]
        x_norm = np.sqrt(np.square(self.head_norms[:, slots]).sum(axis=1))
        dots = cosine_scores(self.vectors, q)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = dots / (x_norm * q_norm)
        return np.where(x_norm * q_norm > 0, out, 0.0).astype(np.float32)

    def search(self, query: Query, k: int = DEFAULT_K, heads: Sequence[int] | None = None) -> SearchResult:
        """The top k candidates by cosine (ties by input, then position) and the §16 summaries of them."""
        if k < 1:
            raise SearchError(f"k must be at least 1, not {k}.")
        scores = self.scores(query, heads)
        rows = top_k(scores, k)
        chosen = tuple(self.heads if heads is None else sorted(set(heads))) if self.heads else ()
        matches = [self.match(int(r), float(scores[r])) for r in rows]
        return SearchResult(
            query=query.describe(),
            index=self.summary_of_meta(),
            heads=list(chosen),
            matches=matches,
            summary=self.summarise(rows, chosen),
        )

    def match(self, row: int, score: float) -> Match:
        """Candidate `row` as a match."""
        i, position = int(self.input[row]), int(self.position[row])
        word = self.word_of(i, position)
        return Match(
            input=i,
            position=position,
            token=str(self.tokens[self.token_start[i] + position]),
            word=str(self.words[self.word_start[i] + word]) if word >= 0 else "",
            score=score,
            upos=self.label_of(i, word, self.upos_names, self.word_upos),
            deprel=self.label_of(i, word, self.deprel_names, self.word_deprel),
        )

    def summarise(self, rows: np.ndarray, heads: Sequence[int]) -> Summary:
        """§16: the matches' UPOS and DEPREL counts and, per head (those of S, else every head of the layer), the
        counts of the class and UPOS of the key each attends to most."""
        matches = [self.match(int(r), 0.0) for r in rows]
        layer_heads = [] if self.options.embeddings else list(heads or range(self.argmax.shape[1]))
        targets = []
        for h in layer_heads:
            classes: Counter[str] = Counter()
            upos: Counter[str] = Counter()
            for r in rows:
                i, key = int(self.input[r]), int(self.argmax[r, h])
                classes[self.token_class_of(i, key)] += 1
                if self.gold:
                    word = self.word_of(i, key)
                    upos[self.label_of(i, word, self.upos_names, self.word_upos) or self.input_tokens(i)[key]] += 1
            targets.append(HeadTargets(h, ordered(classes), ordered(upos) if self.gold else None))
        return Summary(
            n=len(matches),
            upos=ordered(Counter(m.upos for m in matches if m.upos is not None)) if self.gold else None,
            deprel=ordered(Counter(m.deprel for m in matches if m.deprel is not None)) if self.gold else None,
            attends_to=targets,
        )

    def summary_of_meta(self) -> dict:
        """What the search ran over: model, corpus, options, size."""
        keys = ("model", "corpus", "options", "n_inputs", "n_positions")
        return {key: self.meta[key] for key in keys}

    # ---- files

    def save(self, path: str | Path) -> int:
        """Write the index as one .npz file (no pickles); returns its size in bytes."""
        meta = json.dumps({"format": INDEX_FORMAT, "format_version": INDEX_FORMAT_VERSION, **self.meta})
        buffer = io.BytesIO()
        arrays = {name: getattr(self, name) for name in self.ARRAYS}
        arrays["vectors"] = self.vectors.astype(self.options.dtype)  # float16 rows widened: narrowed back exactly
        for name in self.STRINGS:
            arrays[name], arrays[f"{name}_start"] = _packed(getattr(self, name))
        np.savez(buffer, meta=np.array(meta), **arrays)
        data = buffer.getvalue()
        Path(path).write_bytes(data)
        return len(data)

    @classmethod
    def load(cls, source: str | Path | bytes) -> CorpusIndex:
        """Read an index file written by save (`attnlib index --out`); IndexFileError when it is not one."""
        data = source if isinstance(source, bytes) else _read_bytes(Path(source))
        if len(data) > MAX_INDEX_BYTES:
            raise IndexFileError(f"the file is {len(data) / 1e6:.0f} MB; an index may be at most 2 GB.")
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (ValueError, OSError, EOFError) as exc:
            raise IndexFileError(f"not an index file of `attnlib index --out` ({exc}).") from exc
        try:
            meta = json.loads(str(arrays.pop("meta")))
        except (KeyError, ValueError) as exc:
            raise IndexFileError("not an index file of `attnlib index --out` (no meta).") from exc
        if not isinstance(meta, dict) or meta.pop("format", None) != INDEX_FORMAT:
            raise IndexFileError('not an index file of `attnlib index --out` (no "format": "attnlib-index").')
        if meta.pop("format_version", None) != INDEX_FORMAT_VERSION:
            raise IndexFileError(f"index format other than {INDEX_FORMAT_VERSION}: rebuild it with this attnlib.")
        try:
            with malformed("index file"):
                fields_: dict[str, Any] = {name: arrays[name] for name in cls.ARRAYS}
                fields_ |= {name: _unpacked(arrays[name], arrays[f"{name}_start"]) for name in cls.STRINGS}
                index = cls(meta=meta, **fields_)
                index.vectors = index.vectors.astype(np.float32)
                IndexOptions(**meta["options"])
                for key in ("model", "model_fingerprint", "corpus", "n_heads", "gold"):
                    meta[key]  # present, or malformed
        except (ResultFileError, OptionError) as exc:
            raise IndexFileError(str(exc)) from exc
        if not len(index.input) == len(index.position) == len(index.vectors) == len(index.argmax):
            raise IndexFileError("the index file's arrays differ in length.")
        return index


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise IndexFileError(f"{path}: no such index file.")
    return path.read_bytes()


def _packed(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings as one UTF-8 byte array and the offsets [len + 1] of each (a file holds no pickles)."""
    encoded = [text.encode("utf-8") for text in strings]
    starts = np.concatenate([[0], np.cumsum([len(b) for b in encoded])]).astype(np.int64)
    return np.frombuffer(b"".join(encoded), np.uint8), starts


def _unpacked(data: np.ndarray, starts: np.ndarray) -> list[str]:
    raw = data.tobytes()
    return [raw[a:b].decode("utf-8") for a, b in itertools.pairwise(starts.tolist())]


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


# ------------------------------------------------------------------------------------------------------ queries


@dataclass
class Query:
    """A typed text's token as search reads it: its vector (normalised as the index's rows) and its heads' norms."""

    text_a: str
    text_b: str | None
    position: int
    token: str
    tokens: list[str]
    vector: np.ndarray  # [dims] float32
    head_norms: np.ndarray | None  # [heads] float32 (mode heads)

    def describe(self) -> dict:
        return {"text": self.text_a, "pair": self.text_b, "token": self.position, "piece": self.token}


def query_of(lm: LoadedModel, text: str, pair: str | None, token: int, options: IndexOptions) -> Query:
    """The query vector of piece `token` (0-based, [CLS] = 0) of a typed sentence or pair; SearchError for a position
    outside it."""
    options = options.for_model(lm.facts)
    pair = (pair or "").strip() or None
    enc = encode(lm, text, pair)
    if not 0 <= token < enc.n:
        pieces = ", ".join(f"{i} {t}" for i, t in enumerate(enc.tokens[:40]))
        raise InputError(
            f"token {token} is not a position of the query: it has {enc.n} wordpieces (0-{enc.n - 1}, [CLS] = 0): "
            f"{pieces}{' ...' if enc.n > 40 else ''}."
        )
    if runs_blockwise(lm, enc):
        got = blockwise_vectors(lm, enc, options)
    else:
        try:
            check_memory(run_size(lm, enc.n), memory_limit(device=lm.device))
        except MemoryLimitError as exc:
            raise SearchError(
                f"'{lm.facts.model_type}' models cannot run block-wise, so a query runs with every layer's attention "
                f"maps: {exc}"
            ) from exc
        got = batch_vectors(lm, [enc], options)
    vector = got.vectors[0, token].cpu().numpy().astype(np.float32)
    head_norms = None if got.head_norms is None else got.head_norms[0, token].cpu().numpy().astype(np.float32)
    return Query(text, pair, token, enc.tokens[token], list(enc.tokens), vector, head_norms)


# ------------------------------------------------------------------------------------------------------ results


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
