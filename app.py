"""BERT attention explorer: the multipage app. Run with `streamlit run app.py`."""

import streamlit as st

from ui.model_sidebar import model_sidebar

st.set_page_config(page_title="BERT attention explorer", page_icon=":material/visibility:", layout="wide")

# The default page lives at /. url_path must differ from the file names in pages/: Streamlit would otherwise serve pages/<name>.py
# directly (legacy multipage mode), without this entrypoint and its sidebar.
PAGES = [
    st.Page("pages/live.py", title="Live attention", icon=":material/visibility:", default=True),
    st.Page("pages/special_tokens.py", title="Special tokens", icon=":material/push_pin:", url_path="special-tokens"),
    st.Page("pages/dependency_heads.py", title="Dependency heads", icon=":material/account_tree:", url_path="dependency-heads"),
    st.Page("pages/local_global.py", title="Local vs global", icon=":material/travel_explore:", url_path="local-global"),
]

page = st.navigation(PAGES)
model_sidebar()
page.run()
