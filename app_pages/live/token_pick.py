"""A click on a query token in the head view picks it for the page (the view posts {attnlibPick: position})."""

from __future__ import annotations

from collections.abc import Callable

from app_pages.live.view_messages import listen

KEY = "live_token_pick"


def listen_for_picks(on_pick: Callable[[int], None]) -> None:
    """Call on_pick(position) (1-based, 0 for none) before the next run when a token is clicked in a head view."""
    listen("attnlibPick", "picked", KEY, lambda value: on_pick(value) if isinstance(value, int) else None)
