"""Plotly figure builders: plain functions from arrays and labels to figures (no Streamlit here)."""
