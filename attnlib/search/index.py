"""A corpus index (METHODS §16) as data and as a file: every candidate's normalised vector (float16 or float32 as the
file stores it, held as float32), where it is, each input's pieces, words and gold labels, the key each head of the
layer attends to most, and what built it; saved as one .npz file without pickles, and checked against the model,
corpus and options a search asks for."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import sys
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlib.analyses.base import OptionError
from attnlib.core.errors import SearchError
from attnlib.core.model import LoadedModel
from attnlib.results.files import ResultFileError, malformed
from attnlib.search import scoring
from attnlib.search.options import DEFAULT_K, IndexOptions
from attnlib.search.vectors import Query
from attnlib.stats.special import CLASS_KEYS

INDEX_FORMAT = "attnlib-index"
INDEX_FORMAT_VERSION = 1
MAX_INDEX_BYTES = 2 * 1024**3


class IndexFileError(SearchError):
    """A file that is not an index, or an index of another model, corpus or options."""


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

    def search(self, query: Query, k: int = DEFAULT_K, heads: Sequence[int] | None = None) -> scoring.SearchResult:
        """The top k candidates by cosine (ties by input, then position) and the §16 summaries of them."""
        return scoring.search(self, query, k, heads)

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
