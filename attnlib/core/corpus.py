"""Corpus readers: plain text (one input per line, TAB between A and B) and CoNLL-U (basic trees)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


class CorpusError(ValueError):
    """A corpus file cannot be read; the message names the file and the line."""


@dataclass
class CorpusInput:
    """One input of a corpus: sentence A (text or words), optional sentence B, and where it came from."""

    text_a: str | list[str]
    text_b: str | list[str] | None = None
    line: int = 0


@dataclass
class Sentence(CorpusInput):
    """A CoNLL-U sentence: its syntactic words with 1-based heads (0 = root), relation labels and gold UPOS tags."""

    heads: list[int] = field(default_factory=list)
    deprels: list[str] = field(default_factory=list)
    sent_id: str = ""
    upos: list[str] = field(default_factory=list)  # each word's universal part of speech ("_" where not given)

    @property
    def words(self) -> list[str]:
        return list(self.text_a)


def _decode(data: bytes, name: str) -> str:
    """Decode UTF-8 (a BOM is allowed) or say clearly that the file is not text."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{name}: not a UTF-8 text file (byte {exc.start} cannot be decoded).") from exc


def _read(source: str | Path | bytes, name: str | None) -> tuple[str, str]:
    """Text and display name of a path or of uploaded bytes."""
    if isinstance(source, bytes):
        return _decode(source, name or "upload"), name or "upload"
    path = Path(source)
    if not path.is_file():
        raise CorpusError(f"{path}: no such file.")
    return _decode(path.read_bytes(), name or str(path)), name or str(path)


def parse_text_corpus(text: str, name: str = "text") -> list[CorpusInput]:
    """Parse plain text: one input per non-blank line, one TAB separating sentence A from sentence B."""
    inputs = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip("\r\n")
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) > 2:
            raise CorpusError(
                f"{name}, line {number}: {len(parts) - 1} TABs; use one TAB to separate sentence A from B."
            )
        a = parts[0].strip()
        b = parts[1].strip() if len(parts) == 2 else None
        if not a or (b is not None and not b):
            raise CorpusError(f"{name}, line {number}: one side of the TAB is empty.")
        inputs.append(CorpusInput(a, b, number))
    return inputs


def read_text_corpus(source: str | Path | bytes, name: str | None = None) -> list[CorpusInput]:
    """Read a plain-text corpus from a path or uploaded bytes."""
    text, name = _read(source, name)
    return parse_text_corpus(text, name)


def _sentence_blocks(text: str) -> Iterator[tuple[int, list[tuple[int, str]]]]:
    """Blank-line separated blocks of (line number, line)."""
    block: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            block.append((number, line))
        elif block:
            yield block[0][0], block
            block = []
    if block:
        yield block[0][0], block


def _parse_block(block: list[tuple[int, str]], name: str) -> Sentence:
    """Parse one sentence with the conllu package, keeping syntactic words only, and check its tree."""
    from conllu import parse_token_and_metadata
    from conllu.exceptions import ParseException

    sent_id = ""
    words: list[str] = []
    heads: list[int] = []
    deprels: list[str] = []
    upos: list[str] = []
    lines: list[int] = []
    for number, line in block:
        if line.startswith("#"):
            if line.startswith("# sent_id"):
                sent_id = line.split("=", 1)[-1].strip()
            continue
        columns = line.split("\t")
        if len(columns) != 10:
            raise CorpusError(f"{name}, line {number}: {len(columns)} columns, CoNLL-U needs 10 separated by TABs.")
        if columns[0].isdigit() and not columns[6].isdigit():  # the conllu package's own message is cryptic
            raise CorpusError(
                f"{name}, line {number}: HEAD '{columns[6]}' is not a number (a head is a word number, 0 for the root)."
            )
        try:
            token = parse_token_and_metadata(line)[0]
        except ParseException as exc:
            raise CorpusError(f"{name}, line {number}: {exc}") from exc
        if not isinstance(token["id"], int):  # multiword range (1-2) or empty node (1.1)
            continue
        if token["id"] != len(words) + 1:
            raise CorpusError(f"{name}, line {number}: word id {token['id']} where {len(words) + 1} was expected.")
        if not isinstance(token["head"], int):
            raise CorpusError(
                f"{name}, line {number}: HEAD '{columns[6]}' is not a number (a head is a word number, 0 for the root)."
            )
        words.append(token["form"])
        heads.append(token["head"])
        deprels.append(token["deprel"] or "_")
        upos.append(token["upos"] or "_")
        lines.append(number)
    if not words:
        raise CorpusError(f"{name}, line {block[0][0]}: a sentence with no words.")
    for head, number in zip(heads, lines):
        if not 0 <= head <= len(words):
            raise CorpusError(f"{name}, line {number}: HEAD {head} is outside the sentence (1..{len(words)}, or 0).")
    _check_tree(heads, lines, name)
    return Sentence(words, None, lines[0], heads=heads, deprels=deprels, sent_id=sent_id, upos=upos)


def _check_tree(heads: list[int], lines: list[int], name: str) -> None:
    """Every word must reach the root (0) without a cycle."""
    for start in range(1, len(heads) + 1):
        seen, node = set(), start
        while node != 0:
            if node in seen:
                raise CorpusError(
                    f"{name}, line {lines[start - 1]}: the HEAD column makes a cycle through word {node}."
                )
            seen.add(node)
            node = heads[node - 1]


def parse_conllu(text: str, name: str = "conllu") -> list[Sentence]:
    """Parse CoNLL-U text into sentences of syntactic words (range lines and empty nodes skipped)."""
    return [_parse_block(block, name) for _, block in _sentence_blocks(text)]


def read_conllu(source: str | Path | bytes, name: str | None = None) -> list[Sentence]:
    """Read a CoNLL-U file from a path or uploaded bytes."""
    text, name = _read(source, name)
    return parse_conllu(text, name)


def read_corpus(source: str | Path, limit: int | None = None) -> list[CorpusInput]:
    """Read a .conllu file or a plain-text corpus, keeping the first `limit` inputs."""
    is_conllu = str(source).lower().endswith((".conllu", ".conll"))
    inputs: list[CorpusInput] = [*read_conllu(source)] if is_conllu else read_text_corpus(source)
    if not inputs:
        raise CorpusError(f"{source}: no usable input in the file.")
    return inputs[:limit] if limit else inputs
