"""requirements.txt's torch lines resolve to the CPU build with pip and with uv (Community Cloud tries uv, then pip):
`2.13.0+cpu` on Linux x86_64 and aarch64 and on Windows for Python 3.11-3.13, the plain `2.13.0` on macOS. Offline:
a server on 127.0.0.1 plays torch's page of PyTorch's CPU index, /whl/cpu/torch/ (its link layout:
`/whl/cpu/torch-2.13.0%2Bcpu-....whl#sha256=...`, the `+cpu` builds and macOS's unlabelled ones), and PyPI (plain
`2.13.0` for every platform, the CUDA build on Linux), with small fake wheels."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from attnlib.results.shipped import CHECKOUT

PAGE = "https://download.pytorch.org/whl/cpu/torch/"  # the find-links line requirements.txt must hold
PYTHONS = ("3.11", "3.12", "3.13")
LINUX = {"x86_64": "manylinux_2_28_x86_64", "aarch64": "manylinux_2_28_aarch64"}
MAC, WINDOWS = "macosx_14_0_arm64", "win_amd64"  # PyTorch makes no macOS x86_64 wheel
UV_PLATFORM = {"x86_64": "x86_64-manylinux_2_28", "aarch64": "aarch64-manylinux_2_28", MAC: "aarch64-apple-darwin"}
UV_PLATFORM[WINDOWS] = "x86_64-pc-windows-msvc"


def fake_wheel(folder: Path, version: str, python: str, platform: str) -> Path:
    """A wheel named and tagged as torch's for that version, Python and platform, with metadata and nothing else."""
    cp = "cp" + python.replace(".", "")
    path = folder / f"torch-{version}-{cp}-{cp}-{platform}.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\nRequires-Python: >=3.10\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: false\nTag: {cp}-{cp}-{platform}\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


def links(wheels: list[tuple[Path, str]]) -> str:
    """A page of links to the wheels, each href its prefix + the quoted name + `#sha256=`, as PyTorch's pages are."""
    rows = [
        f'<a href="{prefix}{w.name.replace("+", "%2B")}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
        f"{w.name}</a><br/>"
        for w, prefix in wheels
    ]
    return "<!DOCTYPE html>\n<html><body>\n" + "\n".join(rows) + "\n</body></html>\n"


def build_mock(root: Path) -> None:
    """Torch's page of PyTorch's CPU index at /whl/cpu/torch/ (files in /whl/cpu/), PyPI's simple index at /simple/."""
    folders = {name: root / name for name in ("whl/cpu", "whl/cpu/torch", "simple/torch", "packages")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    page: list[tuple[Path, str]] = []
    pypi: list[tuple[Path, str]] = []
    for python in PYTHONS:
        for platform in [*LINUX.values(), WINDOWS]:
            page.append((fake_wheel(folders["whl/cpu"], "2.13.0+cpu", python, platform), "/whl/cpu/"))
            pypi.append((fake_wheel(folders["packages"], "2.13.0", python, platform), "../../packages/"))
        page.append((fake_wheel(folders["whl/cpu"], "2.13.0", python, MAC), "/whl/cpu/"))
        pypi.append((fake_wheel(folders["packages"], "2.13.0", python, MAC), "../../packages/"))
    (folders["whl/cpu/torch"] / "index.html").write_text(links(page))
    (folders["simple/torch"] / "index.html").write_text(links(pypi))  # PyPI's Linux torch: the CUDA build


@pytest.fixture(scope="module")
def mock(tmp_path_factory) -> Iterator[str]:
    """The mock's base URL, http://127.0.0.1:<port>, served from a thread for the module's tests."""
    root = tmp_path_factory.mktemp("mock")
    build_mock(root)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            """No access log on stderr."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def torch_requirements(mock: str, folder: Path) -> Path:
    """requirements.txt's find-links and torch lines, the page's URL pointed at the mock (the other pins need PyPI)."""
    text = (CHECKOUT / "requirements.txt").read_text()
    assert f"--find-links {PAGE}\n" in text
    lines = [
        line.replace(PAGE, f"{mock}/whl/cpu/torch/") for line in text.splitlines() if line.startswith(("--", "torch"))
    ]
    assert sum(line.startswith("torch") for line in lines) == 2
    path = folder / "requirements-torch.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def clean_env() -> dict[str, str]:
    """The environment without pip's and uv's settings (this machine's pip points at a local torch wheel)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env |= {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return env | {"MACOSX_DEPLOYMENT_TARGET": "14.0"}  # uv's default macOS is older than PyTorch's macosx_14_0


def pip_choice(requirements: Path, mock: str, python: str, platform: str) -> tuple[str, str]:
    """The torch version and file that pip picks for that Python and platform tag (markers: this machine's)."""
    target = requirements.parent / f"target-{python}-{platform}"  # pip wants one with a platform; --dry-run fills none
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", "--target", str(target)]
        + ["--index-url", f"{mock}/simple/", "--only-binary=:all:", "--python-version", python]
        + ["--platform", platform, "-r", str(requirements)],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (item,) = json.loads(out.stdout)["install"]
    return item["metadata"]["version"], item["download_info"]["url"].rsplit("/", 2)[-2]


def uv_bin() -> str | None:
    """The uv binary installed with the dev requirements, or None."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return None
    return str(find_uv_bin())


def uv_choice(uv: str, requirements: Path, mock: str, python: str, platform: str, cache: Path) -> str:
    """The torch version that `uv pip compile` picks for that Python and uv platform (markers: that platform's);
    this interpreter runs builds (none here), so uv does not search the machine for one of each version."""
    out = subprocess.run(
        [uv, "pip", "compile", "--no-config", "--no-header", "--quiet", "--cache-dir", str(cache), "--python", sys.executable]
        + ["--index-url", f"{mock}/simple/", "--python-version", python, "--python-platform", platform]
        + [str(requirements)],
        capture_output=True, text=True, timeout=120, env=clean_env(),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    (line,) = [line for line in out.stdout.splitlines() if line.startswith("torch==")]
    return line.split(" ")[0].removeprefix("torch==")


def test_the_markers_pick_cpu_everywhere_but_macos():
    text = (CHECKOUT / "requirements.txt").read_text()
    torch = [Requirement(line) for line in text.splitlines() if line.startswith("torch")]
    for sys_platform, expected in [("linux", "==2.13.0+cpu"), ("win32", "==2.13.0+cpu"), ("darwin", "==2.13.0")]:
        env = default_environment() | {"sys_platform": sys_platform}
        active = [r for r in torch if r.marker is not None and r.marker.evaluate(env)]
        assert [str(r.specifier) for r in active] == [expected], sys_platform


def test_pip_takes_the_cpu_build_from_pytorchs_page(mock, tmp_path):
    requirements = torch_requirements(mock, tmp_path)
    # macOS: pip evaluates markers for this machine (Linux), so the macOS line is given alone, without its marker.
    lines = requirements.read_text().splitlines()
    assert 'torch==2.13.0 ; sys_platform == "darwin"' in lines
    mac = tmp_path / "requirements-mac.txt"
    mac.write_text(f"{lines[0]}\ntorch==2.13.0\n")
    # Cloud's platform for each Python; the others for one (uv's test below takes every pair, a pip run takes 1-2 s).
    cases = [(requirements, python, LINUX["x86_64"]) for python in PYTHONS]
    cases += [(requirements, "3.12", LINUX["aarch64"]), (requirements, "3.12", WINDOWS), (mac, "3.12", MAC)]
    with ThreadPoolExecutor(3) as pool:
        chosen = list(pool.map(lambda case: pip_choice(case[0], mock, *case[1:]), cases))
    report = [(case[1:], choice) for case, choice in zip(cases, chosen, strict=True)]
    assert [version for version, _ in chosen] == ["2.13.0+cpu"] * 5 + ["2.13.0"], report
    assert [folder for _, folder in chosen][:5] == ["cpu"] * 5, report  # the macOS file: PyPI's or the page's


def test_uv_takes_the_cpu_build_from_pytorchs_page(mock, tmp_path):
    uv = uv_bin()
    if uv is None:
        pytest.skip("uv is not installed (it comes with requirements-dev.txt)")
    requirements = torch_requirements(mock, tmp_path)
    for python in PYTHONS:
        for platform in [*LINUX, WINDOWS]:
            assert uv_choice(uv, requirements, mock, python, UV_PLATFORM[platform], tmp_path) == "2.13.0+cpu"
        assert uv_choice(uv, requirements, mock, python, UV_PLATFORM[MAC], tmp_path) == "2.13.0"


def test_without_the_page_neither_tool_takes_pypis_build_on_linux(mock, tmp_path):
    # The mock PyPI's Linux torch stands for the CUDA build: with the page missing, pip finds no 2.13.0+cpu and
    # stops; uv stops at once on a find-links URL it cannot read.
    requirements = torch_requirements(mock, tmp_path)
    requirements.write_text(requirements.read_text().replace(f"{mock}/whl/cpu/torch/", f"{mock}/missing/"))
    with pytest.raises(AssertionError, match=r"torch==2\.13\.0\+cpu"):
        pip_choice(requirements, mock, "3.12", LINUX["x86_64"])
    uv = uv_bin()
    if uv is not None:
        with pytest.raises(AssertionError, match="Failed to read `--find-links` URL"):
            uv_choice(uv, requirements, mock, "3.12", UV_PLATFORM["x86_64"], tmp_path)


def test_offline_setup_drops_only_the_find_links_line():
    # scripts/setup_env.sh gives uv requirements.txt without its find-links line where download.pytorch.org does not
    # resolve; its pattern must match that line, and nothing else.
    script = (CHECKOUT / "scripts" / "setup_env.sh").read_text()
    (pattern,) = re.findall(r"grep -v '([^']+)' \"\$file\"", script)
    lines = (CHECKOUT / "requirements.txt").read_text().splitlines()
    assert [line for line in lines if re.search(pattern, line)] == [f"--find-links {PAGE}"]


def test_git_keeps_uv_lock_out():
    # Community Cloud installs a committed uv.lock instead of requirements.txt.
    assert "uv.lock" in (CHECKOUT / ".gitignore").read_text().splitlines()
    if (CHECKOUT / ".git").exists():
        out = subprocess.run(["git", "-C", str(CHECKOUT), "check-ignore", "--no-index", "uv.lock"], capture_output=True)
        assert out.returncode == 0, out
