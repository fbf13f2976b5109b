"""Real-browser tests of head importance: the Head importance page (the default model's shipped result, a tiny
masked-LM model computed on the page), the Live page's head switches (multiselect and clicks in the model view)
and the Tour's knockout step."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest
import torch

from attnlib.analyses.base import run_analysis
from attnlib.analyses.importance import IMPORTANCE, ImportanceOptions
from attnlib.core.corpus import read_corpus
from attnlib.core.model import load_model
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.views.importance import CHANGE_NAMES, share_title
from support.browser import FIGURES_DRAWN, IDLE, TRACES, browser_page, traces_of
from support.tolerances import FORWARD_RTOL

VISIBLE_PLOTS = "[role='tabpanel']:not([hidden]) .js-plotly-plot"
LONG = 300_000  # a loaded two-core machine


def _idle(page) -> None:
    page.wait_for_function(IDLE, timeout=LONG)
    page.wait_for_timeout(1500)
    page.wait_for_function(IDLE, timeout=LONG)


def _show_tab(page, name: str) -> str:
    """Open a tab of the page, wait for its figures; its text."""
    page.get_by_role("tab", name=name, exact=True).click()
    _idle(page)
    page.wait_for_function(FIGURES_DRAWN, timeout=LONG)
    return page.locator("[role='tabpanel']:not([hidden])").inner_text()


@pytest.mark.browser
@pytest.mark.slow
def test_default_model_page_from_shipped_results(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "importance-default-failure.png", 1500, 2400) as page:
        page.goto(f"{streamlit_server}/head-importance?corpus=classroom-pairs", wait_until="domcontentloaded")
        page.get_by_role("tab", name="No-op test", exact=True).wait_for(timeout=LONG)
        _idle(page)
        assert "precomputed, shipped with the app" in page.inner_text("body")
        page.wait_for_function(FIGURES_DRAWN, timeout=LONG)
        page.screenshot(path=str(screenshot_dir / "importance-default-effects.png"), full_page=True)
        panel = page.locator("[role='tabpanel']:not([hidden])")
        assert panel.locator(".js-plotly-plot").count() == 4  # the share and three effects
        assert "Matter most:" in panel.inner_text()
        text = _show_tab(page, "No-op test")
        page.screenshot(path=str(screenshot_dir / "importance-default-no-op.png"), full_page=True)
        assert "What it shows." in text and "Spearman's ρ" in text and "In all-MiniLM-L6-v2, " in text
        assert "tab=noop" in page.url
        text = _show_tab(page, "Pruning curve")
        page.screenshot(path=str(screenshot_dir / "importance-default-pruning.png"), full_page=True)
        assert page.locator(VISIBLE_PLOTS).count() == 1
        assert "no trained masked-LM head" in _show_tab_text(page, "Gradient importance")
        assert page.locator("[data-testid='stException']").count() == 0


def _show_tab_text(page, name: str) -> str:
    page.get_by_role("tab", name=name, exact=True).click()
    _idle(page)
    return page.locator("[role='tabpanel']:not([hidden])").inner_text()


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_tiny_mlm_model_page_computed_in_browser(streamlit_server, browser, screenshot_dir, tiny_model_dir):
    """A tiny masked-LM BERT computed on the page (first 6 classroom sentences, the mlm measure): its heatmaps of the
    [CLS]/[SEP] share and of the ablation effect are the library's importance computed here (METHODS §15); the
    gradient importance and the no-op test drawn."""
    folder, limit = str(tiny_model_dir), 6
    with browser_page(browser, screenshot_dir / "importance-tiny-failure.png", 1500, 2400) as page:
        page.goto(
            f"{streamlit_server}/head-importance?model={quote(folder)}&limit={limit}&measure=mlm",
            wait_until="domcontentloaded",
        )
        button = page.get_by_role("button", name="Compute for 6 inputs")
        button.wait_for(timeout=LONG)
        assert "Nothing ships for" in page.inner_text("body")
        button.click()
        page.get_by_role("tab", name="No-op test", exact=True).wait_for(timeout=LONG)
        _idle(page)
        page.wait_for_function(FIGURES_DRAWN, timeout=LONG)
        page.screenshot(path=str(screenshot_dir / "importance-tiny-mlm-effects.png"), full_page=True)
        assert "change of the masked-LM loss" in page.inner_text("body")  # the mlm measure is shown
        figures = page.evaluate(TRACES)
        text = _show_tab(page, "Gradient importance")
        page.screenshot(path=str(screenshot_dir / "importance-tiny-mlm-gradient.png"), full_page=True)
        assert page.locator(VISIBLE_PLOTS).count() == 1 and "no trained masked-LM head" not in text
        text = _show_tab(page, "No-op test")
        page.screenshot(path=str(screenshot_dir / "importance-tiny-mlm-no-op.png"), full_page=True)
        assert "What it shows." in text and "the masked-LM loss" in text
        assert page.locator("[data-testid='stException']").count() == 0

    corpus = read_corpus(CLASSROOM_SINGLE, limit=limit)  # the page's default corpus
    options = ImportanceOptions(knockout=True, measure="mlm")  # as the page's, less the pruning pass (no effect)
    own = run_analysis(IMPORTANCE, load_model(folder), options, inputs={"corpus": corpus}).result
    (share,) = traces_of(figures, share_title(False))
    np.testing.assert_allclose(share["z"], own.special_share, rtol=FORWARD_RTOL, atol=FORWARD_RTOL)
    (effect,) = traces_of(figures, f"Effect: {CHANGE_NAMES['ablate']}")
    # an effect is the difference of two mean cross-entropies, and logits off by d move a cross-entropy by at most 2d;
    # float32 puts a logit within d = FORWARD_RTOL x its size, bounded by twice the plain model's largest |logit| (a
    # head switched off or a masked token changes the logits, not their scale): 2 losses x 2 d
    atol = 2 * 2 * FORWARD_RTOL * 2 * largest_logit(folder, [c.text_a for c in corpus])
    np.testing.assert_allclose(effect["z"], own.effect("ablate"), rtol=0, atol=atol)


def largest_logit(folder: str, texts: list[str]) -> float:
    """The largest |logit| of a masked-LM model's plain forward pass over some texts."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return float(model(**tokenizer(texts, padding=True, return_tensors="pt")).logits.abs().max())


@pytest.mark.browser
@pytest.mark.slow
def test_live_switches_by_multiselect_and_clicks(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "live-switches-failure.png", 1500, 2600) as page:
        page.goto(f"{streamlit_server}/?view=model&off=6-1,6-2&click=1", wait_until="domcontentloaded")
        page.get_by_text("Sentence-embedding similarity").wait_for(timeout=LONG)
        _idle(page)
        body = page.inner_text("body")
        assert "Switch heads off" in body and "Hidden states changed by" in body
        frame = page.frame_locator("iframe.attn-switches")
        grid = frame.locator("#grid")
        grid.wait_for(timeout=LONG)
        page.wait_for_timeout(1000)
        page.screenshot(path=str(screenshot_dir / "live-switches-model-view.png"), full_page=True)
        grid.click(position={"x": 58 + 32, "y": 18 + 32})  # layer 1, head 1 (model_view.js: ML, MT, TW)
        page.wait_for_function("() => decodeURIComponent(location.search).includes('off=1-1,6-1,6-2')", timeout=LONG)
        _idle(page)
        page.get_by_text("Sentence-embedding similarity").wait_for(timeout=LONG)
        page.screenshot(path=str(screenshot_dir / "live-switches-after-click.png"), full_page=True)
        assert page.locator("[data-testid='stException']").count() == 0


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_live_switches_show_mask_predictions_for_an_mlm_model(
    streamlit_server, browser, screenshot_dir, tiny_model_dir
):
    folder = quote(str(tiny_model_dir))
    text = quote("The cat [MASK] on the mat.")
    with browser_page(browser, screenshot_dir / "live-mask-failure.png", 1500, 2400) as page:
        page.goto(f"{streamlit_server}/?model={folder}&a={text}&off=1-1,2-2", wait_until="domcontentloaded")
        page.get_by_text("Top predictions at each [MASK]").wait_for(timeout=LONG)
        _idle(page)
        page.screenshot(path=str(screenshot_dir / "live-switches-mask-predictions.png"), full_page=True)
        body = page.inner_text("body")
        assert "Masked-LM loss change" in body and "before" in body and "after" in body
        assert page.locator("[data-testid='stException']").count() == 0


@pytest.mark.browser
@pytest.mark.slow
def test_tour_knockout_step(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "tour-knockout-failure.png", 1500, 1600) as page:
        page.goto(f"{streamlit_server}/tour?step=7", wait_until="domcontentloaded")
        page.get_by_text("What to notice.").wait_for(timeout=LONG)
        _idle(page)
        page.wait_for_function(FIGURES_DRAWN, timeout=LONG)
        page.screenshot(path=str(screenshot_dir / "tour-knockout.png"), full_page=True)
        body = page.inner_text("body")
        assert "is attention to [SEP] a no-op?" in body and "dropping that attention" in body
        assert page.locator("[data-testid='stException']").count() == 0
