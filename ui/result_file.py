"""'Load a result file instead of computing': the JSON a corpus command wrote with --out, checked, shown with its origin."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from attnlib.results import MAX_RESULT_BYTES, ResultFile, ResultFileError, read_result_file

T = TypeVar("T")


def _uploaded_record(key: str, command: str) -> tuple[str, ResultFile] | None:
    """Sidebar uploader for a `python -m attnlib <command> --out FILE` result: (file name, record), or None."""
    with st.sidebar, st.expander("Load a result file instead of computing"):
        upload = st.file_uploader(
            f"JSON written by `python -m attnlib {command} ... --out FILE`",
            type=["json"],
            key=f"{key}_result_file",
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
    return upload.name, record


def loaded_result(key: str, command: str, parse: Callable[[ResultFile], T]) -> tuple[ResultFile, T] | None:
    """The uploaded result file of `command` parsed into library objects, its origin shown; None to compute instead.

    A file of another command, or a malformed one, is shown as an error and None is returned."""
    uploaded = _uploaded_record(key, command)
    if uploaded is None:
        return None
    name, record = uploaded
    try:
        parsed = parse(record)
    except ResultFileError as exc:
        st.error(f"{name} cannot be shown: {exc}")
        return None
    st.info(
        f"Showing **{name}**, {record.provenance()}. Options: {record.options_text()}. The sidebar's model and corpus are not used; remove the "
        "file (sidebar, *Load a result file instead of computing*) to compute instead."
    )
    return record, parsed
