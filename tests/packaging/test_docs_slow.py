"""The documentation site builds with every warning an error (`mkdocs build --strict`, as CI runs it through this
test), its Python API page is generated from attnlib's docstrings, and its Methods page is docs/METHODS.md whole."""

from __future__ import annotations

import html
import inspect
import os
import re
import subprocess
import sys

import pytest

import attnlib
from attnlib.analyses import base as analysis
from attnlib.core import blockwise, memory
from attnlib.results.shipped import CHECKOUT

pytestmark = pytest.mark.slow  # a build takes 3-6 s on the 2-core machine


def page_text(path) -> str:
    """A built page's visible text: tags dropped, entities read, white space collapsed."""
    text = re.sub(r"<script.*?</script>|<[^>]+>", " ", path.read_text(encoding="utf-8"), flags=re.S)
    return " ".join(html.unescape(text).split())


def first_line(obj) -> str:
    """The first line of an object's docstring as a page shows it: code marks and white space dropped."""
    return re.sub(r"[`\s]", "", (inspect.getdoc(obj) or "").splitlines()[0])


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
