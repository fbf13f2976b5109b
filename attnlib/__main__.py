"""Entry point for `python -m attnlib`."""

from .cli import run

run()
