"""Every page and every Tour step with a tiny model of each family: computed on request, never an exception."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.present.tour import STEPS
from attnlib.results.shipped import ROOT
from support.pages import PAGES, run_computing

pytestmark = pytest.mark.slow

# The families whose layers differ most (local windows and pre-LN, relative terms, shared layers, rotary positions);
# BERT's layout is every page's own test, and the Live page is drawn for every family in tests/app/test_live.py.
# The decoders (METHODS §18) whose layers differ most: GPT-2 (no BOS, Conv1D), Gemma 2 (a BOS, grouped-query heads, a
# sliding layer, normed attention outputs, soft-capped scores), Qwen3 (per-head q/k norms), Phi-3 (fused qkv and
# gate-up projections), OPT (a feed-forward on [batch * n, hidden]), GPT-NeoX (a parallel residual) and OLMo 2 (no norm
# before attention, norms after each sublayer, q/k norms over the whole projections).
DISTINCT_FAMILIES = ["modernbert", "deberta", "deberta-v2", "mpnet", "albert", "roformer"]
DISTINCT_FAMILIES += ["gpt2", "gemma2", "qwen3", "phi3", "opt", "gpt-neox", "olmo2"]


@pytest.mark.parametrize("family_dir", DISTINCT_FAMILIES, indirect=True)
def test_every_page_and_tour_step_opens(family_dir):
    """Each family on each page (on four inputs of each corpus) and at each Tour step: what the family gives is drawn,
    what it cannot give is said in words; nothing raises."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["model"], at.query_params["limit"] = str(family_dir), "4"
    run_computing(at, "start")
    for page in PAGES:
        at.switch_page(page)
        run_computing(at, page)
        assert at.title, page
    for step in range(1, len(STEPS) + 1):
        at.switch_page("app_pages/tour/page.py")
        at.query_params["step"] = str(step)
        at.session_state["tour_step"] = step
        run_computing(at, f"tour step {step}")
