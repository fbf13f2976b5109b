"""The error of an input that cannot be run, shared by the runner and the memory guard (messages meant for users)."""


class InputError(ValueError):
    """The text given to the model cannot be run (empty, say, or too long to fit in memory); the message is for users."""
