"""ui.sources.page_state: options read from the URL once, kept while their widget is not drawn, written back as short keys."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from ui.sources.page_state import Option

MODE = Option("t_mode", "mode", "a", ["a", "b"])
SIZE = Option("t_size", "size", 5, lo=1, hi=10)
FLAG = Option("t_flag", "flag", False)
HEADS = Option("t_heads", "heads", None)
FILTER = Option("t_filter", "filter", "All", {"all": "All", "ab": "A→B"})


def _page():
    """A page with three bound widgets; the session flag `hide` leaves them undrawn, as another page would."""
    import streamlit as st

    from ui.sources.page_state import Option, bind

    options = [
        Option("t_mode", "mode", "a", ["a", "b"]),
        Option("t_size", "size", 5, lo=1, hi=10),
        Option("t_flag", "flag", False),
    ]
    values = bind(options)
    if not st.session_state.get("hide"):
        st.radio("Mode", ["a", "b"], key="t_mode")
        st.number_input("Size", 1, 10, key="t_size")
        st.checkbox("Flag", key="t_flag")
    st.write(values)


def _app(**params) -> AppTest:
    at = AppTest.from_function(_page, default_timeout=30)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def test_defaults_are_written_to_the_url():
    at = _app()
    assert not at.exception
    assert (at.radio(key="t_mode").value, at.number_input(key="t_size").value, at.checkbox(key="t_flag").value) == (
        "a",
        5,
        False,
    )
    assert (at.query_params["mode"], at.query_params["size"], at.query_params["flag"]) == ("a", "5", "0")


def test_url_sets_the_widgets_and_bad_values_fall_back():
    at = _app(mode="b", size="99", flag="1")
    assert (at.radio(key="t_mode").value, at.number_input(key="t_size").value, at.checkbox(key="t_flag").value) == (
        "b",
        10,  # clamped to the widget's range
        True,
    )
    at = _app(mode="zzz", size="many", flag="maybe")
    assert (at.radio(key="t_mode").value, at.number_input(key="t_size").value, at.checkbox(key="t_flag").value) == (
        "a",
        5,
        False,
    )
    assert at.query_params["mode"] == "a" and at.query_params["flag"] == "0"


def test_a_change_goes_into_the_url():
    at = _app()
    at.radio(key="t_mode").set_value("b").run()
    at.checkbox(key="t_flag").check().run()
    at.number_input(key="t_size").set_value(7).run()
    assert (at.query_params["mode"], at.query_params["size"], at.query_params["flag"]) == ("b", "7", "1")


def test_values_survive_runs_that_do_not_draw_the_widgets_and_a_cleared_url():
    at = _app()
    at.radio(key="t_mode").set_value("b").run()
    at.number_input(key="t_size").set_value(3).run()
    at.session_state["hide"] = True
    at.query_params.clear()  # what Streamlit does on a page change
    at.run()
    at.run()
    at.session_state["hide"] = False
    at.run()
    assert not at.exception
    assert (at.radio(key="t_mode").value, at.number_input(key="t_size").value) == ("b", 3)
    assert (at.query_params["mode"], at.query_params["size"]) == ("b", "3")


def test_kept_values_win_over_a_later_url():
    at = _app(mode="b")
    at.query_params["mode"] = "a"  # the URL is read on the session's first run only
    at.run()
    assert at.radio(key="t_mode").value == "b" and at.query_params["mode"] == "b"


def _forgetting_page():
    import streamlit as st

    from ui.sources.page_state import Option, bind, forget

    size = Option("t_size", "size", 5, lo=1, hi=10)
    bind([size])
    st.number_input("Size", 1, 10, key="t_size")
    st.button("Reset", on_click=forget, args=([size],))


def test_forget_returns_to_the_default():
    at = AppTest.from_function(_forgetting_page, default_timeout=30)
    at.query_params["size"] = "8"
    at.run()
    assert at.number_input(key="t_size").value == 8
    at.button[0].click().run()
    assert at.number_input(key="t_size").value == 5 and at.query_params["size"] == "5"


@pytest.mark.parametrize(
    "option, value, text",
    [
        (FLAG, True, "1"),
        (FLAG, False, "0"),
        (SIZE, 7, "7"),
        (MODE, "b", "b"),
        (HEADS, [2, 7], "2,7"),
        (HEADS, None, None),
        (FILTER, "A→B", "ab"),
        (Option("t_text", "b", ""), "", None),
        (Option("t_token", "token", 0, omit_default=True), 0, None),
        (Option("t_share", "share", 0.4, lo=0), 0.25, "0.25"),
    ],
)
def test_url_text_round_trip(option, value, text):
    assert option.text(value) == text
    if text is not None:
        assert option.parse(text) == value


def test_parse_refuses_values_outside_the_choices():
    for option, text in [(MODE, "c"), (FLAG, "2"), (FILTER, "A→B"), (SIZE, "x")]:
        with pytest.raises(ValueError):
            option.parse(text)
    assert SIZE.parse("0") == 1 and SIZE.parse("11") == 10
    share = Option("t_share", "share", 0.4, lo=0)
    for text in ("nan", "inf", "x"):
        with pytest.raises(ValueError):
            share.parse(text)
    assert share.parse("-1") == 0 and share.valid(0.5) and not share.valid(-0.1)
    assert SIZE.valid(3) and not SIZE.valid(11) and MODE.valid("b") and not MODE.valid("c")


def _form_page():
    """A page laying out one option of `positions` itself and fixing the seed: the others get plain widgets."""
    import streamlit as st

    from attnlib.analyses.positions import PositionOptions
    from ui.sources.page_state import AnalysisForm, field_option

    mode = field_option(PositionOptions(), "mode", "f_mode", "m", choices=["exact", "estimate"])
    form = AnalysisForm(PositionOptions(), {"mode": mode}, "f", fixed=("seed",))
    options = form.bind()
    st.radio("Mode", ["exact", "estimate"], key=mode.key)
    form.other_widgets()
    st.session_state["shown"] = options


def test_an_analysis_form_draws_every_option_it_does_not_lay_out():
    from attnlib.analyses.positions import PositionOptions

    at = AppTest.from_function(_form_page, default_timeout=30)
    at.query_params["m"] = "exact"
    at.query_params["probes"] = "4"
    at.run()
    assert not at.exception
    assert at.session_state["shown"] == PositionOptions(mode="exact", probes=4)
    assert [c.label for c in at.checkbox] == [
        "Drop CLS/SEP as queries and keys of the histograms",
        "Keep only inputs no longer than the head dimension",
    ]
    assert [n.label for n in at.number_input] == [  # not the seed
        "Probes per token in estimate mode (default 12)",
        "Query rows attributed, drawn at random, per input longer than sample-from tokens (default 128)",
        "Inputs up to this many tokens have every query row attributed (default 512)",
    ]
    at.checkbox(key="f_drop_special").check().run()
    assert at.session_state["shown"] == PositionOptions(mode="exact", probes=4, drop_special=True)
    assert (at.query_params["drop_special"], at.query_params["probes"], at.query_params["m"]) == ("1", "4", "exact")
