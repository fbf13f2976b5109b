"""Command line: `python -m attnlib <command> ... --json`; each module in attnlib.commands adds one command."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from typing import NoReturn

from . import commands
from .corpus import CorpusError
from .engines import ScaleError
from .families import UnsupportedModelError
from .model import ModelLoadError
from .results import json_ready
from .runner import InputError

USER_ERRORS = (CorpusError, ModelLoadError, InputError, FileNotFoundError, ScaleError, UnsupportedModelError)
USAGE_ERROR = 2  # exit status of user errors, as argparse uses


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors print one `error: ...` line to stderr (no usage) and exit 2; sub-parsers too."""

    def error(self, message: str) -> NoReturn:
        """Print `error: <prog>: <message>` and exit 2."""
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The parser with one sub-command per module of attnlib.commands."""
    parser = OneLineParser(prog="python -m attnlib", description="Attention statistics of BERT-family models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command and print its JSON (NaN as null); user errors print one line to stderr and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        result = args.handler(args)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    json.dump(json_ready(result), sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


def run() -> None:
    """Console entry point (`attnlib` script and `python -m attnlib`): exit with main's status."""
    sys.exit(main())
