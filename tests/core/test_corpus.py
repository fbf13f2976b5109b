"""Corpus readers: plain text and CoNLL-U, with errors that name the file and line."""

from __future__ import annotations

import pytest

from attnlib.core.corpus import CorpusError, parse_conllu, parse_text_corpus, read_conllu, read_corpus, read_text_corpus
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV

GOOD = """# sent_id = s1
# text = Don't go.
1-2\tDon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tDo\tdo\tAUX\t_\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_
3.1\tgone\tgo\tVERB\t_\t_\t_\t_\t3:x\t_
4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

"""


def test_text_corpus_single_and_pairs():
    inputs = parse_text_corpus("One sentence.\n\nA first.\tA second.\n", "t.txt")
    assert [(i.text_a, i.text_b, i.line) for i in inputs] == [("One sentence.", None, 1), ("A first.", "A second.", 3)]


def test_text_corpus_errors_name_the_line():
    with pytest.raises(CorpusError, match=r"t.txt, line 2: 2 TABs"):
        parse_text_corpus("ok\na\tb\tc\n", "t.txt")
    with pytest.raises(CorpusError, match="line 1: one side of the TAB is empty"):
        parse_text_corpus("a\t \n", "t.txt")


def test_not_utf8_is_refused():
    with pytest.raises(CorpusError, match="not a UTF-8"):
        read_text_corpus(b"caf\xe9\n", "latin1.txt")


def test_conllu_keeps_syntactic_words_only():
    (s,) = parse_conllu(GOOD, "g.conllu")
    assert s.words == ["Do", "n't", "go", "."]
    assert s.heads == [3, 3, 0, 3] and s.deprels == ["aux", "advmod", "root", "punct"] and s.sent_id == "s1"


@pytest.mark.parametrize(
    "bad,message",
    [
        (GOOD.replace("3\tadvmod", "x\tadvmod"), r"line 5: .*head"),
        (GOOD.replace("3\tadvmod", "9\tadvmod"), r"line 5: HEAD 9 is outside"),
        (
            GOOD.replace("1\tDo\tdo\tAUX\t_\t_\t3", "1\tDo\tdo\tAUX\t_\t_\t2").replace(
                "2\tn't\tnot\tPART\t_\t_\t3", "2\tn't\tnot\tPART\t_\t_\t1"
            ),
            r"cycle",
        ),
        (
            GOOD.replace("4\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_", "4\t.\t.\tPUNCT\t_\t3\tpunct\t_\t_"),
            r"line 8: 9 columns",
        ),
    ],
)
def test_malformed_conllu_names_the_line(bad, message):
    with pytest.raises(CorpusError, match=message):
        parse_conllu(bad, "bad.conllu")


def test_classroom_set_is_large_enough():
    singles, pairs = read_corpus(CLASSROOM_SINGLE), read_corpus(CLASSROOM_PAIRS)
    assert len(singles) >= 60 and all(i.text_b is None for i in singles)
    assert len(pairs) >= 60 and all(i.text_b for i in pairs)
    assert (pairs[0].text_a, pairs[0].text_b) == ("I went to the store.", "At the store, I bought fresh strawberries.")


def test_empty_corpus_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(CorpusError, match="no usable input"):
        read_corpus(tmp_path / "empty.txt")


def test_ewt_dev_reads_whole():
    sentences = read_conllu(EWT_DEV)
    assert len(sentences) == 2001
    assert all(len(s.heads) == len(s.words) == len(s.deprels) for s in sentences)
    assert sum(h == 0 for s in sentences for h in s.heads) == 2001  # one root per sentence


def test_methods_sections_are_in_the_repository():
    from attnlib.results.shipped import METHODS, methods_section

    assert METHODS.is_file()
    for number in range(1, 23):
        section = methods_section(number)
        assert section.startswith(f"## {number}. "), number
        assert f"## {number + 1}. " not in section
    assert methods_section(23) == ""
