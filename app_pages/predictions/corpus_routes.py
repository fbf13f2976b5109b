"""The Predictions page's corpus part: each head's route frequency over every prediction of a corpus (METHODS §21,
`attnlib routes --corpus`), shipped, computed here with a progress bar, or opened from a result file; its heatmap,
table and downloads, one model or two side by side."""

from __future__ import annotations

import streamlit as st

from app_pages.predictions.prompt_state import KEY, MODE, MODES, THRESHOLD
from attnlib.analyses.registry import analysis_named
from attnlib.analyses.routes import RouteFrequency, RoutesOptions
from attnlib.core.model import LoadedModel
from attnlib.results.files import ResultFile, ResultFileError
from attnlib.views.routes import route_frequency_figures
from ui.sources.corpus_page import CorpusPage, Shown, every_head_tab
from ui.sources.page_state import bind
from ui.sources.result_source import Bar
from ui.widgets.downloads import chart
from ui.widgets.side_by_side import side_by_side

CORPUS_KEY = f"{KEY}_corpus"
CORPUS_LIMIT = 20  # the corpus's first inputs: every position of each is a route


def frequency_options(lm: LoadedModel, from_file: bool = False) -> RoutesOptions:
    """The threshold and mode (the prompt's, kept in the URL), in the sidebar."""
    values = bind([THRESHOLD, MODE])
    with st.sidebar:
        st.subheader("Routes")
        st.number_input("Threshold τ", step=0.01, format="%.3f", key=THRESHOLD.key)
        st.radio("Mode", MODES, key=MODE.key, horizontal=True)
    return RoutesOptions(threshold=float(values["thr"]), mode=values["mode"])


def frequency_file(record: ResultFile) -> RouteFrequency:
    """A result file of `attnlib routes --corpus`; ResultFileError for one text's graph (`--text`)."""
    found = analysis_named("routes").from_record(record)
    if not isinstance(found, RouteFrequency):
        raise ResultFileError("it holds one text's route graph (`attnlib routes --text`), not a corpus's route "
                              "frequency (`attnlib routes --corpus`).")  # fmt: skip
    return found


PAGE: CorpusPage[RoutesOptions, Shown] = CorpusPage(
    CORPUS_KEY,
    "routes",
    frequency_options,
    default_limit=CORPUS_LIMIT,
    parse=frequency_file,
    bar=Bar("Routes of {model}"),
)


def frequency_tab(lm: LoadedModel) -> None:
    """Each head's route frequency over the corpus's predictions, with its table and downloads."""
    st.markdown(
        "A head is on a route when its own share of one of the route's attention edges is above the threshold; its "
        "route frequency is the share of routes it is on, over every position of every input of the corpus (a "
        "decoder's position t predicts t + 1; an encoder-decoder's routes run from every position of its greedy "
        "output for each input, through its decoder's and cross-attention's heads into its encoder's)."
    )
    views = PAGE.shown(lm)
    if not views:
        return

    def draw(view: Shown, sfx: str) -> None:
        data = view.result.to_json()
        st.caption(
            f"{data['routes']} routes of {view.corpus}, τ = {data['threshold']:g} ({data['mode']}); {view.source}."
        )
        # one heatmap per attention (an encoder-decoder: its decoder's, cross-attention's and encoder's)
        for name, figure in zip(view.result.frequencies(), route_frequency_figures(view.result, view.model)):
            tail = "" if name in ("heads", "decoder") else f"_{name}"
            chart(figure, f"route_frequency{tail}{sfx}", f"{KEY}_frequency{tail}{sfx}")

    side_by_side(views, draw)
    every_head_tab(
        views, "Route frequency per head", "route_frequency", CORPUS_KEY, formats={"route_frequency": "%.4f"}
    )
