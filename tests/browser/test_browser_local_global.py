"""Real browser: the Local vs global page in comparison mode (two tiny BERTs of 2 and 3 layers), Global aggregation
section included, the centres of mass drawn the library's; screenshots in test-output/screenshots/."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import numpy as np
import pytest

from attnlib.analyses.base import run_analysis
from attnlib.analyses.positions import POSITIONS, PositionOptions
from attnlib.core.corpus import read_corpus
from attnlib.core.model import load_model
from attnlib.results.shipped import CLASSROOM_SINGLE
from support.browser import COMPUTED, FIGURES_DRAWN, IDLE, TRACES, browser_page, compute_from_last
from support.tolerances import FORWARD_RTOL

TRACE_NAMES = (  # each figure's trace names and subplot titles
    "() => [...document.querySelectorAll('.js-plotly-plot')]"
    ".map(p => JSON.stringify([...p.data.map(t => t.name), ...(p.layout.annotations || []).map(a => a.text)]))"
)

AGREEMENT_DRAWN = f"() => ({TRACE_NAMES})().some(names => names.includes('Spearman'))"

TABS = (  # the page's tabs (only the open one is drawn) and each tab's heading
    ("Global aggregation", "Global aggregation"),
    ("Centre of mass", "Centre of mass per layer"),
    ("Relative positions", "Relative-position histograms"),
    ("Attention vs attribution", "Attention against attribution"),
)


pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_comparison_mode_draws_both_models(streamlit_server, browser, screenshot_dir, tiny_model_dir, tmp_path):
    """Both models' positions (METHODS §12) and aggregations drawn in every tab, overlaid or side by side; the first
    model's attention centres of mass drawn are the library's, computed here."""
    from support.models import save_tiny_bert

    first, second = str(tiny_model_dir), str(save_tiny_bert(tmp_path / "three-layers", layers=3, seed=1))
    limit, probes = 3, 2
    query = urlencode({"model": first, "cmp": second, "limit": limit, "probes": probes, "tab": "aggregation"})
    with browser_page(browser, screenshot_dir / "failed-local-global-compare.png") as page:
        page.goto(f"{streamlit_server}/local-global?{query}", wait_until="domcontentloaded")
        compute_from_last(page, 4, 180_000)  # positions and aggregation for each model
        page.get_by_text("Measure for the histograms").first.scroll_into_view_if_needed()
        page.wait_for_function(FIGURES_DRAWN, timeout=60_000)
        page.screenshot(path=str(screenshot_dir / "local-global-compare-aggregation-histograms.png"))
        page.wait_for_function(AGREEMENT_DRAWN, timeout=60_000)
        assert page.evaluate(COMPUTED) == 4
        differences = page.get_by_text("largest difference").count()
        names = []
        for i, (tab, heading) in enumerate(TABS):
            if i:
                page.get_by_role("tab", name=tab, exact=True).click()
            page.get_by_role("heading", name=heading).first.scroll_into_view_if_needed(timeout=180_000)
            page.wait_for_function(IDLE, timeout=180_000)
            page.wait_for_function(FIGURES_DRAWN, timeout=60_000)  # those below the screen a moment later
            page.screenshot(path=str(screenshot_dir / f"local-global-compare-{i}.png"))
            assert page.locator("[data-testid='stException']").count() == 0
            names += [json.loads(n) for n in page.evaluate(TRACE_NAMES)]
            if tab == "Centre of mass":
                (centres,) = [f["traces"] for f in page.evaluate(TRACES) if f["ytitle"] == "centre of mass (offset)"]
        both = [n for n in names if any(first in str(x) for x in n) and any(second in str(x) for x in n)]
        assert len(both) >= 8, names  # 4 overlays (positions, aggregation) and 4 side-by-side heatmaps
        assert differences == 2  # positions above the tabs, aggregation in its tab

    lm = load_model(first)
    corpus = read_corpus(CLASSROOM_SINGLE, limit=limit)  # the page's default corpus
    own = run_analysis(POSITIONS, lm, PositionOptions(probes=probes), inputs={"corpus": corpus}).result
    (drawn,) = [t for t in centres if t["name"] == lm.facts.name and t["axis"] == "x"]  # the attention panel
    # a centre of mass is sum_k k h(k) / sum_k h(k) over offsets |k| < n, each h(k) a sum of weights within FORWARD_RTOL
    # of its size: it moves by at most 2 FORWARD_RTOL max|k|
    longest = max(len(lm.tokenizer(c.text_a)["input_ids"]) for c in corpus)
    np.testing.assert_allclose(drawn["y"], own.attention_center_of_mass, rtol=0, atol=2 * FORWARD_RTOL * longest)
