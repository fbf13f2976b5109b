"""Deployment figures against their targets: seconds from `streamlit run` to the first rendered Live page (<= 15 s),
the server's peak resident memory while every page is opened with the default model, one exact attribution example
included (< 1.5 GB), and a fresh `pip install -r requirements.txt` into a new virtual environment (< 2 minutes).

Run from the repository root: `.venv/bin/python -m benchmarks.bench_deploy [--runs 2] [--skip-pip]`.
Writes the figures to benchmarks/results/deploy.json as well."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MAIN_CONTENT = ".js-plotly-plot, .attn-table, [data-testid='stTable'], iframe, [data-testid='stAlert']"
NO_STATUS = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
PAGES = ["Special tokens", "Dependency heads", "Local vs global"]  # after the Live page
EXAMPLE = "The committee approved the new budget after a long debate."  # about 12 tokens, not the shipped example
TARGETS = {"startup_s": 15.0, "peak_rss_mb": 1536.0, "pip_install_s": 120.0}


# ---------- the server ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`streamlit run app.py` on loopback, its start time, and a sampler of its resident memory (with children)."""

    def __init__(self, log: Path, prefix: Sequence[str] = (), script: str = "app.py") -> None:
        """`prefix` goes before the command, e.g. ("taskset", "-c", "0") to pin the server to one CPU; `script` is
        the app (run from the repository root, whose .streamlit/config.toml applies)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log.parent.mkdir(parents=True, exist_ok=True)  # test-output/ is not in a fresh clone
        self.log = open(log, "wb")  # noqa: SIM115 - open for the server's whole life
        self.peak_mb, self._sampling = 0.0, True
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "streamlit",
                "run",
                script,
                "--server.headless",
                "true",
                "--server.fileWatcherType",
                "none",
                "--server.address",
                "127.0.0.1",
                "--server.port",
                str(self.port),
            ],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, STREAMLIT_BROWSER_GATHER_USAGE_STATS="false"),
        )
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        import psutil

        process = psutil.Process(self.proc.pid)
        while self._sampling:
            try:
                rss = process.memory_info().rss + sum(c.memory_info().rss for c in process.children(recursive=True))
            except psutil.Error:
                return
            self.peak_mb = max(self.peak_mb, rss / 2**20)
            time.sleep(0.05)

    def health_seconds(self, timeout: float = 120) -> float:
        """Seconds from process start until /_stcore/health answers."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/_stcore/health", timeout=1)
                return time.perf_counter() - self.started
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("streamlit did not answer its health check")

    def high_water_mb(self) -> float:
        """The kernel's peak resident set size of the server process (VmHWM), in MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self._sampling = False
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def wait_rendered(page, timeout_ms: float = 300_000) -> None:
    """The page's main content is visible and the app is no longer running."""
    page.locator(MAIN_CONTENT).first.wait_for(state="visible", timeout=timeout_ms)
    page.wait_for_function(NO_STATUS, timeout=timeout_ms)


def exception_shown(page) -> bool:
    return page.locator("[data-testid='stException']").count() > 0


def startup_run(browser, log: Path) -> dict:
    """Start a server, open the Live page as soon as the server answers, and time the first complete render."""
    server = Server(log)
    try:
        health = server.health_seconds()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url + "/", wait_until="domcontentloaded")
        page.locator("iframe").first.wait_for(state="visible", timeout=120_000)  # the head view of the default pair
        page.wait_for_function(NO_STATUS, timeout=120_000)
        rendered = time.perf_counter() - server.started
        ok = not exception_shown(page)
        page.close()
        return {"health_s": health, "first_render_s": rendered, "ok": ok}
    finally:
        server.stop()


def all_pages_run(browser, log: Path) -> dict:
    """Open every page with the default model in one session, then one exact attribution example; peak memory."""
    server = Server(log)
    timings, problems = {}, []
    try:
        server.health_seconds()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t = time.perf_counter()
        page.goto(server.url + "/", wait_until="domcontentloaded")
        wait_rendered(page)
        timings["Live attention"] = time.perf_counter() - t
        for name in PAGES:
            t = time.perf_counter()
            page.locator("[data-testid='stSidebarNav']").get_by_text(name, exact=True).click()
            page.get_by_role("heading", name=re.compile("^" + name.split()[0])).first.wait_for(timeout=300_000)
            wait_rendered(page, 900_000)
            timings[name] = time.perf_counter() - t
            if exception_shown(page):
                problems.append(f"exception box on {name}")
        # the exact example: a sentence of its own (not the precomputed one), computed on request
        t = time.perf_counter()
        areas = page.locator("textarea")
        areas.nth(0).fill(EXAMPLE)
        areas.nth(0).press("Control+Enter")
        if areas.count() > 1:
            areas.nth(1).fill("")
            areas.nth(1).press("Control+Enter")
        page.wait_for_function(NO_STATUS, timeout=120_000)
        button = page.get_by_role("button", name=re.compile("Compute exact attribution"))
        if button.count():
            button.first.click()
            page.wait_for_timeout(500)
        else:
            problems.append("no 'Compute exact attribution' button on Local vs global")
        page.wait_for_function(NO_STATUS, timeout=900_000)
        timings["exact example"] = time.perf_counter() - t
        if exception_shown(page):
            problems.append("exception box after the exact example")
        page.screenshot(path=str(log.with_suffix(".png")), full_page=True)
        page.close()
        time.sleep(1.0)
        return {
            "peak_rss_mb_sampled": server.peak_mb,
            "peak_rss_mb_vmhwm": server.high_water_mb(),
            "page_seconds": timings,
            "problems": problems,
        }
    finally:
        server.stop()


# ---------- pip install --------------------------------------------------------------------------------------------


def resolves(host: str) -> bool:
    """Whether the host's name resolves here."""
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return False
    return True


def pip_install(requirements: Path) -> dict:
    """A new venv, then `pip install --no-cache-dir -r requirements.txt`, timestamping pip's output to find what dominates.
    Where download.pytorch.org (requirements.txt's find-links page) does not resolve, `--retries 0`: pip reads that page
    for every package, and its default 5 retries cost about 7 s a package (18 minutes for the dev requirements)."""
    retries = [] if resolves("download.pytorch.org") else ["--retries", "0"]
    folder = Path(tempfile.mkdtemp(prefix="bench-deploy-venv-"))
    try:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        venv_s = time.perf_counter() - t0
        lines: list[tuple[float, str]] = []
        proc = subprocess.Popen(
            [
                str(folder / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--progress-bar",
                "off",
                *retries,
                "-r",
                str(requirements),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None  # stdout=PIPE
        for line in proc.stdout:
            lines.append((time.perf_counter() - t0, line.rstrip()))
        code = proc.wait()
        total = time.perf_counter() - t0
        install_start = next((t for t, l in lines if l.startswith("Installing collected packages")), total)
        downloads = []
        for (t, line), (t_next, _) in zip(lines, lines[1:] + [(total, "")]):
            m = re.match(r"\s*Downloading (\S+) \(([\d.]+) (kB|MB|GB)\)", line)
            if m:
                size = float(m.group(2)) * {"kB": 1e-3, "MB": 1, "GB": 1e3}[m.group(3)]
                downloads.append((m.group(1).split("-")[0], size, t_next - t))
        site = next(folder.glob("lib/python*/site-packages"))
        sizes = sorted(
            ((p.name, _du(p)) for p in site.iterdir() if p.is_dir() and not p.name.endswith("-info")),
            key=lambda x: -x[1],
        )
        return {
            "ok": code == 0,
            "total_s": total,
            "venv_s": venv_s,
            "resolve_and_download_s": install_start - venv_s,
            "unpack_and_install_s": total - install_start,
            "downloaded_mb": sum(d[1] for d in downloads),
            "largest_downloads": sorted(downloads, key=lambda d: -d[1])[:8],
            "largest_installed_mb": [(n, round(s)) for n, s in sizes[:10]],
            "torch_wheel": next(
                (l.strip() for _, l in lines if "torch-" in l and ("Processing" in l or "Downloading" in l)), ""
            ),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _du(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


# ---------- report -------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="startup measurements (the first may read files from disk)")
    parser.add_argument(
        "--skip-pip", action="store_true", help="leave out the fresh pip install (it downloads ~270 MB)"
    )
    parser.add_argument("--skip-pages", action="store_true", help="leave out the all-pages memory run")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out_dir = ROOT / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    report: dict = {"machine": f"{os.cpu_count()} CPUs", "python": sys.version.split()[0]}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        report["startup"] = [startup_run(browser, out_dir / f"deploy-startup-{i}.log") for i in range(args.runs)]
        if not args.skip_pages:
            report["all_pages"] = all_pages_run(browser, out_dir / "deploy-all-pages.log")
        browser.close()
    if not args.skip_pip:
        report["pip"] = pip_install(ROOT / "requirements.txt")
    (out_dir / "deploy.json").write_text(json.dumps(report, indent=1, default=str))

    def row(name: str, value: float, target: float, unit: str) -> None:
        verdict = "ok" if value <= target else "OVER"
        print(f"{name:<58}{value:>10.1f} {unit:<3}{target:>9.0f} {unit:<3}{value / target:>7.2f}  {verdict}")

    print(f"\nDeployment figures ({report['machine']}, Python {report['python']}, default model all-MiniLM-L6-v2)")
    print(f"{'measure':<58}{'value':>14}{'target':>13}{'ratio':>7}")
    for i, s in enumerate(report["startup"], start=1):
        row(
            f"start -> first rendered Live page, run {i}" + ("" if s["ok"] else " (exception!)"),
            s["first_render_s"],
            TARGETS["startup_s"],
            "s",
        )
        print(f"{'   of which: start -> server answers health check':<58}{s['health_s']:>10.1f} s")
    if "all_pages" in report:
        a = report["all_pages"]
        row("peak RSS, every page + exact example (kernel VmHWM)", a["peak_rss_mb_vmhwm"], TARGETS["peak_rss_mb"], "MB")
        row(
            "peak RSS, every page + exact example (sampled, + children)",
            a["peak_rss_mb_sampled"],
            TARGETS["peak_rss_mb"],
            "MB",
        )
        print("   seconds per page: " + ", ".join(f"{k} {v:.1f}" for k, v in a["page_seconds"].items()))
        for problem in a["problems"]:
            print(f"   PROBLEM: {problem}")
    if "pip" in report:
        pip = report["pip"]
        row(
            "fresh pip install -r requirements.txt (new venv, no cache)" + ("" if pip["ok"] else " FAILED"),
            pip["total_s"],
            TARGETS["pip_install_s"],
            "s",
        )
        print(
            f"   venv {pip['venv_s']:.1f} s, resolve + download {pip['resolve_and_download_s']:.1f} s "
            f"({pip['downloaded_mb']:.0f} MB), unpack + install {pip['unpack_and_install_s']:.1f} s"
        )
        print(
            "   largest downloads (MB, s): "
            + ", ".join(f"{n} {s:.0f} ({t:.1f})" for n, s, t in pip["largest_downloads"])
        )
        print("   largest installed (MB): " + ", ".join(f"{n} {s}" for n, s in pip["largest_installed_mb"]))
        print(f"   torch: {pip['torch_wheel']}")


if __name__ == "__main__":
    main()
