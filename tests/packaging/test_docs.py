"""The documentation's quick checks: README.md stays short, keeps the two commands CI and users run, and links to
every page of the MkDocs site (mkdocs.yml's nav); every command the command-line page names exists, and every
command of the parser has its row there. The strict build itself: the slow test at the end."""

from __future__ import annotations

import argparse
import html
import inspect
import os
import re
import subprocess
import sys

import pytest
import yaml

import attnlib
from attnlib.analyses import base as analysis
from attnlib.cli.entry import build_parser
from attnlib.core import blockwise, memory
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


# ---------- slow tests: The documentation site builds with every warning an error (`mkdocs build --strict`, as CI
# runs it through this test), its Python API page is generated from attnlib's docstrings, and its Methods page is
# docs/METHODS.md whole.


def page_text(path) -> str:
    """A built page's visible text: tags dropped, entities read, white space collapsed."""
    text = re.sub(r"<script.*?</script>|<[^>]+>", " ", path.read_text(encoding="utf-8"), flags=re.S)
    return " ".join(html.unescape(text).split())


def first_line(obj) -> str:
    """The first line of an object's docstring as a page shows it: code marks and white space dropped."""
    return re.sub(r"[`\s]", "", (inspect.getdoc(obj) or "").splitlines()[0])


@pytest.mark.slow
def test_the_site_builds_strict_with_the_api_from_the_docstrings_and_methods_whole(tmp_path):
    from attnlib.views.head_view import head_view
    from attnlib.views.model_view import model_view
    from attnlib.views.neuron_view import neuron_view

    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CHECKOUT / "mkdocs.yml"), "-d", str(site)],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "WARNING" not in out.stderr, out.stderr[-3000:]

    api = page_text(site / "api" / "index.html")
    documented = [
        attnlib.load_model,
        attnlib.analyse,
        attnlib.special,
        attnlib.gradient,
        attnlib.load,
        attnlib.AnalysisRun.show,
        attnlib.AnalysisRun.to_pandas,
        attnlib.AnalysisRun.save,
        attnlib.run,
        attnlib.read_result_file,
        attnlib.search_corpus,
        analysis.run_analysis,
        head_view,
        model_view,
        neuron_view,
        blockwise.run_blockwise,
        memory.check_memory,
    ]
    for function in documented:
        assert re.search(rf"\b{function.__name__} *\(", api), function.__name__  # its signature
        assert first_line(function) in api.replace(" ", ""), function.__name__  # its docstring

    methods = page_text(site / "METHODS" / "index.html")
    headings = re.findall(r"(?m)^#+ (.+)$", (CHECKOUT / "docs" / "METHODS.md").read_text(encoding="utf-8"))
    assert len(headings) > 15
    for heading in headings:
        assert " ".join(html.unescape(re.sub(r"`", "", heading)).split()) in methods, heading
    assert "([layers][heads])" in methods  # docs/hooks/methods_page.py keeps the shape as text
