"""Building an index (METHODS §16): every input of a corpus run once, in the padded batches of the corpus engines
(in-process or on Ray, as a core.engines.Scale says), into the index's rows."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np
import torch

from attnlib.analyses.base import DEFAULT_BATCH_SIZE, Inputs, read_inputs
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput, Sentence
from attnlib.core.engines import LOCAL, Scale, plan_batches
from attnlib.core.model import LoadedModel, load_model
from attnlib.core.runner import Encoded, encode
from attnlib.results.files import corpus_record
from attnlib.results.version import __version__
from attnlib.search.index import CorpusIndex, IndexedInput, IndexRows, model_fingerprint
from attnlib.search.options import IndexOptions
from attnlib.search.vectors import BatchVectors, batch_vectors, heads_layout, token_classes


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
    scale: Scale = LOCAL,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> CorpusIndex:
    """The index of a corpus (a file's path, or inputs; `conllu`: read the file as CoNLL-U whatever its name) for
    these options, in one batched pass of the engine and device that `scale` names (run_analysis's)."""
    lm = model if isinstance(model, LoadedModel) else load_model(model, device=scale.device)
    options = options.for_model(lm.facts)
    if options.heads:
        heads_layout(lm)  # refused before the pass, not inside it
    items = _numbered(read_inputs("conllu" if conllu else "corpus", corpus, limit))
    if isinstance(corpus, str | Path):
        described = corpus_record(corpus, len(items))
    else:
        described = {"name": f"{len(items)} inputs", "path": None, "n_inputs": len(items), "sha1": None}
    make, fill = partial(index_accumulators, options=options), partial(fill_index, options=options)
    run = scale.accumulate(lm, items, make, fill, batch_size, progress)
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
