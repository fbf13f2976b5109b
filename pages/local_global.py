"""Local vs global page (not built yet): says what it will show."""

import streamlit as st

st.title("Local vs global")
st.info("This page is being built. It will show: Relative-position histograms of attention against Hidden Token Attribution, and how the two drift apart with depth (Pascual et al. 2021).")
