"""The report tests' input sizes and how they read a report's tables (present/test_report.py, app/test_report_page.py,
browser/test_browser_report.py, conftest.py)."""

from __future__ import annotations

from html.parser import HTMLParser

from attnlib.present.report import REPORT_PARTS

N_INPUTS = 6  # of each file


MIN_COUNT = 5


class TableReader(HTMLParser):
    """Every <table> after an <h3> as (title, header, rows of cell texts)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, tuple[list[str], list[list[str]]]] = {}
        self.section, self.title, self.text, self.row = "", "", "", None
        self.current: tuple[list[str], list[list[str]]] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.section = dict(attrs).get("id", "")
        elif tag == "h3":
            self.text = ""
        elif tag == "table" and self.title:
            self.current = ([], [])
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.text = ""

    def handle_endtag(self, tag):
        if tag == "h3":
            self.title = self.text.strip()
        elif tag in ("td", "th") and self.row is not None:
            self.row.append(self.text.strip())
        elif tag == "tr" and self.current is not None and self.row is not None:
            header, rows = self.current
            if not header:
                header.extend(self.row)
            else:
                rows.append(self.row)
            self.row = None
        elif tag == "table" and self.current is not None:
            self.tables[f"{self.section}/{self.title}"] = self.current
            self.current, self.title = None, ""

    def handle_data(self, data):
        self.text += data


def read_tables(page: str) -> dict[str, list[dict[str, str]]]:
    """'part/title' -> rows as {column: cell text}."""
    reader = TableReader()
    reader.feed(page)
    return {key: [dict(zip(header, row)) for row in rows] for key, (header, rows) in reader.tables.items()}


def report_parts() -> list[str]:
    """The names of the report's parts: each has its section and its line of where two models differ most."""
    return [part.name for part in REPORT_PARTS]
