"""The command line (`attnlib <command> ... --json`): the entry point, the flags, and the commands beyond analyses."""

from attnlib.cli.entry import main, run

__all__ = ["main", "run"]
