"""MkDocs hook (mkdocs.yml `hooks:`): docs/METHODS.md is the Methods page, its text unchanged, but it is written for
GitHub's Markdown, and Python-Markdown reads three of its habits differently: array shapes such as ([layers][heads])
outside code are a reference link (and, for mkdocs-autorefs in strict mode, a missing cross-reference), a list right
under a paragraph line is more of the paragraph, and a list nested by two spaces is not nested. The page is given
to MkDocs with those written as Python-Markdown reads them: the second bracket escaped, a blank line before such a
list, nested items indented by four spaces. It shows the same text."""

from __future__ import annotations

import re

CODE = re.compile(r"(`+).+?\1")
SHAPE = re.compile(r"\[(\w+)\]\[(\w+)\]")


def escape_shapes(markdown: str) -> str:
    """`[a][b]` outside code spans as `[a]\\[b\\]`, which Markdown shows as the same text and leaves unlinked."""
    out = []
    for line in markdown.split("\n"):
        pieces, start = [], 0
        for code in CODE.finditer(line):
            pieces += [SHAPE.sub(r"[\1]\\[\2\\]", line[start : code.start()]), code.group(0)]
            start = code.end()
        out.append("".join([*pieces, SHAPE.sub(r"[\1]\\[\2\\]", line[start:])]))
    return "\n".join(out)


ITEM = re.compile(r"(- |\d+\. )")


def python_markdown_lists(markdown: str) -> str:
    """A blank line before a list that starts under a paragraph; items nested by two spaces, by four."""
    out: list[str] = []
    in_list = False  # since the last blank line, a top-level item was seen (its lines follow it, indented or not)
    for line in markdown.split("\n"):
        if ITEM.match(line):
            if out and out[-1].strip() and not in_list:
                out.append("")
            in_list = True
        elif not line.strip() or line.startswith("#"):
            in_list = False
        out.append("  " + line if line.startswith("  ") and line[2] != " " and ITEM.match(line[2:]) else line)
    return "\n".join(out)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """METHODS.md as Python-Markdown reads GitHub's Markdown; every other page is written for MkDocs."""
    return python_markdown_lists(escape_shapes(markdown)) if page.file.src_uri == "METHODS.md" else markdown
