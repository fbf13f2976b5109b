"""The one way a test runs a command: `attnlib ARGV` in-process (or, for the console entry point itself, in a fresh
`python -m attnlib`), giving its exit status, what it printed (text or JSON) and what it said on stderr."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from attnlib.cli.entry import main
from attnlib.results.shipped import ROOT


@dataclass(frozen=True)
class Ran:
    """What a command did: its exit status, its stdout and its stderr."""

    code: int
    out: str
    err: str

    @cached_property
    def json(self) -> Any:
        """The JSON it printed."""
        return json.loads(self.out)

    @property
    def error(self) -> str:
        """The one `error: ` line of a command that exited 2 and printed nothing."""
        lines = self.err.strip().splitlines()
        assert self.code == 2 and self.out == "" and len(lines) == 1 and lines[0].startswith("error: "), self
        return lines[0]


def run_cli(*argv: str) -> Ran:
    """`attnlib ARGV` in this process; argparse's own exits (--help, a bad flag) give their status too."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return Ran(code, out.getvalue(), err.getvalue())


def cli_json(*argv: str) -> Any:
    """A command that must succeed (give `--json` in ARGV): the JSON it printed."""
    ran = run_cli(*argv)
    assert ran.code == 0, ran.err
    return ran.json


def cli_process(*argv: str) -> Ran:
    """`python -m attnlib ARGV` in a fresh process from the checkout: the console entry point's own exit status."""
    done = subprocess.run(
        [sys.executable, "-m", "attnlib", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    return Ran(done.returncode, done.stdout, done.stderr)
