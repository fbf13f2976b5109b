"""The Head roles page's detection on the visitor's own text (METHODS §20, TransformerLens's detect_head)."""

from __future__ import annotations

import streamlit as st

from attnlib.analyses.roles import RolesOptions, detection_scores
from attnlib.core.runner import InputError
from attnlib.views.roles import score_heatmap
from ui.sources.live_inputs import cached_run
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
        run = cached_run(name, text, "")
    except InputError as exc:
        st.warning(str(exc))
        return
    found = detection_scores(run.attentions, run.input_ids, options.exclude_first, options.exclude_current)[measure]
    example = "" if st.session_state[TEXT.key].strip() else " of the example text"
    st.caption(f"{name} on {run.n} tokens{example}; the exclusions are the sidebar's.")
    columns = st.columns(len(found))
    for column, (pattern, values) in zip(columns, found.items()):
        with column:
            chart(score_heatmap(values, pattern, measure), f"text_{measure}_{pattern}", f"{KEY}_text_{pattern}")
