"""The progress bar of long work: "N of M inputs", removed when the work ends, fails or is stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st

Report = Callable[[int, int], None]


@contextmanager
def progress(what: str, unit: str = "inputs") -> Iterator[Report]:
    """A bar for `what`; yields the callback (done, total) that moves it, and removes the bar in any case."""
    bar = st.progress(0.0, text=f"{what}…")

    def report(done: int, total: int) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"{what}: {done} of {total} {unit}")

    try:
        yield report
    finally:
        bar.empty()


@contextmanager
def estimated(what: str) -> Iterator[tuple[Callable[[str], None], Report]]:
    """For a long step: a line that says how long it will take (given once it is known) and a bar that shows how far
    it is; yields (say, report); both are removed when the step ends, fails or is stopped."""
    line, bar = st.empty(), st.empty()

    def say(text: str) -> None:
        line.info(f"{what}: {text}", icon="⏱️")

    def report(done: int, total: int) -> None:
        bar.progress(min(done / max(total, 1), 1.0), text=f"{what}: {100 * done // max(total, 1)} %")

    try:
        yield say, report
    finally:
        line.empty()
        bar.empty()


def asked(label: str, key: str, what: object) -> bool:
    """Whether the visitor asked for `what` (a hashable description of the work) in this session: a primary button
    until pressed, then kept, so later reruns show the (cached) result without asking again."""
    done = st.session_state.setdefault("_work_asked", set())
    if what in done:
        return True
    place = st.empty()  # cleared once pressed: the run that does the work shows no button still to press
    if not place.button(label, key=key, type="primary"):
        return False
    place.empty()
    done.add(what)
    return True
