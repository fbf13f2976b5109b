"""Streamlit helpers written once and shared by every page: the model sidebar, the corpus picker, downloads."""
