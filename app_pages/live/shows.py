"""The Live page's switch between attention weights and value-weighted norms (METHODS §11): its choices, what each
draws, and its option in the URL (the encoder-decoder's page has it too)."""

from __future__ import annotations

from ui.sources.page_state import Option

SHOWS = {"weights": "Weights", "norms": "Norms"}
QUANTITY = {"weights": "attention weight", "norms": "‖α f(x)‖ normalised over the row"}
SHOW = Option("live_show", "show", "weights", list(SHOWS))
