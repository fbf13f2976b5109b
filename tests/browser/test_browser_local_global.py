"""Real browser: the Local vs global page in comparison mode (two tiny BERTs of 2 and 3 layers), Global aggregation
section included; screenshots in test-output/screenshots/."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from support.browser import COMPUTED, FIGURES_DRAWN, IDLE, browser_page, compute_from_last

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
    from support.models import save_tiny_bert

    first, second = str(tiny_model_dir), str(save_tiny_bert(tmp_path / "three-layers", layers=3, seed=1))
    query = urlencode({"model": first, "cmp": second, "limit": 3, "probes": 2, "tab": "aggregation"})
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
        both = [n for n in names if any(first in str(x) for x in n) and any(second in str(x) for x in n)]
        assert len(both) >= 8, names  # 4 overlays (positions, aggregation) and 4 side-by-side heatmaps
        assert differences == 2  # positions above the tabs, aggregation in its tab
