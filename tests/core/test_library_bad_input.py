"""Bad input in the library: empty, erased or unusual text, unknown or refused models (allow-list, local folders
off), malformed corpora: a clear error, never a crash."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.corpus import CorpusError, parse_conllu, parse_text_corpus, read_conllu, read_corpus, read_text_corpus
from attnlib.core.model import DEFAULT_MODEL, ModelLoadError, check_allowed, load_model, parse_model_list
from attnlib.core.runner import InputError, run
from support.bad_input import (
    CONLLU_BAD,
    CONLLU_OK,
    EMPTY_TEXTS,
    INVISIBLE_TEXTS,
    LONG_LINE_CORPUS,
    LONG_TEXT,
    NOT_UTF8,
    ODD_TEXTS,
    VALID,
    _as_if_online_but_unknown,
)


@pytest.mark.parametrize("text", EMPTY_TEXTS.values(), ids=EMPTY_TEXTS.keys())
def test_library_refuses_empty_text(tiny_model, text):
    with pytest.raises(InputError, match="Sentence A is empty"):
        run(tiny_model, text)
    with pytest.raises(InputError, match="Sentence B is empty"):
        run(tiny_model, VALID, text)


@pytest.mark.parametrize("text", INVISIBLE_TEXTS.values(), ids=INVISIBLE_TEXTS.keys())
def test_library_refuses_text_the_tokenizer_erases(minilm, text):
    with pytest.raises(InputError, match="Sentence A has nothing the model can read"):
        run(minilm, text)
    with pytest.raises(InputError, match="Sentence B has nothing the model can read"):
        run(minilm, VALID, text)


def test_library_keeps_corpus_words_without_pieces(minilm):
    """A treebank sentence given as words runs even when the tokenizer drops them all (deps marks them unscored)."""
    r = run(minilm, ["\u200b", "\x07"])
    assert r.n == 2 and r.words == [] and r.word_ids == [None, None]


@pytest.mark.parametrize("text", ODD_TEXTS.values(), ids=ODD_TEXTS.keys())
def test_library_runs_unusual_characters(tiny_model, text):
    for r in (run(tiny_model, text), run(tiny_model, text, VALID)):
        assert r.words and all(r.words)  # byte-level BPE keeps a lone TAB or control char as a word of its own
        assert len(r.tokens) == r.n == len(r.word_ids) == r.attentions.shape[-1]
        assert np.isfinite(r.attentions).all()
        np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)
        # every word is a piece of the text as typed
        assert all(w in text or w in VALID for w in r.words)


def test_library_truncates_5000_words(tiny_model):
    r = run(tiny_model, LONG_TEXT)
    assert r.truncated and r.n == tiny_model.facts.max_length and r.n_tokens_full >= 5000
    assert r.cls_mask[0] and r.sep_mask[-1]  # still closed by the special tokens


@pytest.mark.parametrize("name", ["no-such-user/no-such-model-xyz", "not a model id!"])
def test_library_unknown_model_id(monkeypatch, name):
    _as_if_online_but_unknown(monkeypatch)
    with pytest.raises(ModelLoadError, match="is not a model id or folder that can be loaded"):
        load_model(name)


def test_library_model_id_without_network(monkeypatch):
    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(model, "_is_cached", lambda repo_id, revision=None: False)
    with pytest.raises(ModelLoadError, match="not reachable from this machine"):
        load_model("bert-base-uncased")


def test_library_refuses_an_encoder_decoder_without_its_tokenizer(t5_dir):
    with pytest.raises(ModelLoadError, match=r"tokenizer (vocabulary|.* is not the model's own)"):
        load_model(str(t5_dir))


@pytest.mark.parametrize("tiny_model_dir", ["roberta"], indirect=True)
def test_library_roberta_special_tokens(tiny_model_dir):
    lm = load_model(str(tiny_model_dir))
    assert (lm.facts.cls_token, lm.facts.sep_token) == ("<s>", "</s>")
    r = run(lm, "I went to the store.", "I bought fresh strawberries.")
    assert r.tokens[0] == "<s>" and r.cls_mask.sum() == 1 and r.sep_mask.sum() >= 2
    assert r.words == ["I", "went", "to", "the", "store", ".", "I", "bought", "fresh", "strawberries", "."]
    assert all(
        int(s) == int(w >= 6) for s, w in zip(r.segments, r.word_ids) if w is not None
    )  # B's words are segment 1


@pytest.mark.parametrize("case", CONLLU_BAD, ids=CONLLU_BAD.keys())
def test_library_malformed_conllu_names_the_line(case):
    text, line, what = CONLLU_BAD[case]
    assert parse_conllu(CONLLU_OK, "ok.conllu")  # the unbroken file parses
    with pytest.raises(CorpusError, match=rf"^bad\.conllu, line {line}: .*{what}"):
        parse_conllu(text, "bad.conllu")
    with pytest.raises(CorpusError, match=rf"line {line}:"):
        read_conllu(text.encode(), "bad.conllu")


def test_library_not_utf8(tmp_path):
    with pytest.raises(CorpusError, match="not a UTF-8 text file"):
        read_text_corpus(NOT_UTF8, "latin1.txt")
    with pytest.raises(CorpusError, match="not a UTF-8 text file"):
        read_conllu(NOT_UTF8, "latin1.conllu")
    path = tmp_path / "latin1.txt"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(CorpusError, match=r"latin1\.txt: not a UTF-8"):
        read_corpus(path)


def test_library_corpus_without_usable_input(tmp_path):
    assert parse_text_corpus("\n  \n\t\n", "blank.txt") == []
    assert parse_conllu("\n\n", "blank.conllu") == []
    path = tmp_path / "blank.txt"
    path.write_text("\n   \n\n")
    with pytest.raises(CorpusError, match="no usable input"):
        read_corpus(path)


def test_library_allow_list():
    assert parse_model_list(None) is None and parse_model_list(" , ") is None and parse_model_list([]) is None
    assert parse_model_list("bert-base-uncased, roberta-base,,bert-base-uncased") == (
        "bert-base-uncased",
        "roberta-base",
    )
    assert parse_model_list(["a", " b "]) == ("a", "b")
    check_allowed("anything/at-all", None)
    check_allowed(DEFAULT_MODEL, ("roberta-base",))  # the bundled default is always allowed
    check_allowed("roberta-base", ("roberta-base",))
    with pytest.raises(
        ModelLoadError, match="not one of the models this server allows: all-MiniLM-L6-v2, roberta-base"
    ):
        load_model("bert-base-uncased", allowed=("roberta-base",))


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_library_local_folders_switched_off(tiny_model_dir):
    with pytest.raises(ModelLoadError, match="local folders is switched off"):
        load_model(str(tiny_model_dir), allow_local=False)


def test_library_corpus_keeps_a_very_long_line(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(LONG_LINE_CORPUS)
    inputs = read_corpus(str(path))
    assert [len(str(i.text_a)) for i in inputs] == [len(VALID), len(LONG_TEXT) + 1, len("A dog barked.")]
