"""The corpus chooser shared by the corpus pages: classroom set, a shipped UD treebank, or an upload."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import streamlit as st

from attnlib.core.corpus import CorpusError, CorpusInput, parse_conllu, parse_text_corpus, read_corpus
from attnlib.results.shipped import CLASSROOM, TREEBANKS, corpus_slug, file_sha1
from ui.sources.page_state import Option, bind

MAX_UPLOAD_BYTES = 20 * 1024 * 1024
SHIPPED = {corpus_slug(path): label for label, path in [*CLASSROOM.items(), *TREEBANKS.items()]}  # URL name -> label

Kind = Literal["any", "conllu"]


@dataclass
class CorpusChoice:
    """A chosen corpus: its label, content SHA-1, a fingerprint of content and limit (for caches), and its inputs."""

    label: str
    sha1: str
    fingerprint: str
    inputs: list[CorpusInput]
    is_conllu: bool

    @property
    def n_inputs(self) -> int:
        """How many inputs are used (after the limit)."""
        return len(self.inputs)

    def described(self) -> dict:
        """The corpus as a result file describes it: name, SHA-1 of the content, number of inputs used."""
        return {"name": self.label, "sha1": self.sha1, "n_inputs": self.n_inputs}


@st.cache_data(max_entries=16, show_spinner=False)
def parse_upload(data: bytes, name: str, conllu: bool) -> list[CorpusInput]:
    """Parse uploaded bytes once per content."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{name}: not a UTF-8 text file (byte {exc.start} cannot be decoded).") from exc
    return [*parse_conllu(text, name)] if conllu else parse_text_corpus(text, name)


@st.cache_resource(max_entries=16, show_spinner=False)
def read_path(path: str) -> list[CorpusInput]:
    """Read a corpus file on disk once; every session shares the list (cache_data would unpickle a copy per run, about
    0.1 s for a treebank), so callers must not change it."""
    return read_corpus(path)


def shipped_corpus(path: Path) -> CorpusChoice:
    """A shipped corpus file, whole (read once per server)."""
    sha1 = file_sha1(path)
    return CorpusChoice(path.name, sha1, f"{sha1}:all", read_path(str(path)), path.suffix == ".conllu")


def upload_bytes(upload) -> bytes | None:
    """An upload's bytes, or None after an error message when it is over the size limit."""
    data = upload.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        st.error(f"{upload.name} is {len(data) / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES / 1e6:.0f} MB.")
        return None
    return data


def kept_upload(key: str, label: str, types: list[str], help: str) -> tuple[str, bytes] | None:
    """The uploaded file's (name, bytes): a new upload, else the one kept from an earlier visit; None when none."""
    kept = f"_kept_{key}_upload"
    upload = st.file_uploader(label, type=types, key=f"{key}_upload", help=help)
    if upload is not None:
        data = upload_bytes(upload)
        if data is None:
            return None
        st.session_state[kept] = (upload.name, data)
    elif kept in st.session_state:
        st.caption(f"Using {st.session_state[kept][0]}, uploaded earlier; upload another file to replace it.")
    else:
        st.info("Choose a file to analyse.")
    return st.session_state.get(kept)


def corpus_options(key: str, kind: Kind, default_limit: int, default: str | None = None) -> tuple[Option, Option]:
    """The picker's two options: the corpus (URL `corpus`; `default`: a label, else the first) and the limit (URL
    `limit`)."""
    upload_label = "Upload a CoNLL-U file" if kind == "conllu" else "Upload a text or CoNLL-U file"
    names = {k: v for k, v in SHIPPED.items() if kind == "any" or v in TREEBANKS} | {"upload": upload_label}
    corpus = Option(f"{key}_corpus", "corpus", default or next(iter(names.values())), names)
    return corpus, Option(f"{key}_limit", "limit", default_limit, lo=1, hi=100_000)


def read_choice(key: str, choice: str, kind: Kind) -> tuple[str, str, list[CorpusInput], bool] | None:
    """(label, SHA-1, inputs, is CoNLL-U) of the chosen corpus; None while no file is uploaded."""
    if choice in CLASSROOM or choice in TREEBANKS:
        path = CLASSROOM.get(choice) or TREEBANKS[choice]
        return choice, file_sha1(path), read_path(str(path)), path.suffix == ".conllu"
    text_help = "Text: one input per line, a TAB between sentence A and B. CoNLL-U: Universal Dependencies format."
    types = ["conllu"] if kind == "conllu" else ["txt", "tsv", "conllu"]
    uploaded = kept_upload(key, choice, types, text_help)
    if uploaded is None:
        return None
    name, data = uploaded
    is_conllu = kind == "conllu" or name.lower().endswith((".conllu", ".conll"))
    return name, hashlib.sha1(data).hexdigest(), parse_upload(data, name, is_conllu), is_conllu


def chosen_corpus(key: str, choice: str, kind: Kind, limit: int) -> CorpusChoice | None:
    """The first `limit` inputs of a chosen corpus, or None with the reason shown (a bad or missing upload)."""
    try:
        read = read_choice(key, choice, kind)
    except CorpusError as exc:
        st.error(str(exc))
        return None
    if read is None:
        return None
    label, sha1, inputs, is_conllu = read
    if not inputs:
        st.error("The corpus has no usable input.")
        return None
    return CorpusChoice(label, sha1, f"{sha1}:{limit}", inputs[:limit], is_conllu)


def corpus_picker(
    key: str, kind: Kind = "any", default_limit: int = 200, sidebar: bool = True, default: str | None = None
) -> CorpusChoice | None:
    """Draw the corpus widgets (in the sidebar, or where the page is) and return the chosen inputs, or None with a
    message shown; `default`: the label of the corpus a new visitor gets."""
    corpus, limit = corpus_options(key, kind, default_limit, default)
    bind([corpus, limit])
    with st.sidebar if sidebar else st.container():
        st.subheader("Corpus")
        assert isinstance(corpus.choices, dict)
        choice = st.selectbox("Corpus", list(corpus.choices.values()), key=corpus.key, label_visibility="collapsed")
        n = int(st.number_input("Use at most this many inputs", 1, 100_000, step=50, key=limit.key))
        chosen = chosen_corpus(key, choice, kind, n)
        if chosen is not None:
            st.caption(f"{chosen.n_inputs} inputs from {chosen.label}")
    return chosen
