"""BERT attention explorer: the multipage app. Run with `streamlit run app.py`."""

import streamlit as st

from ui.model_sidebar import model_sidebar

st.set_page_config(page_title="BERT attention explorer", page_icon="🔎", layout="wide")

PAGES = [
    st.Page("pages/live.py", title="Live attention", icon="✏️", url_path="live", default=True),
    st.Page("pages/special_tokens.py", title="Special tokens", icon="📍", url_path="special"),
    st.Page("pages/dependency_heads.py", title="Dependency heads", icon="🌳", url_path="deps"),
    st.Page("pages/local_global.py", title="Local vs global", icon="🔭", url_path="local-global"),
]

page = st.navigation(PAGES)
model_sidebar()
page.run()
