"""What pip installs works without a checkout: `python -m build` makes a wheel and an sdist; the wheel, installed
core-only into a fresh venv, runs every command on the corpora it ships from a folder outside the checkout, and
`import attnlib` imports neither plotly nor Streamlit; with the views extra, the example notebook runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

from attnlib.results.shipped import CHECKOUT

SHIPPED = ("data", "docs", "static")  # the folders the wheel carries as attnlib/_shipped/<folder>


def tracked(folder: str) -> set[str]:
    """The repository's files under a folder, relative to the checkout; of docs/, METHODS.md (the rest of docs/ is the
    documentation site, mkdocs.yml, which the wheel does not carry)."""
    out = subprocess.run(["git", "ls-files", folder], cwd=CHECKOUT, capture_output=True, text=True, check=True)
    return {name for name in out.stdout.split() if folder != "docs" or name == "docs/METHODS.md"}


def installer(venv: Path) -> list[str]:
    """A fresh venv and the command that installs into it: uv where the test tools have it (it reuses the wheels the
    setup downloaded: minutes less on a bare CI machine), with pip's find-links; else the venv's pip. What the wheel
    installs is the same either way; which tool resolves it is tests/packaging/test_requirements.py's question."""
    uv = Path(sys.executable).with_name("uv")
    if not uv.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        return [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([str(uv), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    links = [arg for link in os.environ.get("PIP_FIND_LINKS", "").split() for arg in ("--find-links", link)]
    return [str(uv), "pip", "install", "-q", "--compile-bytecode", "--python", str(venv / "bin" / "python"), *links]


# Every command in one process of the venv (starting torch once): `attnlib.cli.entry.main`, as the console entry runs
# it; the report below runs through the console entry itself.
RUN_COMMANDS = """
import contextlib, io, json, sys
from attnlib.cli.entry import main
results = {}
for name, args in json.loads(sys.argv[1]).items():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main([*args, "--json"])
        except SystemExit as exc:
            code = exc.code
    assert not code, (name, code)
    results[name] = json.loads(out.getvalue())
print(json.dumps(results))
"""


def run_commands(python: Path, commands: dict[str, list[str]], cwd: Path) -> dict:
    """Each command's JSON, run by the venv's Python in cwd (the test fails on any error)."""
    out = subprocess.run(
        [str(python), "-c", RUN_COMMANDS, json.dumps(commands)], cwd=cwd, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


@pytest.mark.slow
def test_the_wheel_works_without_a_checkout(tmp_path, execute_notebook):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(CHECKOUT)], check=True, timeout=600)
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")

    # One top-level package, every module and script of attnlib/, every shipped file; the sdist keeps the layout.
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {n.split("/")[0] for n in names} == {"attnlib", wheel.name.split("-py3")[0] + ".dist-info"}
    sources = {str(p.relative_to(CHECKOUT)) for p in (CHECKOUT / "attnlib").rglob("*") if p.suffix in (".py", ".js")}
    assert sources <= names
    shipped = {f"attnlib/_shipped/{name}" for folder in SHIPPED for name in tracked(folder)}
    assert shipped <= names and len(shipped) > 40
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        in_sdist = {n.removeprefix(top + "/") for n in archive.getnames()}
    assert {name for folder in SHIPPED for name in tracked(folder)} <= in_sdist and "pyproject.toml" in in_sdist

    # Core only: torch pinned to the build this venv runs, so the installer takes it from where it came (a CPU wheel
    # on disk here) or stops, instead of resolving a plain range to the multi-GB CUDA build.
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    pip = installer(venv)
    subprocess.run([*pip, str(wheel), f"torch=={version('torch')}"], check=True, timeout=900)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import sys, json, attnlib, attnlib.cli.entry, attnlib.results.shipped as s; "
        "print(json.dumps({'modules': sorted(m for m in sys.modules if m.split('.')[0] in ('plotly', 'streamlit')), "
        "'file': attnlib.__file__, 'root': str(s.ROOT), 'paths': [str(p) for p in "
        "(s.CLASSROOM_SINGLE, s.CLASSROOM_PAIRS, s.EWT_DEV, s.PUD_TEST, s.METHODS, s.PLOTLY_BUNDLE)]}))"
    )
    found = json.loads(
        subprocess.run([str(python), "-c", probe], cwd=elsewhere, capture_output=True, check=True).stdout
    )
    assert found["modules"] == []
    assert Path(found["file"]).is_relative_to(venv) and Path(found["root"]).is_relative_to(venv)
    single, pairs, ewt_dev, pud_test = found["paths"][:4]
    assert all(Path(p).is_file() for p in found["paths"])

    commands = {
        "attention": ["attention", "--text", "The cat sat on the mat.", "--pair", "It slept."],
        "norms": ["norms", "--text", "The cat sat on the mat."],
        "hta": ["hta", "--text", "The cat sat.", "--mode", "estimate", "--probes", "2"],
        "special": ["special", "--corpus", pairs, "--limit", "3", "--head-map", "--norms"],
        "deps": ["deps", "--conllu", ewt_dev, "--limit", "5", "--min-count", "1"],
        "positions": ["positions", "--corpus", single, "--limit", "2", "--probes", "2"],
        "aggregation": ["aggregation", "--corpus", single, "--limit", "2", "--probes", "2"],
        "probe": ["probe", "--train", ewt_dev, "--test", pud_test, "--limit", "5"],
    }
    results = run_commands(python, commands, elsewhere)
    assert results["attention"]["tokens"][0] == "[CLS]" and len(results["attention"]["attentions"]) == 6
    assert results["special"]["n_inputs"] == 3 and "head_map" in results["special"]
    assert results["deps"]["n_sentences"] == 5 and results["deps"]["rows"][0]["relation"] == "all"
    assert all(isinstance(results[name], dict) and results[name] for name in commands)

    # The report draws figures: core only, one error line that names the extra.
    out = subprocess.run(
        [str(python.with_name("attnlib")), "report", "--corpus", single, "--out", "r.html"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "attnlib[views]" in out.stderr
    assert out.stderr.count("\n") == 1

    # With the views extra (and a kernel), the example notebook runs outside the checkout.
    subprocess.run([*pip, f"{wheel}[views]", f"torch=={version('torch')}", "ipykernel"], check=True, timeout=900)
    executed = execute_notebook(str(python), elsewhere, limit=5)
    shown = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if "text/html" in o.get("data", {})]
    assert len(shown) >= 6 and all(o["data"]["text/html"].startswith("<iframe srcdoc=") for o in shown[:3])
