"""Dependency heads page (not built yet): says what it will show."""

import streamlit as st

st.title("Dependency heads")
st.info("This page is being built. It will show: For each syntactic relation, the single head that finds it best against the best fixed-offset baseline (Clark et al. 2019, Table 1), on gold CoNLL-U or parsed text.")
