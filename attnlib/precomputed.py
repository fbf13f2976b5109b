"""Shipped precomputed results: `--out` result files for the default model on the shipped corpora, found by an index.

`scripts/precompute.py` writes the files into `data/precomputed/` and their headers into `data/precomputed/index.json`;
a page asks `shipped_result` (or `shipped_example`) and parses only the one file that matches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from .attribution import Attribution
from .cli import build_parser
from .cli_options import command_options
from .corpus import read_conllu, read_corpus
from .results import ResultFile, read_result_file
from .shipped import PRECOMPUTED, ROOT, file_sha1

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


def text_pair_sha1(text_a: str, text_b: str | None) -> str:
    """The identity of a single input: SHA-1 of its line in a corpus file (A, a TAB and B when there is B)."""
    line = text_a if not text_b else f"{text_a}\t{text_b}"
    return hashlib.sha1(line.encode("utf-8")).hexdigest()


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


def _options_match(stored: dict, wanted: dict) -> bool:
    """Only the keys the caller passes are compared (a missing stored key never matches)."""
    return all(key in stored and stored[key] == value for key, value in wanted.items())


def shipped_result(command: str, model: str, corpus_sha1: str, n_inputs: int, options: dict) -> ResultFile | None:
    """The shipped result file of this command, model, corpus content, number of inputs and options; None if none."""
    for entry in _index():
        if (
            entry.command == command
            and entry.model == model
            and entry.corpus.get("sha1") == corpus_sha1
            and entry.corpus.get("n_inputs") == n_inputs
            and _options_match(entry.options, options)
        ):
            return _read(entry.file)
    return None


def shipped_example(model: str, text_a: str, text_b: str | None) -> Attribution | None:
    """The shipped exact attribution of this sentence or pair for this model (the Live page's default); None if none."""
    found = shipped_result(EXAMPLE_COMMAND, model, text_pair_sha1(text_a, (text_b or "").strip()), 1, {"mode": "exact"})
    if found is None:
        return None
    r = found.result
    return Attribution(
        tokens=list(r["tokens"]),
        input=np.array(r["input"], np.float32),
        previous=np.array(r["previous"], np.float32),
        mode="exact",
        probes=None,
    )


# A shipped slice against a fresh computation: floats are rounded to 6 significant digits in the files; float32 sums
# in another order (threads, BLAS) can swap near-equal ranks, which moves a Spearman correlation by up to ~1e-3.
TOLERANCES: dict[str, dict[str, float]] = {"positions": {"rtol": 1e-4, "atol": 1e-3}}
VOLATILE_KEYS = ("created", "run", "library_version")  # differ between two runs of the same computation


def result_differences(a: Any, b: Any, path: str = "", rtol: float = 1e-4, atol: float = 1e-5) -> list[str]:
    """Where two JSON results differ: numbers beyond atol + rtol * |b|, anything else at all (VOLATILE_KEYS skipped)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())} differ"]
        keys = [k for k in a if not (path == "" and k in VOLATILE_KEYS)]
        return [d for k in keys for d in result_differences(a[k], b[k], f"{path}.{k}", rtol, atol)]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in result_differences(x, y, f"{path}[{i}]", rtol, atol)]
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return [] if abs(a - b) <= atol + rtol * abs(b) else [f"{path}: {a} != {b}"]
    same = a == b and isinstance(a, bool) == isinstance(b, bool)  # True == 1 in Python
    return [] if same else [f"{path}: {a!r} != {b!r}"]


def parse_command(argv: list[str]) -> argparse.Namespace | None:
    """The CLI's parse of these arguments, or None when this attnlib lacks the command or one of its options."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices.get(argv[0])
    if command is None or any(a.startswith("--") and a not in command._option_string_actions for a in argv[1:]):
        return None
    return parser.parse_args(argv)


def example_options(args: argparse.Namespace) -> dict:
    """The options of an `hta` example: the command's options without its texts (they are its corpus)."""
    return {k: v for k, v in command_options(args).items() if k not in ("text", "pair")}


@cache
def _corpus_size(path: Path, sha1: str) -> int:
    """Inputs of a corpus file as the commands read it (cached per content: the treebanks take seconds to parse)."""
    return len(read_conllu(path) if path.suffix == ".conllu" else read_corpus(path))


def stale_reasons(entry: ShippedEntry, root: Path = ROOT) -> list[str]:
    """Why a shipped file no longer answers its arguments: the command, its options or the corpus file changed."""
    args = parse_command(entry.argv)
    if args is None:
        return [f"this attnlib cannot run {' '.join(entry.argv)}"]
    problems = []
    options = command_options(args)
    if entry.command == EXAMPLE_COMMAND:
        options = example_options(args)
        if entry.corpus.get("sha1") != text_pair_sha1(args.text, args.pair):
            problems.append("the example's texts changed")
    if options != entry.options:
        problems.append(f"the command's options are now {options}, the file has {entry.options}")
    if entry.corpus.get("path") is not None:
        path = root / entry.corpus["path"]
        if Path(entry.corpus["path"]).is_absolute() or not path.is_file():
            return [*problems, f"the corpus {entry.corpus['path']} is not a file of the repository"]
        digest = file_sha1(path)
        if digest != entry.corpus.get("sha1"):
            problems.append(f"{entry.corpus['path']} has changed")
        n = _corpus_size(path, digest)
        expected = min(n, getattr(args, "limit", None) or n)
        if entry.corpus.get("n_inputs") != expected:
            problems.append(f"{entry.corpus.get('n_inputs')} inputs; the corpus and --limit now give {expected}")
    return problems
