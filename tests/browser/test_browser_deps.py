"""Real-browser test: the Dependency heads page's "All heads together" section, with a second model to compare with;
the example sentence in both models, and every head's accuracy on a relation drawn as the library counts it."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from attnlib.analyses.base import run_analysis
from attnlib.analyses.deps import DEPS, DepsOptions
from attnlib.core.corpus import read_conllu
from attnlib.core.model import DEFAULT_MODEL, load_model
from attnlib.results.shipped import EWT_DEV
from support.browser import IDLE, TRACES, browser_page, side_by_side


def _click(page, name: str, last: bool = False) -> None:
    """Click a button once the page's run has ended (a run in progress still shows the previous run's buttons)."""
    page.wait_for_function(IDLE, timeout=180_000)
    buttons = page.get_by_role("button", name=name)
    button = buttons.last if last else buttons.first
    button.wait_for(timeout=180_000)
    button.scroll_into_view_if_needed()
    button.click()
    page.wait_for_timeout(1000)
    page.wait_for_function(IDLE, timeout=180_000)


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_probe_section_compares_two_models(streamlit_server, browser, screenshot_dir, tiny_model_dir):
    with browser_page(browser, screenshot_dir / "deps-probe-failure.png") as page:
        url = f"{streamlit_server}/dependency-heads?limit=10&min=1&probe_limit=6&cmp={quote(str(tiny_model_dir))}"
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_text("largest difference: best-head accuracy in").first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=180_000)
        page.get_by_role("tab", name="All heads together", exact=True).click()  # only the open tab is drawn
        page.get_by_role("heading", name="All heads together").first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=180_000)
        _click(page, "Compute for 6 inputs")  # the default model's probe
        page.get_by_text("UAS, attention-only probe").first.wait_for(timeout=180_000)
        _click(page, "Compute for 6 inputs", last=True)  # the second model's
        page.get_by_text("largest difference: UAS in").first.wait_for(timeout=180_000)
        page.locator(".js-plotly-plot").filter(has_text="Learned weight of every head").first.wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        assert page.locator("[data-testid='stException']").count() == 0, "an exception box is shown"
        assert page.get_by_text("UAS, attention-only probe").count() == 1
        page.screenshot(path=str(screenshot_dir / "deps-probe-compare.png"), full_page=True)
        section = page.get_by_role("heading", name="All heads together").first
        section.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "deps-probe-section.png"))
        charts = page.locator(".js-plotly-plot")
        assert charts.filter(has_text="Accuracy per relation").count() == 2  # one per model, side by side
        assert charts.filter(has_text="Learned weight of every head").count() == 2
        sentences = charts.filter(has_text="heads right")  # the test sentence's arc diagram in each model
        assert sentences.count() == 2
        a, b = sentences.nth(0).bounding_box(), sentences.nth(1).bounding_box()
        assert side_by_side(a, b)
        charts.filter(has_text="Learned weight of every head").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "deps-probe-weights-compared.png"))


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_example_sentence_in_both_models(streamlit_server, browser, screenshot_dir, tiny_model_dir):
    """The example sentence drawn as arcs and as a word-level map in both models, side by side; and the default
    model's accuracy of every head on the relation shown is the library's, counted here on the same 10 sentences."""
    limit = 10
    with browser_page(browser, screenshot_dir / "deps-example-failure.png") as page:
        url = f"{streamlit_server}/dependency-heads?limit={limit}&min=1&sentence=1&cmp={quote(str(tiny_model_dir))}"
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Example").first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=180_000)
        arcs = page.locator(".js-plotly-plot").filter(has_text="arcs found")
        arcs.nth(1).wait_for(timeout=60_000)
        page.wait_for_timeout(1500)
        assert arcs.count() == 2
        words = [arcs.nth(k).locator(".textpoint").all_inner_texts() for k in (0, 1)]
        assert len(words[0]) > 3 and words[0] == words[1]  # the same sentence drawn in both models
        a, b = arcs.nth(0).bounding_box(), arcs.nth(1).bounding_box()
        assert side_by_side(a, b)  # side by side
        assert page.get_by_text("all-MiniLM-L6-v2 · head", exact=False).count() == 1
        assert page.get_by_text(f"{tiny_model_dir} · head", exact=False).count() == 1
        heat = page.locator(".js-plotly-plot").filter(has_text="Word-level attention of head")
        assert heat.count() == 2
        relation = page.locator(".js-plotly-plot").filter(has_text="Accuracy of every head on")
        assert relation.count() == 2  # every head on the relation, per model
        assert page.locator("[data-testid='stException']").count() == 0
        page.get_by_role("heading", name="Example").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "deps-example-two-models.png"))
        grids = [f for f in page.evaluate(TRACES) if f["title"].startswith("Accuracy of every head on '")]

    first = grids[0]  # the default model's, above the compared one's
    chosen = first["title"].split("'")[1]
    sentences = read_conllu(EWT_DEV)[:limit]  # the page's default treebank
    own = run_analysis(DEPS, load_model(DEFAULT_MODEL), DepsOptions(min_count=1), inputs={"conllu": sentences}).result
    grid = own.counts.accuracy_grid(chosen)  # [layers, heads, direction]
    drawn = np.stack([np.asarray(t["z"], float) for t in first["traces"] if t["type"] == "heatmap"], axis=-1)
    # hits over dependents, the same float64 ratios when both runs count the same hits: each word's prediction is its
    # most-attended word, and the page's run and this one differ by float32 rounding (~1e-9 in a weight), far below the
    # gap between a trained model's two largest weights of a row
    np.testing.assert_allclose(drawn, grid * 100, rtol=1e-12)
