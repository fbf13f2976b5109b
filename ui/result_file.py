"""Result files on a page: 'Load a result file instead of computing' (the first model's) and the uploader of the second
model's (ui.compare), the JSON a corpus command wrote with --out, checked the same way and shown with its origin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import streamlit as st

from attnlib.results import MAX_RESULT_BYTES, ResultFile, ResultFileError, read_result_file

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

    A file over the size limit, of another command, or malformed is shown as an error and None is returned."""
    upload = st.file_uploader(
        label,
        type=["json"],
        key=key,
        help="Results computed elsewhere (a GPU machine, a Ray cluster) open here without running the model. "
        "The file is read as JSON only.",
    )
    if upload is None:
        return None
    if upload.size > MAX_RESULT_BYTES:
        st.error(f"{upload.name} is {upload.size / 1e6:.1f} MB; the limit is {MAX_RESULT_BYTES / 1e6:.0f} MB.")
        return None
    try:
        record = read_result_file(upload.getvalue(), command)
    except ResultFileError as exc:
        st.error(f"{upload.name}: {exc}")
        return None
    try:
        value = parse(record)
    except ResultFileError as exc:
        st.error(f"{upload.name} cannot be shown: {exc}")
        return None
    return FromFile(upload.name, record, value, record.model)


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
