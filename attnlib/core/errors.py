"""Errors whose messages are meant for users, shared across the library's layers (the runner, the memory guard, the
statistics and the analyses that check options)."""


class InputError(ValueError):
    """The text given to the model cannot be run (empty, say, or too long to fit in memory); the message is for users."""


class OptionError(ValueError):
    """An option an analysis does not have, or a value it does not take."""


class SearchError(ValueError):
    """A query, a layer, heads or an index that search cannot take; the message says why in a user's words."""
