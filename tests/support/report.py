"""The report tests' input sizes and command runner (test_report*.py, browser/test_browser_report.py, conftest.py)."""

from __future__ import annotations

from attnlib.cli.entry import build_parser

N_INPUTS = 6  # of each file


MIN_COUNT = 5


def cli(*argv: str) -> dict:
    args = build_parser().parse_args(list(argv))
    return args.handler(args)
