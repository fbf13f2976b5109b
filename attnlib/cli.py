"""Command line: `python -m attnlib <command> ... --json`; each module in attnlib.commands adds one command."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from typing import Any

import numpy as np

from . import commands
from .corpus import CorpusError
from .model import DEFAULT_MODEL, ModelLoadError
from .runner import InputError
from .scale import ScaleError

USER_ERRORS = (CorpusError, ModelLoadError, InputError, FileNotFoundError, ScaleError)


def add_model_option(parser: argparse.ArgumentParser) -> None:
    """--model, --device and --json, shared by every command."""
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"Hub id or local folder (default: {DEFAULT_MODEL})")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")


def to_jsonable(value: Any) -> Any:
    """Turn numpy arrays and scalars into lists and floats, recursively."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value


def build_parser() -> argparse.ArgumentParser:
    """The parser with one sub-command per module of attnlib.commands."""
    parser = argparse.ArgumentParser(
        prog="python -m attnlib", description="Attention statistics of BERT-family models."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command and print its JSON; user errors print one line to stderr and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        result = args.handler(args)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(to_jsonable(result), sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0
