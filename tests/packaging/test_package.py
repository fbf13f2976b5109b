"""How attnlib is packaged: pyproject.toml lists every package and maps the shipped folders, the shipped data are
found in an installed copy first, and the library imports neither plotly nor Streamlit (the views and the app do)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib

from setuptools import find_packages

from attnlib.results.shipped import CHECKOUT, shipped_root

SHIPPED = ("data", "docs", "static")  # the folders the wheel carries as attnlib/_shipped/<folder>


def test_pyproject_lists_every_package_of_attnlib_and_maps_the_shipped_folders():
    """The package list is written out (setuptools cannot find mapped folders): it must follow attnlib/ as it grows."""
    tool = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapped = {f"attnlib._shipped.{folder}": folder for folder in SHIPPED}
    assert tool["package-dir"] == mapped
    assert sorted(tool["packages"]) == sorted(find_packages(str(CHECKOUT), include=["attnlib*"]) + list(mapped))


def test_shipped_data_come_from_the_installed_copy_first(tmp_path):
    package, checkout = tmp_path / "site" / "attnlib", tmp_path / "repo"
    package.mkdir(parents=True)
    assert shipped_root(package, checkout) == checkout  # a clone or an editable install
    (package / "_shipped" / "data").mkdir(parents=True)
    assert shipped_root(package, checkout) == package / "_shipped"  # a wheel


def imported(code: str) -> list[str]:
    """The plotly and streamlit modules a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('plotly', 'streamlit'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=CHECKOUT.parent)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_library_and_the_command_line_import_neither_plotly_nor_streamlit():
    assert imported("import attnlib") == []
    assert (
        imported(
            "import attnlib.cli.entry, attnlib.results.precomputed, attnlib.present.report; attnlib.cli.entry.build_parser()"
        )
        == []
    )
    views = imported("import attnlib.views")
    assert "plotly" in views and not any(m.startswith("streamlit") for m in views)


def test_without_plotly_every_command_starts_and_report_names_the_extra(tmp_path):
    """Core only (plotly made unimportable): the parser builds and `report` stops in one error line, exit 2."""
    code = (
        "import sys; sys.modules['plotly'] = None\n"
        "from attnlib.cli.entry import build_parser, main\n"
        "build_parser()\n"
        f"sys.exit(main(['report', '--corpus', {str(CHECKOUT / 'data' / 'classroom_single.txt')!r}, '--out', 'r.html']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("error: report: ") and "attnlib[views]" in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / "r.html").exists()
