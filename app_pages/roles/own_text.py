"""The Head roles page's detection on the visitor's own text (METHODS §20, TransformerLens's detect_head)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from attnlib.analyses.roles import RolesOptions, detect_inputs
from attnlib.core.corpus import CorpusInput
from attnlib.core.runner import InputError, encode, with_bos
from attnlib.views.roles import score_heatmap
from ui.sources.live_inputs import model_named
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import Option, bind
from ui.widgets.downloads import chart

KEY = "roles"
TEXT = Option(f"{KEY}_text", "text", "", omit_default=True)
EXAMPLE = "The cat sat on the mat. The cat sat on the mat."


def own_text_detection(measure: str, options: RolesOptions) -> None:
    """A text area (kept in the URL) and, for the loaded model, each pattern's score of every head on that text, with
    the exclusions chosen in the sidebar."""
    st.subheader("On your own text")
    bind([TEXT])
    st.text_area("Text", key=TEXT.key, placeholder=EXAMPLE, help="Repeat a phrase to give induction heads work.")
    text = st.session_state[TEXT.key].strip() or EXAMPLE
    name = current_model().facts.name
    try:
        n, scores = text_detection(name, text, options)
    except InputError as exc:
        st.warning(str(exc))
        return
    found = scores[measure]
    example = "" if st.session_state[TEXT.key].strip() else " of the example text"
    bos = ", the BOS in front" if options.prepend_bos else ""
    st.caption(f"{name} on {n} tokens{example}{bos}; the exclusions are the sidebar's.")
    columns = st.columns(len(found))
    for column, (pattern, values) in zip(columns, found.items()):
        with column:
            chart(score_heatmap(values, pattern, measure), f"text_{measure}_{pattern}", f"{KEY}_text_{pattern}")


@st.cache_data(max_entries=16, show_spinner=False)
def text_detection(model_name: str, text: str, options: RolesOptions) -> tuple[int, dict[str, dict[str, np.ndarray]]]:
    """The text's length in tokens as detected and each measure's scores of every pattern (§20), once per model, text
    and options."""
    lm = model_named(model_name)
    encoded = encode(lm, text)
    n = with_bos(lm, encoded).n if options.prepend_bos else encoded.n
    return n, detect_inputs(lm, [CorpusInput(text)], options)
