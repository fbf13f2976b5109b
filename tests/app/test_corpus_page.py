"""The corpus-page skeleton: which models' results a page shows (ui.sources.corpus_page), the every-head tab's JSON (the
command's), and side_by_side's columns, headers and key suffixes (ui.widgets.side_by_side)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.core.corpus import CorpusInput
from attnlib.results.shipped import CLASSROOM_SINGLE, ROOT
from support.apptest import downloads_on_click, open_tab
from support.cli import run_cli
from ui.sources.compare import Second
from ui.sources.corpus_page import CorpusPage, Inputs, Shown
from ui.sources.corpus_picker import CorpusChoice
from ui.widgets.page_tabs import HEAD_IMPORTANCE, HEAD_ROLES

CHOICE = CorpusChoice("two.txt", "0" * 40, "0" * 40 + ":2", [CorpusInput("a b"), CorpusInput("c d")], False)


def model(name: str) -> Any:
    """A stand-in for a loaded model: the skeleton reads only its name."""
    return SimpleNamespace(facts=SimpleNamespace(name=name))


def page(computed: dict[str, int | None], first_needed: bool = True) -> CorpusPage:
    """A page whose models' results are the given numbers (None: not computed yet) and whose files hold 10 * options."""

    def result(lm: Any, choice: CorpusChoice, options: int) -> Shown[int] | None:
        value = computed[lm.facts.name]
        return None if value is None else Shown(lm.facts.name, value + options, choice.label, "computed here", choice)

    def from_file(found: Any, options: int) -> Shown[int]:
        return Shown(found.model, found.value * options, found.corpus, f"from {found.name}")

    return CorpusPage("k", "special", lambda lm, from_file: 1, result, from_file, first_needed=first_needed)


def uploaded(name: str, value: int) -> Any:
    """A stand-in for an uploaded result file (ui.sources.result_file.FromFile)."""
    return SimpleNamespace(model=name, value=value, corpus="file corpus", name=f"{name}.json")


def shown(views: list[Shown]) -> list[tuple[str, int, bool]]:
    return [(v.model, v.result, v.from_file) for v in views]


def test_both_models_are_computed_on_the_chosen_corpus():
    views = page({"a": 5, "b": 7}).results(model("a"), Inputs(None, CHOICE, 1), Second(model=model("b")))
    assert shown(views) == [("a", 6, False), ("b", 8, False)]
    assert views[0].inputs == CHOICE.inputs and views[0].corpus == "two.txt"


def test_a_first_result_that_waits_hides_the_second_unless_the_page_shows_it_alone():
    given, second = Inputs(None, CHOICE, 1), Second(model=model("b"))
    assert page({"a": None, "b": 7}).results(model("a"), given, second) == []
    alone = page({"a": None, "b": 7}, first_needed=False).results(model("a"), given, second)
    assert shown(alone) == [("b", 8, False)]


def test_result_files_are_shown_instead_of_computing():
    files = page({"a": 5, "b": 7}).results(model("a"), Inputs(uploaded("x", 3), None, 2), Second(file=uploaded("y", 4)))
    assert shown(files) == [("x", 6, True), ("y", 8, True)]
    assert files[1].inputs is None and files[1].source == "from y.json"


def test_no_second_model_is_computed_beside_a_loaded_file():
    views = page({"a": 5, "b": 7}).results(model("a"), Inputs(uploaded("x", 3), None, 1), Second(model=model("b")))
    assert shown(views) == [("x", 3, True)]


def draw_two_and_one() -> None:
    import streamlit as st

    from ui.sources.corpus_page import Shown
    from ui.widgets.side_by_side import side_by_side

    def draw(v: Shown[int], sfx: str) -> tuple[int, str]:
        st.text(f"{v.model}{sfx}")
        return v.result, sfx

    st.session_state["two"] = side_by_side([Shown("m1", 1, "c", "s"), Shown("m2", 2, "c", "s")], draw)
    st.session_state["one"] = side_by_side(["alone"], lambda v, sfx: (v, sfx), headers=["**not drawn**"])


def test_side_by_side_draws_two_in_columns_under_their_headers_and_one_on_the_page():
    at = AppTest.from_function(draw_two_and_one).run()
    assert not at.exception
    assert len(at.columns) == 2
    assert [c.markdown[0].value for c in at.columns] == ["**m1**", "**m2**"]
    assert [c.text[0].value for c in at.columns] == ["m1_1", "m2_2"]
    assert at.session_state["two"] == [(1, "_1"), (2, "_2")]
    assert at.session_state["one"] == [("alone", "")]
    assert "**not drawn**" not in [m.value for m in at.markdown]


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_the_one_computation_is_the_analysis_run_once_per_model_corpus_and_options(tiny_model_dir):
    """`computed` (every corpus page's path) gives the run run_analysis gives, and a second call with the same analysis,
    model, corpus fingerprint and options is a cache hit: its bar and the page's context around the run never start."""
    from attnlib.analyses.base import run_analysis
    from attnlib.analyses.gradient import GRADIENT, GradientOptions
    from attnlib.core.model import load_model
    from ui.sources.result_source import Bar, computed

    inputs = {"corpus": CHOICE.inputs}
    started: list[str] = []

    @contextmanager
    def counted() -> Iterator[None]:
        started.append("run")
        yield

    bar = Bar("Gradient importance, {model}", around=counted)
    name, fingerprint = str(tiny_model_dir), f"{CHOICE.fingerprint}:{tiny_model_dir}"
    first = computed("gradient", name, fingerprint, GradientOptions(), inputs, bar)
    again = computed("gradient", name, fingerprint, GradientOptions(), inputs, bar)
    assert started == ["run"]
    expected = run_analysis(GRADIENT, load_model(name), GradientOptions(), inputs=inputs)
    for found in (first, again):  # the whole run: the result, the model's facts and the options
        assert type(found.result) is type(expected.result)
        assert (found.facts, found.options, found.analysis.name) == (expected.facts, expected.options, "gradient")
        np.testing.assert_array_equal(found.result.sep, expected.result.sep)  # the same passes in the same order
        np.testing.assert_array_equal(found.result.all, expected.result.all)
    computed("gradient", name, fingerprint, GradientOptions(seed=1), inputs, bar)  # other options: computed again
    assert started == ["run", "run"]


EVERY_HEAD = {  # page, its tabs, the JSON's file name, the page's options in the URL, the same as the command's flags
    "importance": ("app_pages/importance/page.py", HEAD_IMPORTANCE, "head_importance.json",
                   {"measure": "hidden"}, ("--knockout", "--prune", "--measure", "hidden")),
    "roles": ("app_pages/roles/page.py", HEAD_ROLES, "head_roles.json", {}, ()),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("command", list(EVERY_HEAD))
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_the_every_head_tabs_json_is_the_commands(command, tiny_model_dir):
    """The Tables tab's JSON download is, byte for byte, what `attnlib <command> --json` prints for the same model,
    inputs and options (importance in a measure the page shows of what it computed: a view of the run)."""
    path, tabs, name, params, flags = EVERY_HEAD[command]
    limit = "2"
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params.update(model=str(tiny_model_dir), limit=limit, **params)
    at.run()
    at.switch_page(path).run()
    (ask,) = [b for b in at.button if str(b.key).startswith("compute:")]
    ask.click().run()
    with downloads_on_click() as drawn:
        open_tab(at, f"{command}_tab", tabs["tables"])
    assert not at.exception, [e.value for e in at.exception]
    page_json = drawn[name]()

    ran = run_cli(command, "--model", str(tiny_model_dir), "--corpus", str(CLASSROOM_SINGLE), "--limit", limit,
                  *flags, "--json")  # fmt: skip
    assert ran.code == 0, ran.err
    assert page_json + b"\n" == ran.out.encode()
