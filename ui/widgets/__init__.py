"""Pieces every page draws with: tables, figures, downloads, progress, tabs, the methods expander."""
