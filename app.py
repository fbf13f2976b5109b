"""Attention explorer: the multipage app. Run with `streamlit run app.py`."""

import streamlit as st

from ui.sources.compare import compare_sidebar
from ui.sources.model_sidebar import model_sidebar

st.set_page_config(page_title="Attention explorer", page_icon=":material/visibility:", layout="wide")

# The default page lives at /. The page files sit in app_pages/, not pages/: with a pages/ folder Streamlit also serves
# its legacy page registry, which answers a cold first request with "Page not found" or runs a page without this shell.
PAGES = [
    st.Page("app_pages/tour/page.py", title="Tour", icon=":material/school:", url_path="tour"),
    st.Page("app_pages/live/page.py", title="Live attention", icon=":material/visibility:", default=True),
    st.Page(
        "app_pages/special/page.py",
        title="Special tokens",
        icon=":material/push_pin:",
        url_path="special-tokens",
    ),
    st.Page(
        "app_pages/deps/page.py",
        title="Dependency heads",
        icon=":material/account_tree:",
        url_path="dependency-heads",
    ),
    st.Page(
        "app_pages/local_global/page.py",
        title="Local vs global",
        icon=":material/travel_explore:",
        url_path="local-global",
    ),
    st.Page(
        "app_pages/importance/page.py",
        title="Head importance",
        icon=":material/power_settings_new:",
        url_path="head-importance",
    ),
    st.Page(
        "app_pages/roles/page.py",
        title="Head roles",
        icon=":material/psychology:",
        url_path="head-roles",
    ),
    st.Page(
        "app_pages/predictions/page.py",
        title="Predictions",
        icon=":material/route:",
        url_path="predictions",
    ),
    st.Page(
        "app_pages/qk/page.py",
        title="Queries and keys",
        icon=":material/scatter_plot:",
        url_path="queries-keys",
    ),
    st.Page("app_pages/report/page.py", title="Report", icon=":material/description:", url_path="report"),
]

page = st.navigation(PAGES)
model_sidebar()
compare_sidebar()
page.run()
