"""Bad input and the app helpers that type it (core/test_library_bad_input.py, cli/test_cli_bad_input.py,
app/test_bad_input.py, app/conftest.py)."""

from __future__ import annotations

import re

from streamlit.testing.v1 import AppTest

from attnlib.core.model import DEFAULT_MODEL
from attnlib.results.shipped import ROOT

EMPTY_TEXTS = {"empty": "", "whitespace": "  \n\t  ", "unicode spaces": "\u00a0\u2003\u3000"}


INVISIBLE_TEXTS = {"control only": "\x00\x07\x1b", "zero-width only": "\u200b\u200c\u200d\ufeff"}


ODD_TEXTS = {
    "emoji": "I love 🍓 and 🎉 so much 👩‍👩‍👧!",
    "CJK": "我喜欢草莓。東京は大きい都市です。",
    "right-to-left": "שלום עולם مرحبا بالعالم",
    "control inside": "tab\there, bell\x07 and escape\x1b[31m red",
    "zero-width inside": "zero\u200bwidth\u200djoiner\ufeff here",
    "punctuation only": "?!... ,;: -- ()",
}


LONG_TEXT = " ".join(["word"] * 5000)


VALID = "The cat sat on the mat."


# One sentence, 3 words; each malformed version breaks exactly one line (line numbers count the comment line).
CONLLU_OK = (
    "# sent_id = 1\n1\tThe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\t_\t_\t3\tnsubj\t_\t_\n"
    "3\tsat\tsit\tVERB\t_\t_\t0\troot\t_\t_\n\n"
)


CONLLU_BAD = {
    "wrong column count": (CONLLU_OK.replace("2\tcat\tcat\tNOUN\t_\t_\t3", "2\tcat\tNOUN\t_\t_\t3"), 3, "columns"),
    "non-numeric head": (CONLLU_OK.replace("NOUN\t_\t_\t3", "NOUN\t_\t_\tx"), 3, "not a number"),
    "head out of range": (CONLLU_OK.replace("NOUN\t_\t_\t3", "NOUN\t_\t_\t9"), 3, "outside the sentence"),
    "cycle": (CONLLU_OK.replace("NOUN\t_\t_\t3", "NOUN\t_\t_\t1"), 2, "cycle"),  # the: head cat, cat: head the
}


NOT_UTF8 = "café, naïve\n".encode("latin-1")


LONG_LINE_CORPUS = f"{VALID}\n{LONG_TEXT}.\nA dog barked.\n"  # the middle line: 5,000 words, about 25,000 characters


def _live(**params) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def _type(at: AppTest, text_a: str, text_b: str = "") -> AppTest:
    at.text_area(key="text_a").input(text_a)
    at.text_area(key="text_b").input(text_b)
    return at.run()


def _sidebar_only():
    from ui.sources.model_sidebar import model_sidebar

    model_sidebar()


def _sidebar(secrets: dict | None = None, **params) -> AppTest:
    at = AppTest.from_function(_sidebar_only, default_timeout=300)
    for k, v in (secrets or {}).items():
        at.secrets[k] = v
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()


def _choose_other(at: AppTest, name: str) -> AppTest:
    at.selectbox(key="model_choice").select("Other (Hub id or local folder)…").run()
    at.text_input(key="model_custom").input(name).run()
    return at


def _assert_kept_default(at: AppTest, typed: str, message: str) -> None:
    assert not at.exception
    assert any(re.search(message, e.value) and "Still using **all-MiniLM-L6-v2**" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert at.text_input(key="model_custom").value == typed
    assert at.session_state["model_name"] == DEFAULT_MODEL and at.query_params["model"] == DEFAULT_MODEL


def _upload(at: AppTest, name: str, data: bytes, key: str = "t") -> AppTest:
    at.file_uploader(key=f"{key}_upload").set_value((name, data, "text/plain"))
    return at.run()


UPLOADS = {
    **{
        f"conllu {case}": ("bad.conllu", text.encode(), rf"bad\.conllu, line {line}: .*{what}")
        for case, (text, line, what) in CONLLU_BAD.items()
    },
    "not UTF-8 text": ("latin1.txt", NOT_UTF8, "latin1.txt: not a UTF-8 text file"),
    "not UTF-8 conllu": ("latin1.conllu", NOT_UTF8, "not a UTF-8 text file"),
    "no usable input": ("blank.txt", b"\n   \n\t\n", "no usable input"),
    "blank conllu": ("blank.conllu", b"\n\n", "no usable input"),
    "binary": ("weights.txt", bytes(range(256)) * 4, "not a UTF-8"),
}


def _as_if_online_but_unknown(monkeypatch) -> None:
    """The Hub looks reachable but every request fails at once, as for an id the Hub does not know."""
    import huggingface_hub.constants

    import attnlib.core.model as model

    monkeypatch.setattr(model, "_hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
