"""Bad input in the app: a clear message, what was typed kept, the app still usable (the library's and the command
line's in core/test_library_bad_input.py and cli/test_cli_bad_input.py).

Also the security settings: allow-list of model ids, local folders switched off, no remote code, bounded uploads."""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.core.corpus import CorpusError, read_conllu, read_text_corpus
from attnlib.core.model import DEFAULT_MODEL, TRAINED_MODEL
from attnlib.results.shipped import ROOT
from support.bad_input import (
    CONLLU_OK,
    EMPTY_TEXTS,
    INVISIBLE_TEXTS,
    LONG_TEXT,
    ODD_TEXTS,
    UPLOADS,
    VALID,
    _as_if_online_but_unknown,
    _assert_kept_default,
    _choose_other,
    _live,
    _sidebar,
    _type,
    _upload,
)

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
    monkeypatch.setattr(model, "_is_cached", lambda repo_id, revision=None: False)
    at.text_input(key="model_custom").input("bert-base-uncased").run()
    _assert_kept_default(at, "bert-base-uncased", "Hugging Face Hub is not reachable")


def test_app_sidebar_encoder_decoder_without_its_tokenizer(t5_dir):
    at = _choose_other(_sidebar(), str(t5_dir))
    _assert_kept_default(at, str(t5_dir), "tokenizer .* is not the model's own")


def test_app_sidebar_model_without_attention(no_attention_dir):
    """Mamba or RWKV, typed or in a link: the sidebar (on every page) says in one sentence that it has no attention
    layers, and keeps the bundled model."""
    at = _choose_other(_sidebar(), str(no_attention_dir))
    _assert_kept_default(
        at, str(no_attention_dir), rf"^'{re.escape(str(no_attention_dir))}' \(\w+\) has no attention layers"
    )
    linked = _sidebar(model=str(no_attention_dir))
    assert not linked.exception and linked.session_state["model_name"] == DEFAULT_MODEL
    assert any("has no attention layers" in e.value and "Falling back" in e.value for e in linked.error)


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
def test_app_typed_text_follows_the_visitor_across_pages(live_app):
    """Streamlit drops widget values and the URL on a page change; the typed sentence must survive both."""
    at = _type(live_app, "My own sentence about a purple owl.", "")
    at.session_state["lg_tab"] = "One example"  # the Local vs global tab with the sentence inputs
    for page in ("app_pages/local_global/page.py", "app_pages/deps/page.py", "app_pages/live/page.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, at.exception)
        if page != "app_pages/deps/page.py":  # a page without the sentence inputs in between
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
    at = live_app.switch_page("app_pages/deps/page.py").run()
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
    # the bundled default and the model trained in the repository are always offered (they ship with the app)
    options = [DEFAULT_MODEL, TRAINED_MODEL, str(tiny_model_dir), "roberta-base"]
    assert at.selectbox(key="model_choice").options == options
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
        ("app_pages/special/page.py", "special", "Upload a text or CoNLL-U file"),
        ("app_pages/deps/page.py", "deps", "Upload a CoNLL-U file"),
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
    at.switch_page("app_pages/special/page.py").run()
    at = _upload(at, "ok.conllu", CONLLU_OK.encode(), "special")
    at.switch_page("app_pages/live/page.py").run()
    at.switch_page("app_pages/special/page.py").run()
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
