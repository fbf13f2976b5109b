"""Entry point for `python -m attnlib`."""

from attnlib.cli.entry import run

run()
