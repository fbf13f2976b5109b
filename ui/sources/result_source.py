"""Where a corpus page's result comes from: shipped with the repository, computed earlier in this session, or now."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import streamlit as st

from attnlib.analyses.base import Options
from attnlib.analyses.registry import analysis_named
from attnlib.results.files import ResultFile
from attnlib.results.precomputed import shipped_result
from ui.sources.corpus_picker import CorpusChoice

T = TypeVar("T")


@st.cache_resource(max_entries=64, show_spinner=False)
def _shipped(key: tuple, sha1: str, n_inputs: int, train: tuple[str, int] | None, _parse: Callable) -> Any:
    """A shipped result parsed once per server and shared by every visitor (read only), with where it comes from.

    The cache keys on the analysis, not on `_parse`: each analysis's files are parsed by one page function."""
    analysis, model_name, _, options = key
    record = shipped_result(analysis, model_name, sha1, n_inputs, options, train)
    return None if record is None else (_parse(record), record.provenance())


def shipped(
    analysis: str,
    model_name: str,
    choice: CorpusChoice,
    options: Options,
    parse: Callable[[ResultFile], T] | None = None,
    train: CorpusChoice | None = None,
) -> tuple[T, str] | None:
    """The shipped result of an analysis for this model, corpus (a probe's: its test and `train` treebanks) and
    options, parsed (by default as the analysis reads its files for these options), with the file's provenance; None
    when none ships."""
    key = (analysis, model_name, choice.fingerprint, options)
    trained_on = None if train is None else (train.sha1, train.n_inputs)
    read = parse or partial(analysis_named(analysis).read, options=options)
    return _shipped(key, choice.sha1, choice.n_inputs, trained_on, read)


def shipped_or_computed(
    analysis: str,
    model_name: str,
    choice: CorpusChoice,
    options: Options,
    compute: Callable[[], T],
    parse: Callable[[ResultFile], T] | None = None,
    ask_first: str | None = None,
    train: CorpusChoice | None = None,
) -> tuple[T | None, str]:
    """The result and where it came from; a shipped one shows a Recompute button, and with `ask_first` (a sentence
    on the cost) nothing is computed until the visitor asks. `compute` should be a cached function of the page."""
    key = (analysis, model_name, choice.fingerprint, options, None if train is None else train.fingerprint)
    done = st.session_state.setdefault("_results_computed_here", set())
    button = f"{analysis}:{model_name}"
    if key not in done:
        found = shipped(analysis, model_name, choice, options, parse, train)
        asking = st.empty()  # cleared once pressed: the computation below does not show a button still to press
        with asking.container():
            if found is not None:
                pressed = st.button(
                    "Recompute",
                    key=f"recompute:{button}",
                    help="The result shown ships with the app (scripts/precompute.py); this computes it again here.",
                )
                if not pressed:
                    return found[0], f"precomputed, shipped with the app ({found[1]})"
            elif ask_first is not None:
                st.info(ask_first)
                if not st.button(f"Compute for {choice.n_inputs} inputs", type="primary", key=f"compute:{button}"):
                    return None, ""
        asking.empty()
    result = compute()
    done.add(key)
    return result, "computed here"
