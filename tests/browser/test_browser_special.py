"""Real-browser tests of the Special tokens page: the Weights vs norms tab, and two models compared (the shares drawn
are the library's)."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from attnlib.analyses.base import run_analysis
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.core.corpus import read_corpus
from attnlib.core.model import load_model
from attnlib.results.shipped import CLASSROOM_SINGLE
from support.browser import FIGURES_DRAWN, IDLE, TRACES, browser_page, traces_of
from support.cli import run_cli
from support.tolerances import FORWARD_RTOL

VISIBLE_PLOTS = "[role='tabpanel']:not([hidden]) .js-plotly-plot"


def _open(page, url: str) -> None:
    """Open the page and wait until its run has ended and the tabs are drawn."""
    page.goto(url, wait_until="domcontentloaded")
    page.get_by_role("tab", name="Weights vs norms", exact=True).wait_for(timeout=240_000)
    page.wait_for_function(IDLE, timeout=240_000)
    page.wait_for_timeout(1500)


def _show_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name, exact=True).click()
    page.locator(VISIBLE_PLOTS).first.wait_for(state="visible", timeout=60_000)
    page.wait_for_function(IDLE, timeout=120_000)
    page.wait_for_function(FIGURES_DRAWN, timeout=60_000)


@pytest.mark.browser
@pytest.mark.slow
def test_weights_vs_norms_tab_in_browser(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "special-browser-failure.png", 1500, 2200) as page:
        _open(page, f"{streamlit_server}/special-tokens?norms=1&limit=8&grad=0&map=0")
        _show_tab(page, "Weights vs norms")
        page.screenshot(path=str(screenshot_dir / "special-weights-vs-norms.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0
        panel = page.locator("[role='tabpanel']:not([hidden])")
        assert "What it shows." in panel.inner_text()
        assert "of the attention weights but" in panel.inner_text()
        assert panel.locator(".js-plotly-plot").count() == 2  # weights vs norms, value norms
        drawn = panel.locator(".js-plotly-plot").first.inner_text()
        assert "attention weights" in drawn and "norms ||αf(x)||" in drawn  # the two panels' titles


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_two_models_compared_in_browser(streamlit_server, browser, screenshot_dir, tiny_model_dir):
    """The default model and a tiny BERT on the first 6 classroom sentences: the Shares tab overlays both models'
    lines, and the tiny model's lines are the library's per-layer shares (METHODS §2) computed here."""
    folder, limit = str(tiny_model_dir), 6
    with browser_page(browser, screenshot_dir / "special-browser-failure.png", 1500, 2200) as page:
        _open(page, f"{streamlit_server}/special-tokens?norms=1&limit={limit}&grad=0&map=0&cmp={quote(folder)}")
        _show_tab(page, "Shares")
        lines = traces_of(page.evaluate(TRACES), "Share of attention per layer")
        page.screenshot(path=str(screenshot_dir / "special-compare-shares.png"), full_page=True)
        panel = page.locator("[role='tabpanel']:not([hidden])")
        assert "largest difference:" in panel.inner_text()
        assert panel.locator(".js-plotly-plot").count() == 3  # overlaid lines, a heatmap per model
        legend = panel.locator(".js-plotly-plot").first.inner_text()
        assert "(all-MiniLM-L6-v2)" in legend and f"({folder})" in legend
        _show_tab(page, "Weights vs norms")
        page.screenshot(path=str(screenshot_dir / "special-compare-weights-vs-norms.png"), full_page=True)
        assert page.locator("[role='tabpanel']:not([hidden])").inner_text().count("What it shows.") == 2
        assert page.locator("[data-testid='stException']").count() == 0

    corpus = {"corpus": read_corpus(CLASSROOM_SINGLE, limit=limit)}  # the page's default corpus
    own = run_analysis(SPECIAL, load_model(folder), SpecialOptions(norms=True), inputs=corpus).result.special
    for key, name in SHARES_LEGEND.items():  # each line a layer's mean share over its heads
        (line,) = [t for t in lines if t["name"] == f"{name} ({folder})"]
        np.testing.assert_allclose(line["y"], own.heads[key].mean(axis=1), rtol=FORWARD_RTOL, atol=FORWARD_RTOL)


SHARES_LEGEND = {"cls": "[CLS]", "sep": "[SEP]", "punct": "punctuation", "other": "other tokens"}  # as the legend says


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_second_model_from_a_result_file_in_browser(
    streamlit_server, browser, screenshot_dir, tiny_model_dir, tmp_path
):
    out, folder = tmp_path / "tiny-special.json", str(tiny_model_dir)
    argv = ["special", "--corpus", str(CLASSROOM_SINGLE), "--norms", "--model", folder, "--out", str(out)]
    ran = run_cli(*argv)
    assert ran.code == 0, ran.err
    with browser_page(browser, screenshot_dir / "special-result-file-failure.png", 1500, 2200) as page:
        _open(page, f"{streamlit_server}/special-tokens?grad=0")  # the default model's shipped result
        sidebar = page.locator("[data-testid='stSidebar']")
        field = sidebar.get_by_role("textbox", name="Compare with").bounding_box()
        uploader = sidebar.locator("[data-testid='stExpander']").filter(has_text="the second model's result file")
        corpus = sidebar.get_by_role("heading", name="Corpus").bounding_box()
        assert field["y"] < uploader.bounding_box()["y"] < corpus["y"]  # under "Compare with"
        uploader.get_by_text("the second model's result file").click()
        uploader.locator("input[type='file']").set_input_files(str(out))
        page.get_by_text("Second model:").first.wait_for(timeout=120_000)
        page.wait_for_function(IDLE, timeout=240_000)
        _show_tab(page, "Shares")
        panel = page.locator("[role='tabpanel']:not([hidden])")
        assert "largest difference:" in panel.inner_text()
        legend = panel.locator(".js-plotly-plot").first.inner_text()
        assert "(all-MiniLM-L6-v2)" in legend and f"({folder})" in legend
        assert panel.locator(".js-plotly-plot").count() == 3  # overlaid lines, a heatmap per model
        assert page.locator("[data-testid='stException']").count() == 0
        page.screenshot(path=str(screenshot_dir / "special-compare-result-file.png"), full_page=True)
