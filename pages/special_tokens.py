"""Special tokens page (not built yet): says what it will show."""

import streamlit as st

st.title("Special tokens")
st.info("This page is being built. It will show: Per layer and head, the share of attention that goes to [CLS], [SEP], punctuation and other tokens over a corpus; entropy; previous/self/next-token heads; a map of all heads (Clark et al. 2019, section 3).")
