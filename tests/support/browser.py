"""Driving the app and the views in headless Chromium: the browser's flags, pages (offline ones too), and waits for a
run to end and for a canvas or figure to be drawn."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from attnlib.results.shipped import ROOT
from attnlib.views.canvas_html import LEVELS
from attnlib.views.head_view import MIN_WEIGHT
from support.views import unpack

BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def server_log() -> Path:
    """This test process's Streamlit server log (one per xdist worker, so two servers never share a file)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return ROOT / "test-output" / (f"streamlit-server-{worker}.log" if worker else "streamlit-server.log")


def side_by_side(a: dict, b: dict) -> bool:
    """Whether box b stands right of box a with the two overlapping in height (a model's long local path may wrap
    one column's heading to a second line, so their tops need not be level)."""
    return b["x"] >= a["x"] + a["width"] - 5 and b["y"] < a["y"] + a["height"] and a["y"] < b["y"] + b["height"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


IDLE = "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"  # a browser page's run has ended


FIGURE = ".attn-figure"  # a figure in a browser page (ui/widgets/plotly_figure.js); its plot is `.js-plotly-plot[data-drawn]`


# Every figure and table of the page drawn (figures below the first screen a moment after the rest; ui/widgets/plotly_figure.js).
FIGURES_DRAWN = """() => [...document.querySelectorAll("[data-testid='stMain'] .stBidiComponent")]
  .every((el) => el.querySelector('.js-plotly-plot[data-drawn], .attn-table table, canvas[data-drawn], .attn-nothing-to-draw') !== null)"""


# Pixels of a canvas clearly unlike its background (its top-left pixel; white or, in the dark mode, black): lines,
# cells, labels.
INK = """sel => { const c = document.querySelector(sel); if (!c || !c.width) return 0;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let k = 0;
  for (let i = 0; i < d.length; i += 4) if ([0, 1, 2, 3].some(j => Math.abs(d[i + j] - d[j]) > 55)) k++;
  return k; }"""


# In a figure's page: plotly drew its SVG and at least one trace (lines, markers, bars or a heatmap's image).
PLOTTED = (
    "() => !!document.querySelector('.js-plotly-plot .main-svg') && document.querySelectorAll('g.trace, .hm').length"
)


@contextmanager
def browser_page(browser, failure: Path | None = None, width: int = 1400, height: int = 1000) -> Iterator:
    """A new Chromium page, closed afterwards; when the body fails, a full-page screenshot at `failure` first."""
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        yield page
    except Exception:
        if failure is not None:
            page.screenshot(path=str(failure), full_page=True)
        raise
    finally:
        page.close()


@contextmanager
def offline_page(browser) -> Iterator[tuple]:
    """A browser page that refuses every request but local ones (file:, data:, blob:); (the page, URLs asked for)."""
    asked: list[str] = []

    def only_local(route) -> None:
        asked.append(route.request.url)
        if route.request.url.startswith(("file:", "data:", "blob:")):
            route.continue_()
        else:
            route.abort()

    with browser_page(browser) as page:
        page.route("**/*", only_local)
        yield page, asked


def wait_idle(page, timeout: int = 180_000) -> None:
    """Wait until Streamlit has finished the current run."""
    page.wait_for_timeout(300)
    page.wait_for_function(IDLE, timeout=timeout)
    page.wait_for_timeout(500)


def download(page, click, path: Path, tries: int = 4) -> Path:
    """Save what a click downloads, clicking again when none came: a click that lands while Streamlit reruns the page
    (a deferred download's data is registered per run) starts no download."""
    for attempt in range(tries):
        try:
            with page.expect_download(timeout=45_000) as info:
                click()
            info.value.save_as(path)
            return path
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise
            wait_idle(page)
    return path


def compute_all(page, most: int, timeout: int = 300_000) -> None:
    """Press the page's first "Compute" button after each run, until none is left or after `most` presses."""
    for _ in range(most):
        ask = page.get_by_role("button", name="Compute")
        if ask.count() == 0:
            return
        ask.first.click()
        wait_idle(page, timeout)


# How many results the page says it computed (each caption of one ends "computed here").
COMPUTED = "() => document.body.innerText.split('computed here').length - 1"


def compute_from_last(page, buttons: int, timeout: int = 300_000) -> None:
    """Press the page's `buttons` "Compute for" buttons from the last up, each once the run before ended, waiting for
    one more "computed here" each time: a pressed button stays drawn in the run it starts (that run draws it, then
    computes), so the first one left is not always one still to press."""
    for done in range(buttons):
        page.wait_for_function(IDLE, timeout=timeout)
        button = page.get_by_role("button", name="Compute for").nth(buttons - 1 - done)
        button.wait_for(timeout=timeout)
        button.scroll_into_view_if_needed()
        button.click()
        page.wait_for_function(f"() => ({COMPUTED})() > {done}", timeout=timeout)
    wait_idle(page, timeout)


def iframe_frame(page, index: int = 0, timeout: int = 180_000):
    """The index-th iframe's frame; read again when a rerun swaps the iframe between finding it and reading it."""
    deadline = time.monotonic() + timeout / 1000
    while True:
        assert time.monotonic() < deadline, "the view's iframe never got a frame"
        page.locator("iframe").nth(index).wait_for(state="visible", timeout=timeout)
        handle = page.locator("iframe").nth(index).element_handle()
        frame = None if handle is None else handle.content_frame()
        if frame is not None:
            return frame
        page.wait_for_timeout(200)


def view_frame(page, canvas: str, timeout: int = 180_000):
    """The view's iframe once its canvas has been drawn."""
    frame = iframe_frame(page, 0, timeout)
    frame.wait_for_selector(canvas, timeout=timeout)
    frame.wait_for_function(f"() => ({INK})('{canvas}') > 200", timeout=timeout)
    return frame


# Each figure of the page as plotly.js drew it: its title, its (first) y axis's title, the x axes' tick labels, and
# each trace's type, name, mode, line width, x axis (its panel: x, x2, ...) and data (x, y; a heatmap's z by rows),
# the base64 arrays decoded.
TRACES = """() => [...document.querySelectorAll('.js-plotly-plot')].map(p => ({
  title: (p.layout.title && p.layout.title.text) || '', ytitle: p._fullLayout.yaxis.title.text || '',
  ticks: [...p.querySelectorAll('.xtick text')].map(t => t.textContent),
  traces: p._fullData.map(t => ({type: t.type, name: t.name, mode: t.mode || null, width: t.line ? t.line.width : null,
    axis: t.xaxis, x: t.x ? Array.from(t.x) : null,
    y: t.y ? Array.from(t.y) : null, z: t.z ? Array.from(t.z, row => Array.from(row)) : null}))}))"""


def traces_of(figures: list[dict], title: str) -> list[dict]:
    """The traces of the one figure (of TRACES) whose title starts with `title`."""
    found = [f for f in figures if f["title"].startswith(title)]
    assert len(found) == 1, (title, [f["title"] for f in figures])
    return found[0]["traces"]


VIEW_DATA = "() => JSON.parse(document.getElementById('data').textContent)"  # the data a canvas view's page embeds


def assert_lines_are_weights(drawn: dict, attentions: np.ndarray) -> None:
    """The lines a head view draws (`drawn`: its embedded data) are the weights of `attentions` ([layers, heads, n, n],
    computed by the test) of the layer and heads it names, between the positions it names, each a byte
    round(weight x LEVELS); and every weight of at least MIN_WEIGHT has its line."""
    left, right = [i - 1 for i in drawn["leftPos"]], [j - 1 for j in drawn["rightPos"]]
    ((layer,), heads) = [l - 1 for l in drawn["layers"]], [h - 1 for h in drawn["heads"]]
    maps = attentions[layer][heads][:, left][:, :, right]  # [heads, rows drawn, columns drawn]
    lines = unpack(drawn["lines"])
    # the app's run and the test's differ by float32 rounding of sums (a few 1e-7), so a weight within that of a
    # rounding boundary may land on either side: at most one level off
    assert lines and all(abs(byte - maps[k, i, j] * LEVELS) <= 0.5 + 1e-4 for (k, i, j), byte in lines.items())
    # and every weight of at least MIN_WEIGHT (away from that cut by more than the rounding) has its line
    clear = np.argwhere(maps >= MIN_WEIGHT + 1e-4)
    assert all((int(k), int(i), int(j)) in lines for k, i, j in clear) and len(clear) > maps.shape[-1]
