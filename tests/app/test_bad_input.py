"""Bad input in the library, the command line and the app: a clear message, what was typed kept, the app still usable.

Also the security settings: allow-list of model ids, local folders switched off, no remote code, bounded uploads."""

from __future__ import annotations

import re
import tomllib

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.core.corpus import CorpusError, parse_conllu, parse_text_corpus, read_conllu, read_corpus, read_text_corpus
from attnlib.core.model import DEFAULT_MODEL, ModelLoadError, check_allowed, load_model, parse_model_list
from attnlib.core.runner import InputError, run
from attnlib.results.shipped import ROOT
from support.bad_input import (
    CONLLU_BAD,
    CONLLU_OK,
    EMPTY_TEXTS,
    INVISIBLE_TEXTS,
    LONG_LINE_CORPUS,
    LONG_TEXT,
    NOT_UTF8,
    ODD_TEXTS,
    UPLOADS,
    VALID,
    _assert_kept_default,
    _choose_other,
    _cli,
    _live,
    _sidebar,
    _type,
    _upload,
)


def _one_clear_line(err: str) -> str:
    """The command line's error: one line starting with 'error:', never a traceback."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---------- the library --------------------------------------------------------------------------------------------


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


def _as_if_online_but_unknown(monkeypatch) -> None:
    """The Hub looks reachable but every request fails at once, as for an id the Hub does not know."""
    import huggingface_hub.constants

    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.mark.parametrize("name", ["no-such-user/no-such-model-xyz", "not a model id!"])
def test_library_unknown_model_id(monkeypatch, name):
    _as_if_online_but_unknown(monkeypatch)
    with pytest.raises(ModelLoadError, match="is not a model id or folder that can be loaded"):
        load_model(name)


def test_library_model_id_without_network(monkeypatch):
    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(model, "_is_cached", lambda repo_id: False)
    with pytest.raises(ModelLoadError, match="not reachable from this machine"):
        load_model("bert-base-uncased")


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory):
    """A tiny random T5 saved without its tokenizer, in a folder."""
    from transformers import T5Config, T5ForConditionalGeneration

    folder = tmp_path_factory.mktemp("tiny-t5")
    config = T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=50)
    T5ForConditionalGeneration(config).save_pretrained(folder)
    return folder


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


# ---------- the command line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", list(EMPTY_TEXTS.values()) + list(INVISIBLE_TEXTS.values()), ids=list(EMPTY_TEXTS) + list(INVISIBLE_TEXTS)
)
def test_cli_refuses_empty_text(text, capsys):
    code, _, err = _cli("attention", "--text", text, "--json", capsys=capsys)
    assert code == 2
    assert re.match(r"error: Sentence A (is empty|has nothing the model can read)", _one_clear_line(err))


@pytest.mark.parametrize("text", list(ODD_TEXTS.values()) + [LONG_TEXT], ids=list(ODD_TEXTS) + ["5000 words"])
def test_cli_runs_unusual_and_long_text(tiny_model_dir, text, capsys):
    code, data, err = _cli("attention", "--text", text, "--model", str(tiny_model_dir), "--json", capsys=capsys)
    assert code == 0, err
    n = len(data["tokens"])
    assert np.array(data["attentions"]).shape[-2:] == (n, n)
    assert data["truncated"] == (text == LONG_TEXT)


@pytest.mark.parametrize("tiny_model_dir", ["roberta"], indirect=True)
def test_cli_roberta(tiny_model_dir, capsys):
    code, data, err = _cli(
        "attention",
        "--text",
        "I went to the store.",
        "--pair",
        "I bought strawberries.",
        "--model",
        str(tiny_model_dir),
        "--json",
        capsys=capsys,
    )
    assert code == 0, err
    assert data["tokens"][0] == "<s>" and data["tokens"][-1] == "</s>" and data["segments"][-1] == 1


def test_cli_model_errors(t5_dir, monkeypatch, capsys):
    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(model, "_is_cached", lambda repo_id: False)
    code, _, err = _cli(
        "attention", "--text", VALID, "--model", "no-such-user/no-such-model-xyz", "--json", capsys=capsys
    )
    assert code == 2 and "not reachable" in _one_clear_line(err)
    code, _, err = _cli("attention", "--text", VALID, "--model", str(t5_dir), "--json", capsys=capsys)
    assert code == 2 and "is not the model's own" in _one_clear_line(err)


@pytest.mark.parametrize("case", CONLLU_BAD, ids=CONLLU_BAD.keys())
def test_cli_malformed_conllu(case, tmp_path, capsys):
    text, line, what = CONLLU_BAD[case]
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    code, _, err = _cli("deps", "--conllu", str(path), "--json", capsys=capsys)
    assert code == 2 and f"bad.conllu, line {line}: " in _one_clear_line(err) and what in err
    code, _, err = _cli("special", "--corpus", str(path), "--json", capsys=capsys)
    assert code == 2 and f"line {line}: " in _one_clear_line(err)


def test_cli_not_utf8_and_empty_corpus(tmp_path, capsys):
    for name, data, message in (
        ("latin1.txt", NOT_UTF8, "not a UTF-8 text file"),
        ("latin1.conllu", NOT_UTF8, "not a UTF-8 text file"),
        ("blank.txt", b"\n \n", "no usable input"),
        ("blank.conllu", b"\n\n", "no"),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        command = ["deps", "--conllu"] if name.endswith(".conllu") else ["special", "--corpus"]
        code, _, err = _cli(*command, str(path), "--json", capsys=capsys)
        assert code == 2 and message in _one_clear_line(err), (name, err)


def test_library_corpus_keeps_a_very_long_line(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(LONG_LINE_CORPUS)
    inputs = read_corpus(str(path))
    assert [len(str(i.text_a)) for i in inputs] == [len(VALID), len(LONG_TEXT) + 1, len("A dog barked.")]


# ---------- the app (Streamlit AppTest) ----------------------------------------------------------------------------


def _assert_usable(at: AppTest) -> None:
    """A normal sentence afterwards draws the view with no message."""
    _type(at, VALID)
    assert not at.exception and not at.warning and not at.error
    assert any("tokens." in c.value for c in at.caption)


@pytest.mark.parametrize(
    "text", list(EMPTY_TEXTS.values()) + list(INVISIBLE_TEXTS.values()), ids=list(EMPTY_TEXTS) + list(INVISIBLE_TEXTS)
)
def test_app_live_empty_text(live_app, text):
    at = _type(live_app, text)
    assert not at.exception
    assert [w.value for w in at.warning] and re.match(
        r"Sentence A (is empty|has nothing the model can read)", at.warning[0].value
    )
    assert at.text_area(key="text_a").value == text  # what was typed is kept
    _assert_usable(at)


@pytest.mark.parametrize("text", list(ODD_TEXTS.values()), ids=list(ODD_TEXTS))
def test_app_live_unusual_characters(live_app, text):
    at = _type(live_app, text, "A second sentence.")
    assert not at.exception and not at.error and not at.warning
    assert at.text_area(key="text_a").value == text and at.query_params["a"] == text
    for view in ("model", "neuron", "head"):
        at.radio(key="live_view").set_value(view).run()
        assert not at.exception, (view, at.exception)
    at.radio(key="live_level").set_value("word").run()
    assert not at.exception
    _assert_usable(at)


def test_app_live_5000_words(live_app):
    at = _type(live_app, LONG_TEXT)
    assert not at.exception and not at.error
    assert any("truncated" in w.value and "512" in w.value for w in at.warning)
    assert at.text_area(key="text_a").value == LONG_TEXT
    _assert_usable(at)


@pytest.mark.parametrize("tiny_model_dir", ["roberta"], indirect=True)
def test_app_live_roberta(tiny_model_dir):
    at = _live(model=str(tiny_model_dir))
    assert not at.exception and not at.error
    assert at.session_state["model_name"] == str(tiny_model_dir)
    at = _type(at, "I went to the store.", "I bought fresh strawberries.")
    assert not at.exception and not at.error
    for view in ("model", "neuron", "head"):
        at.radio(key="live_view").set_value(view).run()
        assert not at.exception, (view, at.exception)
    at.radio(key="live_level").set_value("word").run()
    assert not at.exception and at.session_state["model_name"] == str(tiny_model_dir)


def test_app_sidebar_unknown_id_and_no_network(monkeypatch):
    import attnlib.core.model as model

    _as_if_online_but_unknown(monkeypatch)
    at = _choose_other(_sidebar(), "no-such-user/no-such-model-xyz")
    _assert_kept_default(at, "no-such-user/no-such-model-xyz", "is not a model id or folder that can be loaded")
    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(model, "_is_cached", lambda repo_id: False)
    at.text_input(key="model_custom").input("bert-base-uncased").run()
    _assert_kept_default(at, "bert-base-uncased", "Hugging Face Hub is not reachable")


def test_app_sidebar_encoder_decoder_without_its_tokenizer(t5_dir):
    at = _choose_other(_sidebar(), str(t5_dir))
    _assert_kept_default(at, str(t5_dir), "tokenizer .* is not the model's own")


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_app_sidebar_allow_list_beats_cached_model(tiny_model_dir, monkeypatch):
    """A model loaded before the allow-list was set (still in the process cache) is refused all the same."""
    from ui.sources.model_sidebar import cached_model, try_load

    cached_model(str(tiny_model_dir), True)
    monkeypatch.setenv("ATTNLIB_ALLOWED_MODELS", "roberta-base")
    lm, error = try_load(str(tiny_model_dir))
    assert lm is None and "not one of the models this server allows" in error
    at = _sidebar(model=str(tiny_model_dir))
    assert not at.exception and at.session_state["model_name"] == DEFAULT_MODEL


def _picker_only():
    import streamlit as st

    from ui.sources.corpus_picker import corpus_picker

    choice = corpus_picker("t", kind="any")
    if choice is not None:
        st.write(f"picked {len(choice.inputs)}")


@pytest.fixture
def picker():
    at = AppTest.from_function(_picker_only, default_timeout=120).run()
    at.selectbox(key="t_corpus").select("Upload a text or CoNLL-U file").run()
    assert not at.exception and any("Choose a file" in i.value for i in at.info)
    return at


@pytest.mark.parametrize("case", UPLOADS, ids=UPLOADS.keys())
def test_app_upload_errors(picker, case):
    name, data, message = UPLOADS[case]
    at = _upload(picker, name, data)
    assert not at.exception
    assert any(re.search(message, e.value) for e in at.error), [e.value for e in at.error]
    assert at.selectbox(key="t_corpus").value == "Upload a text or CoNLL-U file"  # the choice is kept
    at = _upload(at, "ok.conllu", CONLLU_OK.encode())
    assert not at.exception and not at.error and any(m.value == "picked 1" for m in at.markdown)


def test_app_upload_over_size_limit(picker):
    from ui.sources.corpus_picker import MAX_UPLOAD_BYTES

    at = _upload(picker, "huge.txt", b"A sentence.\n" * (MAX_UPLOAD_BYTES // 12 + 1))
    assert not at.exception and any("the limit is" in e.value for e in at.error)


def test_upload_limit_set_in_config():
    """Streamlit refuses bigger uploads itself (server.maxUploadSize, in MB); the picker's own check says the same."""
    from ui.sources.corpus_picker import MAX_UPLOAD_BYTES

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["maxUploadSize"] * 1024 * 1024 == MAX_UPLOAD_BYTES
    assert config["client"]["showErrorDetails"] == "none"  # visitors never see a traceback's details


# ---------- security -----------------------------------------------------------------------------------------------
