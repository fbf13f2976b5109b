"""Where a corpus page's result comes from: shipped with the repository, computed earlier in this session, or now."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import streamlit as st

from attnlib.precomputed import shipped_result
from attnlib.results import ResultFile
from ui.corpus_picker import CorpusChoice

T = TypeVar("T")


@st.cache_resource(max_entries=64, show_spinner=False)
def _shipped(key: tuple, sha1: str, n_inputs: int, _parse: Callable[[ResultFile], T]) -> tuple[T, str] | None:
    """A shipped result parsed once per server and shared by every visitor (read only), with where it comes from.

    The cache keys on the command, not on `_parse`: each command's files are parsed by one page function."""
    command, model_name, _, options = key
    record = shipped_result(command, model_name, sha1, n_inputs, dict(options))
    return None if record is None else (_parse(record), f"precomputed, shipped with the app ({record.provenance()})")


def shipped_or_computed(
    command: str,
    model_name: str,
    choice: CorpusChoice,
    options: dict,
    compute: Callable[[], T],
    parse: Callable[[ResultFile], T],
    ask_first: str | None = None,
) -> tuple[T | None, str]:
    """The result and where it came from; a shipped one shows a Recompute button, and with `ask_first` (a sentence
    on the cost) nothing is computed until the visitor asks. `compute` should be a cached function of the page."""
    key = (command, model_name, choice.fingerprint, tuple(sorted(options.items())))
    done = st.session_state.setdefault("_results_computed_here", set())
    button = f"{command}:{model_name}"
    if key not in done:
        shipped = _shipped(key, choice.sha1, choice.n_inputs, parse)
        if shipped is not None:
            again = st.button(
                "Recompute",
                key=f"recompute:{button}",
                help="The result shown ships with the app (scripts/precompute.py); this computes it again here.",
            )
            if not again:
                return shipped
        elif ask_first is not None:
            st.info(ask_first)
            if not st.button(f"Compute for {choice.n_inputs} inputs", type="primary", key=f"compute:{button}"):
                return None, ""
    result = compute()
    done.add(key)
    return result, "computed here"
