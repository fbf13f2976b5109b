"""Shipped precomputed results: `--out` result files for the default model on the shipped corpora, found by an index.

`scripts/precompute.py` writes the files into `data/precomputed/` and their headers into `data/precomputed/index.json`;
a page asks `shipped_result` (or `shipped_example`) and parses only the one file that matches.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from attnlib.analyses.base import Options
from attnlib.analyses.hta import HTA
from attnlib.analyses.registry import ANALYSES
from attnlib.core.corpus import read_conllu, read_corpus
from attnlib.results.files import ResultFile, ResultFileError, read_result_file, text_pair_sha1
from attnlib.results.shipped import PRECOMPUTED, ROOT, file_sha1
from attnlib.stats.hta import Attribution

INDEX = "index.json"
INDEX_FORMAT = "attnlib-precomputed-index"
EXAMPLE_COMMAND = "hta"  # the Live page's default pair, attributed exactly, stored as a result file of this command
SIGNIFICANT_DIGITS = 6


@dataclass(frozen=True)
class ShippedEntry:
    """One shipped result file as the index describes it (paths relative to the precomputed folder)."""

    name: str  # the job's name in scripts/precompute.py
    file: str
    command: str
    model: str
    corpus: dict  # name, path (repository-relative), sha1, n_inputs; the example has text_a and text_b instead of path
    options: dict
    argv: list[str] = field(default_factory=list)  # the CLI arguments that made it (without --out)
    limit: int | None = None  # the --limit it ran with (the check file: the first few inputs)
    check_file: str | None = None  # the same command on the first few inputs, for tests and --check
    check_argv: list[str] = field(default_factory=list)
    seconds: float | None = None  # the script's time for this job (full run and check run)

    def to_json(self) -> dict:
        """The entry as written to the index."""
        return dict(vars(self))


def round_floats(value: Any, digits: int = SIGNIFICANT_DIGITS) -> Any:
    """Every float in a JSON-ready structure rounded to `digits` significant digits (ints, strings, None kept)."""
    if isinstance(value, float):
        if value == 0.0 or not math.isfinite(value):
            return value
        return round(value, digits - 1 - math.floor(math.log10(abs(value))))
    if isinstance(value, dict):
        return {k: round_floats(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [round_floats(v, digits) for v in value]
    return value


def read_index(folder: Path = PRECOMPUTED) -> list[ShippedEntry]:
    """The entries of a precomputed folder's index (none when it has no index)."""
    path = folder / INDEX
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != INDEX_FORMAT:
        raise ValueError(f"{path}: not an index of precomputed results.")
    return [ShippedEntry(**entry) for entry in data["files"]]


def write_index(entries: list[ShippedEntry], folder: Path = PRECOMPUTED) -> None:
    """Write the index of a precomputed folder, entries sorted by name."""
    data = {"format": INDEX_FORMAT, "files": [e.to_json() for e in sorted(entries, key=lambda e: e.name)]}
    (folder / INDEX).write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")


@cache
def _index() -> tuple[ShippedEntry, ...]:
    return tuple(read_index())


@cache
def _file_bytes(file: str) -> bytes:
    return (PRECOMPUTED / file).read_bytes()


def _read(file: str) -> ResultFile:
    """A fresh record each time (callers may change it), from bytes read once."""
    return read_result_file(_file_bytes(file))


def shipped_results() -> list[ShippedEntry]:
    """What ships in data/precomputed/ (read from its index once per process)."""
    return list(_index())


def shipped_result(
    command: str,
    model: str,
    corpus_sha1: str,
    n_inputs: int,
    options: Options,
    train: tuple[str, int] | None = None,
) -> ResultFile | None:
    """The shipped result file of this analysis, model, corpus content and number of inputs (a probe's: the test
    file, and the training file's (SHA-1, inputs) as `train`) whose options answer `options`; None if none."""
    for entry in _index():
        trained_on = entry.corpus.get("train", {})
        if (
            entry.command == command
            and entry.model == model
            and entry.corpus.get("sha1") == corpus_sha1
            and entry.corpus.get("n_inputs") == n_inputs
            and (train is None or (trained_on.get("sha1"), trained_on.get("n_inputs")) == train)
            and ANALYSES[command].answers(entry.options, options)
        ):
            return _read(entry.file)
    return None


def shipped_example(model: str, text_a: str, text_b: str | None) -> Attribution | None:
    """The shipped exact attribution of this sentence or pair for this model (the Live page's default); None if none."""
    found = shipped_result(EXAMPLE_COMMAND, model, text_pair_sha1(text_a, (text_b or "").strip()), 1, HTA.options())
    return None if found is None else HTA.from_record(found)


# A shipped slice against a fresh computation: floats are rounded to 6 significant digits in the files; float32 sums
# in another order (threads, BLAS) can swap near-equal ranks, which moves a Spearman correlation by up to ~1e-3.
# qk: the grid and the other pictures are packed codes (a code can move by one across CPUs) and t-SNE and UMAP are
# reproducible on one machine only (METHODS §17), so the slice compares the asked picture, its points and fidelity;
# tests/analyses/test_qk.py holds the packed grid to a fresh PCA within its packing step.
TOLERANCES: dict[str, dict] = {
    "positions": {"rtol": 1e-4, "atol": 1e-3},
    "qk": {"rtol": 1e-4, "atol": 1e-4, "skip": ("grid", "pictures")},
}
VOLATILE_KEYS = ("created", "run", "library_version")  # differ between two runs of the same computation


def result_differences(
    a: Any, b: Any, path: str = "", rtol: float = 1e-4, atol: float = 1e-5, skip: tuple[str, ...] = ()
) -> list[str]:
    """Where two JSON results differ: numbers beyond atol + rtol * |b|, anything else at all (VOLATILE_KEYS skipped,
    and the values of keys named in `skip`, which must be present in both)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())} differ"]
        keys = [k for k in a if not (path == "" and k in VOLATILE_KEYS) and k not in skip]
        return [d for k in keys for d in result_differences(a[k], b[k], f"{path}.{k}", rtol, atol, skip)]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} items"]
        return [
            d for i, (x, y) in enumerate(zip(a, b)) for d in result_differences(x, y, f"{path}[{i}]", rtol, atol, skip)
        ]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if abs(a - b) <= atol + rtol * abs(b) else [f"{path}: {a} != {b}"]
    same = a == b and isinstance(a, bool) == isinstance(b, bool)  # True == 1 in Python
    return [] if same else [f"{path}: {a!r} != {b!r}"]


@cache
def _corpus_size(path: Path, sha1: str) -> int:
    """Inputs of a corpus file as the commands read it (cached per content: the treebanks take seconds to parse)."""
    return len(read_conllu(path) if path.suffix == ".conllu" else read_corpus(path))


def _corpus_problems(corpus: dict, limit: int | None, root: Path) -> list[str]:
    """Why a file's corpus record no longer describes the repository's file: gone, changed, or another size."""
    path = root / corpus["path"]
    if Path(corpus["path"]).is_absolute() or not path.is_file():
        return [f"the corpus {corpus['path']} is not a file of the repository"]
    problems = []
    digest = file_sha1(path)
    if digest != corpus.get("sha1"):
        problems.append(f"{corpus['path']} has changed")
    n = _corpus_size(path, digest)
    expected = min(n, limit or n)
    if corpus.get("n_inputs") != expected:
        problems.append(f"{corpus.get('n_inputs')} inputs; the corpus and --limit now give {expected}")
    return problems


def stale_reasons(entry: ShippedEntry, root: Path = ROOT) -> list[str]:
    """Why a shipped file no longer answers its analysis: the analysis or its options changed, or its corpus file."""
    analysis = ANALYSES.get(entry.command)
    if analysis is None:
        return [f"this attnlib has no analysis `{entry.command}`"]
    problems = []
    try:
        analysis.options_from_json(entry.options)
    except ResultFileError as exc:
        problems.append(f"the options are not those of `{entry.command}` now: {exc}")
    for corpus in (entry.corpus, entry.corpus.get("train")):
        if corpus is not None and corpus.get("path") is not None:
            problems += _corpus_problems(corpus, entry.limit, root)
    return problems
