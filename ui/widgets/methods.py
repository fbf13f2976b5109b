"""The definitions a page uses, quoted from docs/METHODS.md in an expander."""

from __future__ import annotations

import streamlit as st

from attnlib.results.shipped import methods_section


def cite_methods(*sections: int) -> None:
    """An expander "Definitions: METHODS §a, §b" holding those sections' text."""
    label = ", ".join(f"§{n}" for n in sections)
    with st.expander(f"Definitions: docs/METHODS.md {label}"):
        for number in sections:
            st.markdown(methods_section(number).replace("\n## ", "\n#### ").replace("## ", "#### ", 1))
