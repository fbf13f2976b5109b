"""The documentation's quick checks: README.md stays short, keeps the two commands CI and users run, and links to
every page of the MkDocs site (mkdocs.yml's nav); every command the command-line page names exists, and every
command of the parser has its row there. The strict build itself: test_docs_slow.py."""

from __future__ import annotations

import argparse
import re

import yaml

from attnlib.cli.entry import build_parser
from attnlib.results.shipped import CHECKOUT

README = CHECKOUT / "README.md"
DOCS = CHECKOUT / "docs"
APP_COMMAND = "bash scripts/app.sh     # installs requirements.txt into .venv, then runs `streamlit run app.py`"
TEST_COMMAND = "bash scripts/test.sh -n 2   # installs requirements-dev.txt and Debian's Chromium, runs ruff, mypy"


def nav_pages(nav: list) -> list[str]:
    """The page files of an mkdocs.yml nav, sections flattened, in order."""
    pages: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def parser_commands() -> set[str]:
    """The sub-commands of `attnlib` (python -m attnlib)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_readme_is_short_keeps_the_two_commands_and_links_every_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    assert APP_COMMAND in text and TEST_COMMAND in text  # .ci/run and the docs refer to these lines
    config = yaml.safe_load((CHECKOUT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = nav_pages(config["nav"])
    assert {"index.md", "app.md", "cli.md", "api.md", "METHODS.md", "deploy.md", "development.md"} <= set(pages)
    # every page is in the nav, every nav entry a page
    assert sorted(pages) == sorted(p.name for p in DOCS.glob("*.md"))
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", text))
    assert {f"docs/{page}" for page in pages} <= linked
    assert all((CHECKOUT / target).is_file() for target in re.findall(r"\]\(([^)#\s:]+)", text))  # no dead link


def test_every_command_the_cli_page_names_exists_and_every_command_has_its_row():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"(?m)^\| (?:`|<code>)([a-z]+)[ `]", text))  # the commands table: the first word of each row
    named = set(re.findall(r"\battnlib (?!\[|<)([a-z][a-z-]*)", text))  # `attnlib search ...`, `python -m attnlib deps`
    commands = parser_commands()
    assert rows and named
    assert rows <= commands, rows - commands
    assert named <= commands, named - commands
    assert commands <= rows, commands - rows
