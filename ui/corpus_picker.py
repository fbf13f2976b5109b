"""The corpus chooser shared by the corpus pages: classroom set, a shipped UD treebank, or an upload."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import streamlit as st

from attnlib.corpus import CorpusError, CorpusInput, parse_conllu, parse_text_corpus, read_corpus
from attnlib.shipped import CLASSROOM, TREEBANKS

MAX_UPLOAD_BYTES = 20 * 1024 * 1024

Kind = Literal["any", "conllu"]


@dataclass
class CorpusChoice:
    """A chosen corpus: its label, a fingerprint of its content and options (for caches), and its inputs."""

    label: str
    fingerprint: str
    inputs: list[CorpusInput]
    is_conllu: bool


@st.cache_data(max_entries=16, show_spinner=False)
def _parse_upload(data: bytes, name: str, conllu: bool) -> list[CorpusInput]:
    """Parse uploaded bytes once per content."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{name}: not a UTF-8 text file (byte {exc.start} cannot be decoded).") from exc
    return parse_conllu(text, name) if conllu else parse_text_corpus(text, name)


@st.cache_data(max_entries=16, show_spinner=False)
def _read_path(path: str) -> list[CorpusInput]:
    """Read a corpus file on disk once."""
    return read_corpus(path)


def upload_bytes(upload) -> bytes | None:
    """An upload's bytes, or None after an error message when it is over the size limit."""
    data = upload.getvalue()
    if len(data) > MAX_UPLOAD_BYTES:
        st.error(f"{upload.name} is {len(data) / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES / 1e6:.0f} MB.")
        return None
    return data


def _restored(widget_key: str, default) -> None:
    """Give a widget the value it had when its page was last drawn (Streamlit forgets widgets it does not draw)."""
    st.session_state.setdefault(widget_key, st.session_state.get(f"_kept_{widget_key}", default))


def _keep(widget_key: str) -> None:
    """Remember a widget's value beyond its page."""
    st.session_state[f"_kept_{widget_key}"] = st.session_state[widget_key]


def _upload(key: str, label: str, types: list[str]) -> tuple[str, bytes] | None:
    """The uploaded file's (name, bytes): a new upload, else the one kept from an earlier visit; None when none."""
    kept = f"_kept_{key}_upload"
    upload = st.file_uploader(
        label,
        type=types,
        key=f"{key}_upload",
        help="Text: one input per line, a TAB between sentence A and B. CoNLL-U: Universal Dependencies format.",
    )
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


def corpus_picker(key: str, kind: Kind = "any", default_limit: int = 200) -> CorpusChoice | None:
    """Draw the corpus widgets (in the sidebar) and return the chosen inputs, or None with a message shown."""
    files = {} if kind == "conllu" else dict(CLASSROOM)
    files.update(TREEBANKS)
    upload_label = "Upload a CoNLL-U file" if kind == "conllu" else "Upload a text or CoNLL-U file"
    with st.sidebar:
        st.subheader("Corpus")
        options = list(files) + [upload_label]
        if st.session_state.get(f"_kept_{key}_corpus") not in options:
            st.session_state.pop(f"_kept_{key}_corpus", None)
        _restored(f"{key}_corpus", options[0])
        _restored(f"{key}_limit", default_limit)
        choice = st.selectbox(
            "Corpus",
            options,
            key=f"{key}_corpus",
            label_visibility="collapsed",
            on_change=_keep,
            args=(f"{key}_corpus",),
        )
        limit = st.number_input(
            "Use at most this many inputs",
            1,
            100_000,
            step=50,
            key=f"{key}_limit",
            on_change=_keep,
            args=(f"{key}_limit",),
        )
        try:
            if choice == upload_label:
                uploaded = _upload(key, upload_label, ["conllu"] if kind == "conllu" else ["txt", "tsv", "conllu"])
                if uploaded is None:
                    return None
                name, data = uploaded
                is_conllu = kind == "conllu" or name.lower().endswith((".conllu", ".conll"))
                inputs = _parse_upload(data, name, is_conllu)
                label, digest = name, hashlib.sha1(data).hexdigest()
            else:
                path = files[choice]
                is_conllu = path.suffix == ".conllu"
                inputs = _read_path(str(path))
                label, digest = choice, hashlib.sha1(path.read_bytes()).hexdigest()
        except CorpusError as exc:
            st.error(str(exc))
            return None
        if not inputs:
            st.error("The corpus has no usable input.")
            return None
        inputs = inputs[: int(limit)]
        st.caption(f"{len(inputs)} inputs from {label}")
    return CorpusChoice(label, f"{digest}:{int(limit)}", inputs, is_conllu)
