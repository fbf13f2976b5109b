"""Bad input in the library, the command line and the app: a clear message, what was typed kept, the app still usable.

Also the security settings: allow-list of model ids, local folders switched off, no remote code, bounded uploads."""

from __future__ import annotations

import re
import subprocess
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
    _live,
    _sidebar,
    _type,
    _upload,
)
from support.cli import run_cli


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
def test_cli_refuses_empty_text(text):
    ran = run_cli("attention", "--text", text, "--json")
    assert ran.code == 2
    assert re.match(r"error: Sentence A (is empty|has nothing the model can read)", _one_clear_line(ran.err))


@pytest.mark.parametrize("text", list(ODD_TEXTS.values()) + [LONG_TEXT], ids=list(ODD_TEXTS) + ["5000 words"])
def test_cli_runs_unusual_and_long_text(tiny_model_dir, text):
    ran = run_cli("attention", "--text", text, "--model", str(tiny_model_dir), "--json")
    assert ran.code == 0, ran.err
    n = len(ran.json["tokens"])
    assert np.array(ran.json["attentions"]).shape[-2:] == (n, n)
    assert ran.json["truncated"] == (text == LONG_TEXT)


@pytest.mark.parametrize("tiny_model_dir", ["roberta"], indirect=True)
def test_cli_roberta(tiny_model_dir):
    ran = run_cli(
        "attention",
        "--text",
        "I went to the store.",
        "--pair",
        "I bought strawberries.",
        "--model",
        str(tiny_model_dir),
        "--json",
    )
    assert ran.code == 0, ran.err
    assert ran.json["tokens"][0] == "<s>" and ran.json["tokens"][-1] == "</s>" and ran.json["segments"][-1] == 1


def test_cli_model_errors(t5_dir, monkeypatch):
    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setattr(model, "_is_cached", lambda repo_id: False)
    ran = run_cli("attention", "--text", VALID, "--model", "no-such-user/no-such-model-xyz", "--json")
    assert ran.code == 2 and "not reachable" in _one_clear_line(ran.err)
    ran = run_cli("attention", "--text", VALID, "--model", str(t5_dir), "--json")
    assert ran.code == 2 and "is not the model's own" in _one_clear_line(ran.err)


@pytest.mark.parametrize("case", CONLLU_BAD, ids=CONLLU_BAD.keys())
def test_cli_malformed_conllu(case, tmp_path):
    text, line, what = CONLLU_BAD[case]
    path = tmp_path / "bad.conllu"
    path.write_text(text)
    ran = run_cli("deps", "--conllu", str(path), "--json")
    assert ran.code == 2 and f"bad.conllu, line {line}: " in _one_clear_line(ran.err) and what in ran.err
    ran = run_cli("special", "--corpus", str(path), "--json")
    assert ran.code == 2 and f"line {line}: " in _one_clear_line(ran.err)


def test_cli_not_utf8_and_empty_corpus(tmp_path):
    for name, data, message in (
        ("latin1.txt", NOT_UTF8, "not a UTF-8 text file"),
        ("latin1.conllu", NOT_UTF8, "not a UTF-8 text file"),
        ("blank.txt", b"\n \n", "no usable input"),
        ("blank.conllu", b"\n\n", "no"),
    ):
        path = tmp_path / name
        path.write_bytes(data)
        command = ["deps", "--conllu"] if name.endswith(".conllu") else ["special", "--corpus"]
        ran = run_cli(*command, str(path), "--json")
        assert ran.code == 2 and message in _one_clear_line(ran.err), (name, ran.err)


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


# ---------- slow tests


@pytest.mark.slow
@pytest.mark.parametrize("command", ["special", "positions"])
def test_cli_long_corpus_line_is_truncated_and_counted(tiny_model_dir, tmp_path, command):
    path = tmp_path / "long.txt"
    path.write_text(LONG_LINE_CORPUS)
    extra = ["--probes", "1"] if command == "positions" else []
    ran = run_cli(command, "--corpus", str(path), "--model", str(tiny_model_dir), *extra, "--json")
    assert ran.code == 0, ran.err
    assert ran.json["n_inputs"] == 3 and ran.json["n_truncated"] == 1


@pytest.mark.slow
def test_app_typed_text_follows_the_visitor_across_pages(live_app):
    """Streamlit drops widget values and the URL on a page change; the typed sentence must survive both."""
    at = _type(live_app, "My own sentence about a purple owl.", "")
    at.session_state["lg_tab"] = "One example"  # the Local vs global tab with the sentence inputs
    for page in ("app_pages/local_global/page.py", "app_pages/dependency_heads/page.py", "app_pages/live/page.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        if page != "app_pages/dependency_heads/page.py":  # a page without the sentence inputs in between
            assert at.text_area(key="text_a").value == "My own sentence about a purple owl.", page
            assert (
                at.text_area(key="text_b").value == "" and at.query_params["a"] == "My own sentence about a purple owl."
            )


BAD_TYPED = {
    **EMPTY_TEXTS,
    **INVISIBLE_TEXTS,
    "emoji": ODD_TEXTS["emoji"],
    "punctuation only": ODD_TEXTS["punctuation only"],
}


@pytest.mark.slow
@pytest.mark.parametrize("text", BAD_TYPED.values(), ids=BAD_TYPED.keys())
def test_app_local_global_example_bad_text(live_app, text):
    live_app.session_state["lg_tab"] = "One example"
    at = live_app.switch_page("app_pages/local_global/page.py").run()
    assert not at.exception, at.exception
    at = _type(at, text)
    assert not at.exception, at.exception
    if text in EMPTY_TEXTS.values() or text in INVISIBLE_TEXTS.values():
        assert any(re.match(r"Sentence A (is empty|has nothing the model can read)", w.value) for w in at.warning)
    assert at.text_area(key="text_a").value == text


@pytest.mark.slow
@pytest.mark.parametrize("text", BAD_TYPED.values(), ids=BAD_TYPED.keys())
def test_app_deps_typed_text_bad(live_app, text):
    at = live_app.switch_page("app_pages/dependency_heads/page.py").run()
    at.radio(key="deps_source").set_value("silver").run()
    at.selectbox(key="deps_text_choice").select("Type or paste text").run()
    at.text_area(key="deps_text").input(text).run()
    assert not at.exception, at.exception
    assert at.text_area(key="deps_text").value == text
    if not text.strip():
        assert any("no sentence" in w.value for w in at.warning)


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
@pytest.mark.parametrize("how", ["env", "secrets"])
def test_app_sidebar_local_folders_off(tiny_model_dir, monkeypatch, how):
    secrets = None
    if how == "env":
        monkeypatch.setenv("ATTNLIB_ALLOW_LOCAL_MODELS", "0")
    else:
        secrets = {"allow_local_models": False}
    at = _choose_other(_sidebar(secrets), str(tiny_model_dir))
    _assert_kept_default(at, str(tiny_model_dir), "local folders is switched off")
    # a link to a local folder falls back too
    at = _sidebar(secrets, model=str(tiny_model_dir))
    assert not at.exception and any("switched off" in e.value for e in at.error)
    assert at.session_state["model_name"] == DEFAULT_MODEL


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
@pytest.mark.parametrize("how", ["env", "secrets"])
def test_app_sidebar_allow_list(tiny_model_dir, monkeypatch, how):
    allowed = f"{tiny_model_dir}, roberta-base"
    secrets = None
    if how == "env":
        monkeypatch.setenv("ATTNLIB_ALLOWED_MODELS", allowed)
    else:
        secrets = {"allowed_models": [str(tiny_model_dir), "roberta-base"]}
    at = _sidebar(secrets)
    assert not at.exception
    assert at.selectbox(key="model_choice").options == [DEFAULT_MODEL, str(tiny_model_dir), "roberta-base"]
    at.selectbox(key="model_choice").select(str(tiny_model_dir)).run()
    assert not at.exception and at.session_state["model_name"] == str(tiny_model_dir)
    # a link naming a model that is not allowed: a message and the default, nothing loaded
    at = _sidebar(secrets, model="bert-base-uncased")
    assert not at.exception
    assert any("'bert-base-uncased' is not one of the models this server allows" in e.value for e in at.error)
    assert at.session_state["model_name"] == DEFAULT_MODEL and at.query_params["model"] == DEFAULT_MODEL


@pytest.mark.slow
@pytest.mark.parametrize("case", ["conllu cycle", "not UTF-8 conllu", "blank conllu"])
def test_app_corpus_pages_show_upload_errors(case):
    """The real pages (not just the picker) turn a bad upload into a message and stay usable."""
    name, data, message = UPLOADS[case]
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    # open the pages on the upload choice, so that no corpus is analysed before the upload
    at.session_state["special_corpus"] = "Upload a text or CoNLL-U file"
    at.session_state["deps_corpus"] = "Upload a CoNLL-U file"
    for page, key, upload_label in (
        ("app_pages/special_tokens/page.py", "special", "Upload a text or CoNLL-U file"),
        ("app_pages/dependency_heads/page.py", "deps", "Upload a CoNLL-U file"),
    ):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        if key == "deps":
            at.radio(key="deps_source").set_value("gold").run()
        assert at.selectbox(key=f"{key}_corpus").value == upload_label
        at = _upload(at, name, data, key)
        assert not at.exception, (page, at.exception)
        assert any(re.search(message, e.value) for e in at.error), (page, [e.value for e in at.error])


@pytest.mark.slow
def test_upload_is_kept_when_leaving_the_page():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.session_state["special_corpus"] = "Upload a text or CoNLL-U file"
    at.switch_page("app_pages/special_tokens/page.py").run()
    at = _upload(at, "ok.conllu", CONLLU_OK.encode(), "special")
    at.switch_page("app_pages/live/page.py").run()
    at.switch_page("app_pages/special_tokens/page.py").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.selectbox(key="special_corpus").value == "Upload a text or CoNLL-U file"
    assert any("ok.conllu, uploaded earlier" in c.value for c in at.caption)
    assert any(c.value == "1 inputs from ok.conllu" for c in at.caption)


def _repo_sources():
    """The project's own text files: tracked or not yet added, never what .gitignore names (venvs, outputs)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    for name in listed.split("\0"):
        path = ROOT / name
        if name and path.is_file() and path.suffix in (".py", ".toml", ".md", ".sh", ".txt", ".cfg", ".yaml", ".yml"):
            yield path


@pytest.mark.slow
def test_remote_code_never_trusted():
    enabled = re.compile(r"trust_remote_code\s*=\s*(True|1|\"|')")
    hits = [str(p.relative_to(ROOT)) for p in _repo_sources() if enabled.search(p.read_text(errors="replace"))]
    assert hits == []
    assert "trust_remote_code=False" in (ROOT / "attnlib" / "core" / "model.py").read_text()


PICKLE_SPRUNG = []


def _sprung() -> None:
    PICKLE_SPRUNG.append(True)


class _Trap:
    """Unpickling this object would run _sprung: the test of whether anything unpickles an upload."""

    def __reduce__(self):
        return (_sprung, ())


@pytest.mark.slow
def test_uploads_are_never_unpickled():
    """Uploads (corpora, result files) are parsed as text or JSON: a pickle is refused and its code never runs."""
    import pickle

    from attnlib.results.files import ResultFileError, read_result_file
    from ui.sources.corpus_picker import parse_upload

    payload = pickle.dumps(_Trap())
    for read in (
        lambda: read_text_corpus(payload, "x.txt"),
        lambda: read_conllu(payload, "x.conllu"),
        lambda: parse_upload(payload, "x.txt", False),
        lambda: parse_upload(payload, "x.conllu", True),
    ):
        with pytest.raises(CorpusError):
            read()
    with pytest.raises(ResultFileError, match="not a JSON file"):
        read_result_file(payload)
    assert PICKLE_SPRUNG == []
    # and nothing that serves visitors calls a deserialiser that can run code; attnlib/core/engines.py pickles only the
    # payloads it makes itself for its Ray workers
    risky = re.compile(r"\b(pickle|cPickle|dill|joblib)\.loads?\b|\btorch\.load\(|allow_pickle=True")
    folders = ("attnlib", "ui", "app_pages")
    hits = [
        str(p.relative_to(ROOT))
        for p in _repo_sources()
        if p.parts[len(ROOT.parts)] in folders and p.name != "engines.py" and risky.search(p.read_text())
    ]
    assert hits == [] and "pickle" not in (ROOT / "app.py").read_text()
