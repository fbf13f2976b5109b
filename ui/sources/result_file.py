"""Result files on a page: 'Load a result file instead of computing' (the first model's) and the uploader of the second
model's (ui.sources.compare), the JSON a corpus command wrote with --out, checked the same way and shown with its origin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import streamlit as st

from attnlib.results.files import MAX_RESULT_BYTES, ResultFile, ResultFileError, read_result_file

T = TypeVar("T")
LOAD_TITLE = "Load a result file instead of computing"


@dataclass
class FromFile(Generic[T]):
    """An uploaded result file: its file name, the record, what the page parsed from it, and the model name shown."""

    name: str
    record: ResultFile
    value: T
    model: str  # the record's model; with the file name when the first result is of the same model

    @property
    def corpus(self) -> str:
        """The corpus file the result was computed on."""
        return str(self.record.corpus.get("name", "?"))


def uploaded_result(label: str, key: str, command: str, parse: Callable[[ResultFile], T]) -> FromFile[T] | None:
    """An uploader (in the current container) for a `python -m attnlib <command> --out FILE` result, parsed.

    The file is kept for the session: a run that does not draw the uploader (another page or tab) forgets its widget,
    so the next run that draws it again uses the kept file until the visitor removes it. A file over the size limit,
    of another command, or malformed is shown as an error and None is returned."""
    kept, had = f"_kept_{key}", f"_had_{key}"
    had_file = key in st.session_state and st.session_state.get(had, False)  # the widget held a file on the last run
    upload = st.file_uploader(
        label,
        type=["json"],
        key=key,
        help="Results computed elsewhere (a GPU machine, a Ray cluster) open here without running the model. "
        "The file is read as JSON only.",
    )
    st.session_state[had] = upload is not None
    if upload is not None:
        if upload.size > MAX_RESULT_BYTES:
            st.error(f"{upload.name} is {upload.size / 1e6:.1f} MB; the limit is {MAX_RESULT_BYTES / 1e6:.0f} MB.")
            return None
        st.session_state[kept] = (upload.name, upload.getvalue())
    elif had_file or kept not in st.session_state:  # removed by the visitor, or never given
        st.session_state.pop(kept, None)
        return None
    elif st.button("Remove", key=f"{key}_remove"):
        st.session_state.pop(kept)
        return None
    else:
        st.caption(f"Using **{st.session_state[kept][0]}**, loaded earlier; upload another file to replace it.")
    name, data = st.session_state[kept]
    try:
        record = read_result_file(data, command)
    except ResultFileError as exc:
        st.error(f"{name}: {exc}")
        return None
    try:
        value = parse(record)
    except ResultFileError as exc:
        st.error(f"{name} cannot be shown: {exc}")
        return None
    return FromFile(name, record, value, record.model)


def loaded_result(key: str, command: str, parse: Callable[[ResultFile], T], section: str = "") -> FromFile[T] | None:
    """The first model's result file of `command` (sidebar), parsed, its origin shown; None to compute instead.

    `section` names the part of the page the file is for, when a page has several."""
    title = f"{LOAD_TITLE} ({section})" if section else LOAD_TITLE
    with st.sidebar, st.expander(title):
        found = uploaded_result(
            f"JSON written by `python -m attnlib {command} ... --out FILE`", f"{key}_result_file", command, parse
        )
    if found is None:
        return None
    st.info(
        f"Showing **{found.name}**, {found.record.provenance()}. Options: {found.record.options_text()}. The sidebar's "
        f"model and corpus are not used; remove the file (sidebar, *{title}*) to compute instead."
    )
    return found
