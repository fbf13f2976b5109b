"""Result files of the corpus commands (`--out`) and the one converter to strict JSON (NaN and infinities as null)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from attnlib.results.shipped import file_sha1
from attnlib.results.version import __version__

RESULT_FORMAT = "attnlib-result"
RESULT_FORMAT_VERSION = 1
MAX_RESULT_BYTES = 64 * 1024 * 1024


class ResultFileError(ValueError):
    """A result file that is not JSON from `--out`, or not for this command."""


@contextmanager
def malformed(what: str) -> Iterator[None]:
    """Reading a result's JSON: a missing key, a wrong type or value becomes a ResultFileError naming `what`."""
    try:
        yield
    except ResultFileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ResultFileError(f"the {what} is incomplete or malformed ({exc!r}).") from exc


def json_ready(value: Any) -> Any:
    """Lists, ints and floats for strict JSON: numpy converted, NaN and infinities written as null."""
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def numeric_array(value: Any, name: str, ndim: int, dtype: type = float) -> np.ndarray:
    """A numeric array of the given rank from JSON lists (null read as NaN), or ResultFileError."""
    try:
        array: np.ndarray = np.array(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ResultFileError(f"{name!r} is not a numeric array.") from exc
    if array.ndim != ndim:
        raise ResultFileError(f"{name!r} has {array.ndim} dimensions, not {ndim}.")
    return array


@dataclass
class ResultFile:
    """A command's result with where it came from; written by --out, loaded by the corpus pages."""

    command: str
    model: str
    corpus: dict  # name, path, sha1, n_inputs
    options: dict
    library_version: str
    created: str  # ISO 8601, UTC
    result: dict
    run: dict = field(default_factory=dict)  # engine, device, workers, seconds
    state: dict | None = None  # accumulator counts a page needs beyond the result (deps)
    facts: dict | None = None  # the model's facts (ModelFacts as a dict); None in files written before attnlib 0.2

    def provenance(self) -> str:
        """One line: computed by <command> on <corpus> with <model>, <date>."""
        try:
            when = datetime.fromisoformat(self.created).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            when = self.created
        engine = self.run.get("engine")
        how = f" ({engine}, {self.run.get('workers')} workers, {self.run.get('device')})" if engine == "ray" else ""
        return (
            f"computed by `python -m attnlib {self.command}` on {self.corpus.get('name', '?')} "
            f"({self.corpus.get('n_inputs', '?')} inputs) with {self.model}, {when}{how}; "
            f"attnlib {self.library_version}"
        )

    def options_text(self) -> str:
        """The statistic's options as `name=value, ...` (or "defaults")."""
        return ", ".join(f"{k}={v}" for k, v in self.options.items()) or "defaults"

    def to_json(self) -> dict:
        """The file's JSON object, with the format marker first."""
        return {"format": RESULT_FORMAT, "format_version": RESULT_FORMAT_VERSION, **asdict(self)}


def corpus_record(path: str | Path, n_inputs: int) -> dict:
    """A corpus file as result files describe it: name, path (as given), number of inputs used, SHA-1 of its bytes."""
    path = Path(path)
    return {
        "name": path.name,
        "path": str(path),
        "n_inputs": n_inputs,
        "sha1": file_sha1(path) if path.is_file() else None,
    }


def text_pair_sha1(text_a: str, text_b: str | None) -> str:
    """The identity of a single input: SHA-1 of its line in a corpus file (A, a TAB and B when there is B)."""
    line = text_a if not text_b else f"{text_a}\t{text_b}"
    return hashlib.sha1(line.encode("utf-8")).hexdigest()


def text_record(text_a: str, text_b: str | None) -> dict:
    """One sentence or pair as result files describe it: its texts and the SHA-1 of its corpus line."""
    text_b = (text_b or "").strip() or None
    name = "one sentence" if text_b is None else "one pair"
    return {"name": name, "path": None, "text_a": text_a, "text_b": text_b, "sha1": text_pair_sha1(text_a, text_b),
            "n_inputs": 1}  # fmt: skip


def make_result_file(
    command: str,
    model: str,
    corpus_path: str,
    n_inputs: int,
    options: dict,
    result: dict,
    run: dict | None = None,
    state: dict | None = None,
) -> ResultFile:
    """A ResultFile stamped with this library's version and the current time; the corpus named by path and hash."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    corpus = corpus_record(corpus_path, n_inputs)
    return ResultFile(command, model, corpus, options, __version__, created, result, run or {}, state)


def write_result_file(path: str | Path, record: ResultFile) -> None:
    """Write the record as strict JSON (NaN as null)."""
    text = json.dumps(json_ready(record.to_json()), allow_nan=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


# the fields every result file holds, with their JSON types; `state` may also be null
REQUIRED_FIELDS: dict[str, type] = {
    "command": str,
    "model": str,
    "corpus": dict,
    "options": dict,
    "library_version": str,
    "created": str,
    "result": dict,
    "run": dict,
}


def read_result_file(data: bytes | str, command: str | None = None, max_bytes: int = MAX_RESULT_BYTES) -> ResultFile:
    """Parse and check a result file (JSON only, nothing executed); with command, it must be that command's."""
    if len(data) > max_bytes:
        raise ResultFileError(
            f"the file is {len(data) / 1e6:.1f} MB; a result file may be at most {max_bytes / 1e6:.0f} MB."
        )
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultFileError(f"not a JSON file ({exc}).") from exc
    if not isinstance(record, dict) or record.get("format") != RESULT_FORMAT:
        raise ResultFileError('not a result file of `python -m attnlib ... --out` (no "format": "attnlib-result").')
    if record.get("format_version") != RESULT_FORMAT_VERSION:
        raise ResultFileError(
            f"result file format {record.get('format_version')!r}; this app reads {RESULT_FORMAT_VERSION}."
        )
    for key, kind in REQUIRED_FIELDS.items():
        if not isinstance(record.get(key), kind):
            raise ResultFileError(f"the result file has no valid {key!r}.")
    if command is not None and record["command"] != command:
        raise ResultFileError(f"this file holds the result of `{record['command']}`; this page shows `{command}`.")
    state, facts = record.get("state"), record.get("facts")
    if state is not None and not isinstance(state, dict):
        raise ResultFileError("the result file has no valid 'state'.")
    if facts is not None and not isinstance(facts, dict):
        raise ResultFileError("the result file has no valid 'facts'.")
    return ResultFile(
        command=record["command"],
        model=record["model"],
        corpus=record["corpus"],
        options=record["options"],
        library_version=record["library_version"],
        created=record["created"],
        result=record["result"],
        run=record["run"],
        state=state,
        facts=facts,
    )


def comparison_caveats(first_corpus: dict, first_options: dict, second: ResultFile, keys: tuple[str, ...]) -> list[str]:
    """Why a second model's result file may not compare with the first result: another corpus (content or number of
    inputs), or other values of the options named in `keys` (corpora as result files describe them)."""
    caveats = []
    name_a, name_b = first_corpus.get("name", "?"), second.corpus.get("name", "?")
    sha_a, sha_b = first_corpus.get("sha1"), second.corpus.get("sha1")
    if sha_a and sha_b and sha_a != sha_b:
        caveats.append(f"the first result is of {name_a}, the second of another corpus, {name_b}")
    elif first_corpus.get("n_inputs") != second.corpus.get("n_inputs"):
        caveats.append(
            f"the first result covers {first_corpus.get('n_inputs', '?')} inputs of {name_a}, "
            f"the second {second.corpus.get('n_inputs', '?')} of {name_b}"
        )
    caveats += [
        f"{key} is {first_options[key]} for the first, {second.options[key]} for the second"
        for key in keys
        if key in first_options and key in second.options and first_options[key] != second.options[key]
    ]
    return caveats
