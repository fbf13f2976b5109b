"""Figures for a new visitor: st.plotly_chart (Streamlit's own plotly.js, 4.7 MB) against ui.widgets.plotly_figure
(the app's plotly.js bundle from static/), side by side in one run.

Two one-page apps draw the same three figures side by side (a layer line chart with a dot per head, a 2x2 grid of
per-head heatmaps, a pair of accuracy heatmaps: the app's own figure functions on seeded random numbers), each served
by its own `streamlit run` pinned to CPU 0. Each round opens both in a new Chromium context (empty cache), in turns, and
times navigation start to all three figures drawn with Streamlit idle (held 0.5 s, as bench_classroom counts), and
the bytes of JavaScript the page loaded. Prints the medians and the ratio.

Run from the repository root: `.venv/bin/python -m benchmarks.bench_figures [--rounds 5]`."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from attnlib.present.tour import SHARE_NAMES
from attnlib.views.deps import head_accuracy_heatmaps
from attnlib.views.special import head_heatmaps, layer_lines_with_head_dots
from benchmarks.bench_deploy import BROWSER_ARGS, CHROMIUM, ROOT, Server

N_FIGURES = 3
DRAW = {
    "st.plotly_chart": "st.plotly_chart(fig, key=f'f{i}')",
    "ui.widgets.plotly_figure": "plotly_figure(fig, key=f'f{i}')",
}
APP = """import sys
sys.path.insert(0, {root!r})
import streamlit as st
from benchmarks.bench_figures import sample_figures
from ui.widgets.plotly_figure import plotly_figure

st.set_page_config(layout="wide")
st.title("Three figures")
for i, (column, fig) in enumerate(zip(st.columns({n}), sample_figures())):
    with column:
        {draw}
"""
# Injected into each page: ms from navigation start to the moment all figures were drawn with no status widget,
# once that has held 0.5 s; and the bytes of JavaScript fetched.
WATCH = """
(() => {
  let since = null;
  const tick = () => {
    const drawn = [...document.querySelectorAll('.js-plotly-plot')].filter((p) => p.querySelector('.main-svg'));
    const running = document.querySelector('[data-testid="stStatusWidget"]') !== null;
    if (drawn.length >= %d && !running) {
      if (since === null) since = performance.now();
      if (performance.now() - since >= 500) { window.__benchFinished = since; return; }
    } else {
      since = null;
    }
    setTimeout(tick, 25);
  };
  tick();
})();
"""
SCRIPT_BYTES = """performance.getEntriesByType('resource').filter((e) => e.name.endsWith('.js'))
  .reduce((total, e) => total + e.encodedBodySize, 0)"""


def sample_figures() -> list[go.Figure]:
    """The three figures both apps draw: seeded random shares of a 6-layer, 12-head model."""
    rng = np.random.default_rng(0)
    shares = {key: rng.random((6, 12)) for key in SHARE_NAMES}
    return [
        layer_lines_with_head_dots(shares, SHARE_NAMES, "Share of attention per layer", "share"),
        head_heatmaps(shares, SHARE_NAMES, "Share of attention per head"),
        head_accuracy_heatmaps(100 * rng.random((6, 12, 2)), "nsubj"),
    ]


def visit(browser, url: str) -> tuple[float, int]:
    """(seconds to every figure drawn, bytes of JavaScript) for a new visitor."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        context.add_init_script(WATCH % N_FIGURES)
        page = context.new_page()
        page.goto(url, wait_until="commit")
        page.wait_for_function("() => window.__benchFinished !== undefined", timeout=120_000, polling=100)
        return page.evaluate("window.__benchFinished") / 1000, int(page.evaluate(SCRIPT_BYTES))
    finally:
        context.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="visits to each app, in turns (default 5)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    seconds: dict[str, list[float]] = {name: [] for name in DRAW}
    script_mb: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        apps = Path(folder)
        (apps / "static").symlink_to(ROOT / "static")  # an app's static files lie beside its script
        servers = {}
        try:
            for i, (name, draw) in enumerate(DRAW.items()):
                script = apps / f"figures_{i}.py"
                script.write_text(APP.format(root=str(ROOT), n=N_FIGURES, draw=draw))
                servers[name] = Server(apps / f"server_{i}.log", ("taskset", "-c", "0"), str(script))
            for server in servers.values():
                server.health_seconds()
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
                for server in servers.values():
                    visit(browser, server.url)  # warm: imports and the first run, not counted
                for _ in range(args.rounds):
                    for name, server in servers.items():
                        took, script_bytes = visit(browser, server.url)
                        seconds[name].append(took)
                        script_mb[name] = script_bytes / 1e6
                browser.close()
        finally:
            for server in servers.values():
                server.stop()
    median = {name: statistics.median(times) for name, times in seconds.items()}
    print(f"Three figures, a new visitor ({args.rounds} rounds, in turns; servers on CPU 0):")
    print(f"{'drawn by':<18}{'median s':>10}{'min-max s':>14}{'JavaScript MB':>15}")
    for name, times in seconds.items():
        print(f"{name:<18}{median[name]:>10.2f}{f'{min(times):.2f}-{max(times):.2f}':>14}{script_mb[name]:>15.2f}")
    print(
        f"ratio, st.plotly_chart / ui.widgets.plotly_figure: {median['st.plotly_chart'] / median['ui.widgets.plotly_figure']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
