"""A second model to compare with: a sidebar field kept in the URL (`cmp`), loaded like the first model, or the second
model's result file of a page's command, uploaded under that field."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar

import streamlit as st

from attnlib.analyses.base import Options
from attnlib.analyses.registry import analysis_named
from attnlib.core.model import LoadedModel
from attnlib.present.comparison import largest_difference
from attnlib.results.files import ResultFile, comparison_caveats
from ui.sources.model_sidebar import try_load
from ui.sources.page_state import Option, bind
from ui.sources.result_source import FromFile, uploaded_result

T = TypeVar("T")
COMPARE = Option("compare_name", "cmp", "")
FILE_SLOT = "_compare_file_slot"  # the sidebar container under the field, where a page draws its uploaders
FILE_TITLE = "…or the second model's result file"


def compare_sidebar() -> None:
    """Draw the "Compare with" field under the model chooser; a model that fails to load is named with its reason."""
    name = str(bind([COMPARE])["cmp"]).strip()
    with st.sidebar:
        st.text_input(
            "Compare with",
            key=COMPARE.key,
            placeholder="a second model id or folder",
            help="Any model the chooser above accepts. Corpus pages then show both models' numbers side by side; "
            "clear the field to show one model again.",
        )
        if name:
            lm, error = try_load(name)
            if lm is None:
                st.error(f"{error}\n\nNo comparison is shown.")
        st.session_state[FILE_SLOT] = st.container()


def compared_model() -> LoadedModel | None:
    """The second model chosen in the sidebar, or None (none chosen, or it failed to load)."""
    name = str(st.session_state.get(COMPARE.key, "")).strip()
    if not name:
        return None
    lm, _ = try_load(name)
    return lm


def compared_file(key: str, command: str, parse: Callable[[ResultFile], T], section: str = "") -> FromFile[T] | None:
    """The second model's result file of `command`, from an uploader under "Compare with"; None when none (or bad)."""
    slot = st.session_state.get(FILE_SLOT, st.sidebar)
    with slot.expander(f"{FILE_TITLE} ({section})" if section else FILE_TITLE):
        label = f"The second model's result: JSON written by `python -m attnlib {command} ... --out FILE`"
        return uploaded_result(label, f"{key}_compare_file", command, parse)


@dataclass
class Second(Generic[T]):
    """Where the second model's result comes from: its result file, or the compared model to run on the corpus."""

    file: FromFile[T] | None = None
    model: LoadedModel | None = None


def second_source(
    key: str,
    analysis: str,
    parse: Callable[[ResultFile], T],
    first_model: str,
    first_file: FromFile[Any] | None,
    corpus: dict | None,
    options: Options | None,
    section: str = "",
) -> Second[T]:
    """The second model's result file (uploaded under "Compare with"), else the compared model on the first result's
    corpus (there is none beside the first model's result file), else nothing; says which result comes from which file.

    `corpus` and `options` describe a computed first result (as result files do); the analysis's compared options
    must agree for the two to compare."""
    file = compared_file(key, analysis, parse, section)
    other = compared_model()
    if file is not None:
        stored = {} if options is None else asdict(options)
        if first_file is not None:
            corpus, stored = first_file.record.corpus, first_file.record.options
        show_second_file(file, first_model, corpus, stored, analysis_named(analysis).compared())
        if other is not None:
            st.caption(f"{other.facts.name} (*Compare with*) is not run here: the second model's result file is shown.")
        return Second(file=file)
    if other is None:
        return Second()
    if first_file is not None:
        st.info(
            f"A loaded result file is compared with a second model's result file only: upload {other.facts.name}'s "
            f"(sidebar, *{FILE_TITLE}*), or remove the loaded file to compare the two models on a corpus."
        )
        return Second()
    if other.facts.name == first_model:
        st.caption("The model to compare with is the model shown; no comparison.")
        return Second()
    return Second(model=other)


def show_second_file(file: FromFile, first_model: str, corpus: dict | None, options: dict, keys: tuple) -> None:
    """Name the second model's file and where it comes from; warn when it is not of the first result's corpus."""
    if file.record.model == first_model:
        file.model = f"{file.record.model} ({file.name})"
    st.info(
        f"Second model: **{file.model}**, from **{file.name}**, {file.record.provenance()}. Options: "
        f"{file.record.options_text()}. Remove the file (sidebar, *{FILE_TITLE}*) to compare with the model named "
        "under *Compare with* instead."
    )
    caveats = [] if corpus is None else comparison_caveats(corpus, options, file.record, keys)
    if caveats:
        st.warning("The two results may not compare like for like: " + "; ".join(caveats) + ".")


def difference_line(models: Sequence[str], a: dict, b: dict, none: str = "") -> None:
    """Where two models' statistics ({statistic: {place: value}}, largest_difference's shape) differ most, first
    model's value first; `none`, if given, is said when they have no place in common."""
    found = largest_difference(a, b)
    if found is not None:
        st.markdown(f"**{models[0]} vs {models[1]}**: {found.text()}")
    elif none:
        st.caption(none)
