"""The tour: notice sentences follow hand-made numbers (pattern present and absent); the page walks every step.

The slow tier; test_tour.py holds the quick tests."""

from __future__ import annotations

import hashlib

import pytest

from attnlib.present.tour import (
    STEPS,
    entropy_notice,
    heads_notice,
    no_op_notice,
    positions_notice,
    special_notice,
    syntax_notice,
)

pytestmark = pytest.mark.slow


def _walk_tour(model: str | None) -> list[str]:
    """Open the tour (optionally ?model=<folder>), click Next through every step; the notice line of each."""
    from streamlit.testing.v1 import AppTest

    from attnlib.results.shipped import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    if model is not None:
        at.query_params["model"] = model
    at.run()
    at.switch_page("app_pages/tour/page.py").run()
    notices = []
    for step in STEPS:
        assert not at.exception, at.exception
        assert at.header[0].value == f"{step.number}. {step.title}"
        assert at.query_params["step"] == str(step.number)
        assert at.button(key="tour_prev").disabled == (step.number == 1)
        assert at.button(key="tour_next").disabled == (step.number == len(STEPS))
        assert any(f"({step.page or '.'}" in m.value and "model=" in m.value for m in at.markdown), "no page link"
        notices.append(at.success[0].value.removeprefix("**What to notice.** "))
        if step.number < len(STEPS):
            at.button(key="tour_next").click().run()
    at.button(key="tour_prev").click().run()
    before_last = len(STEPS) - 1
    assert at.header[0].value.startswith(f"{before_last}.") and at.query_params["step"] == str(before_last)
    return notices


def _expected_notices(lm, shown: str, with_positions: bool = True) -> list[str | None]:
    """The notice of each step, computed here from the library on the slices the tour documents."""
    from attnlib.analyses.deps import DEPS
    from attnlib.analyses.importance import IMPORTANCE, no_op_sentence
    from attnlib.analyses.registry import analyse
    from attnlib.analyses.special import largest_weight_norm_gap
    from attnlib.core.batches import accumulate
    from attnlib.core.corpus import read_conllu, read_corpus
    from attnlib.present.tour import (
        IMPORTANCE_SLICE,
        POSITIONS_SLICE,
        SLICE,
        SLICE_MIN_COUNT,
        TOUR_OPTIONS,
        norms_notice,
    )
    from attnlib.results.precomputed import shipped_result
    from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV
    from attnlib.stats.gradients import gradient_importance, unavailable_reason
    from attnlib.stats.patterns import PatternAccumulator

    f = lm.facts
    patterns = PatternAccumulator(f.n_layers, f.n_heads)
    accumulate(lm, read_corpus(CLASSROOM_SINGLE)[:20] + read_corpus(CLASSROOM_PAIRS)[:20], [patterns])
    all_pairs = read_corpus(CLASSROOM_PAIRS)
    pairs = all_pairs[:SLICE]
    sha1_pairs = hashlib.sha1(CLASSROOM_PAIRS.read_bytes()).hexdigest()
    shipped = shipped_result("special", f.name, sha1_pairs, len(all_pairs), TOUR_OPTIONS["special"]) is not None
    run = analyse("special", lm, corpus=all_pairs if shipped else pairs, norms=True).result  # what the tour shows
    special = run.special
    norms = norms_notice(largest_weight_norm_gap(special.layers, run.norms.layers), shown)
    reason = unavailable_reason(lm)
    gradients = gradient_importance(lm, pairs) if reason is None else None
    treebank = read_conllu(EWT_DEV)
    sha1 = hashlib.sha1(EWT_DEV.read_bytes()).hexdigest()
    record = shipped_result("deps", f.name, sha1, len(treebank), TOUR_OPTIONS["deps"])
    if record is not None:  # the tour shows the shipped counts (test_precomputed checks them against a fresh run)
        table = DEPS.from_record(record).table
    else:
        table = analyse("deps", lm, conllu=treebank[:SLICE], min_count=SLICE_MIN_COUNT).result.table
    positions = None
    if with_positions:
        positions = positions_notice(
            analyse("positions", lm, corpus=CLASSROOM_SINGLE, limit=POSITIONS_SLICE).result, shown
        )
    importance = shipped_result("importance", f.name, sha1_pairs, len(all_pairs), TOUR_OPTIONS["importance"])
    if importance is not None:  # shipped for the default model (test_precomputed checks it)
        knockout = no_op_sentence(IMPORTANCE.read(importance, TOUR_OPTIONS["importance"]), shown)
    else:
        knockout = no_op_sentence(
            analyse("importance", lm, corpus=all_pairs[:IMPORTANCE_SLICE], knockout=True).result, shown
        )
    return [
        heads_notice(patterns.scores(), shown).sentence,
        special_notice(special, shown),
        no_op_notice(special, gradients, reason, shown, [norms]),
        entropy_notice(special, shown),
        syntax_notice(table, shown),
        positions,
        knockout,
    ]


@pytest.fixture(scope="module")
def default_notices(minilm):
    """The default model's notices as the page shows them, and as the library gives them (step 6 not recomputed)."""
    return _walk_tour(None), _expected_notices(minilm, "all-MiniLM-L6-v2", with_positions=False)


@pytest.mark.slow
def test_tour_walks_every_step_for_the_default_model(default_notices):
    shown, expected = default_notices
    for step, notice, want in zip(STEPS, shown, expected):
        assert notice.startswith("In all-MiniLM-L6-v2, "), (step.key, notice)
        assert want is None or notice == want, (step.key, notice, want)
    assert "no trained masked-language-model head" in shown[2]  # the default model has no MLM head: it says so


@pytest.mark.slow
def test_tour_walks_every_step_for_a_tiny_model(default_notices, tiny_model, tiny_model_dir, one_thread):
    shown = _walk_tour(str(tiny_model_dir))
    assert shown == _expected_notices(tiny_model, tiny_model_dir.name)
    assert all(a != b for a, b in zip(default_notices[0], shown)), "a notice does not depend on the model"
