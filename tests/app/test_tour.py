"""The tour: notice sentences follow hand-made numbers (pattern present and absent); the page walks every step."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from attnlib.analyses.deps import DependencyRow, DependencyTable
from attnlib.analyses.positions import CORRELATIONS, PositionOptions, PositionsResult
from attnlib.core.model import TRAINED_MODEL
from attnlib.present.tour import (
    LINK_KEYS,
    STEPS,
    entropy_notice,
    heads_notice,
    induction_notice,
    induction_prompt,
    induction_route,
    layer_span,
    no_op_notice,
    page_link,
    pct_range,
    positions_notice,
    route_notice,
    special_notice,
    step_number,
    syntax_notice,
)
from attnlib.stats.gradient import GradientImportanceResult
from attnlib.stats.patterns import PATTERNS
from attnlib.stats.special import STAT_KEYS, SpecialTokenResult
from ui.widgets.page_tabs import HEAD_IMPORTANCE, SPECIAL_TOKENS

M = "model-x"


def _special(layer_means: dict[str, list[float]], uniform: float = 2.0) -> SpecialTokenResult:
    """A result whose two heads per layer are mean -/+ 0.01 around the given layer means (other stats 0)."""
    n_layers = len(next(iter(layer_means.values())))
    heads = {key: np.zeros((n_layers, 2)) for key in STAT_KEYS}
    for key, means in layer_means.items():
        heads[key] = np.array(means)[:, None] + np.array([-0.01, 0.01])
    return SpecialTokenResult(10, heads, uniform)


# ---------- formatting and navigation ------------------------------------------------------------------------------


def test_layer_span_and_ranges_are_one_based_words():
    assert layer_span([2]) == "layer 3"
    assert layer_span([1, 2, 3, 4]) == "layers 2 to 5"
    assert layer_span([4, 0, 2]) == "layers 1, 3 and 5"
    assert pct_range([0.523, 0.61, 0.55]) == "52 to 61%"
    assert pct_range([0.521, 0.524]) == "52%"


@pytest.mark.parametrize("raw, expected", [("3", 3), (None, 1), ("x", 1), ("0", 1), ("99", len(STEPS)), (" 6 ", 6)])
def test_step_number_is_clamped(raw, expected):
    assert step_number(raw) == expected


def test_page_link_builds_every_url_in_one_place():
    assert page_link("special-tokens", model="m", corpus="c.tsv") == "special-tokens?model=m&corpus=c.tsv"
    assert page_link("", model="m", a="I went.", b=None, layer=2) == "./?model=m&a=I+went.&layer=2"
    with pytest.raises(ValueError, match="unknown URL keys"):
        page_link("special-tokens", modle="m")
    assert set(LINK_KEYS) == {"model", "a", "b", "layer", "head", "heads", "view", "corpus", "norms", "tab", "text"}
    assert page_link("special-tokens", model="m", tab="norms") == "special-tokens?model=m&tab=norms"
    assert [s.tab for s in STEPS] == [
        None,
        "shares",
        "norms",
        "entropy",
        None,
        None,
        "noop",
        "training",
        None,
    ]  # the tab each step opens
    assert {s.tab for s in STEPS if s.tab and s.page == "special-tokens"} <= set(SPECIAL_TOKENS)  # its tabs' URL texts
    assert STEPS[6].page == "head-importance" and STEPS[6].tab in HEAD_IMPORTANCE


def test_steps_are_numbered_in_order_with_distinct_keys():
    assert [s.number for s in STEPS] == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert len({s.key for s in STEPS}) == 9 and all(s.title and s.explanation for s in STEPS)


# ---------- step 1 -------------------------------------------------------------------------------------------------


def _scores(values: dict[str, tuple[int, int, float]], fill: float = 0.1) -> np.ndarray:
    scores = np.full((len(PATTERNS), 3, 4), fill)
    for pattern, (layer, head, value) in values.items():
        scores[list(PATTERNS).index(pattern), layer, head] = value
    return scores


def test_heads_notice_names_the_best_heads_when_present():
    notice = heads_notice(_scores({"prev": (1, 0, 0.9), "next": (0, 1, 0.7), "broad": (2, 3, 0.95)}), M)
    assert {p: pick.label for p, pick in notice.picks.items()} == {"prev": "2-1", "next": "1-2", "broad": "3-4"}
    assert notice.sentence == (
        "In model-x, head 2-1 gives 90% of its attention to the previous token; head 1-2 gives 70% of its "
        "attention to the next token; head 3-4 spreads its attention almost evenly (95% of uniform entropy). "
        "Three heads of one model, three different jobs."
    )


def test_heads_notice_says_when_the_pattern_is_absent():
    notice = heads_notice(_scores({"prev": (0, 2, 0.3), "broad": (1, 1, 0.6)}), M)
    assert notice.present == {"prev": False, "next": False, "broad": False}
    assert "no head gives more than half its attention to the previous token (the best, 1-3, gives 30%)" in (
        notice.sentence
    )
    assert "no head is broad (the broadest, 2-2, reaches 60% of uniform entropy)" in notice.sentence
    assert "three different jobs" not in notice.sentence


# ---------- step 2 -------------------------------------------------------------------------------------------------


def test_special_notice_cls_dominant():
    special = _special({"cls": [0.2, 0.523, 0.61], "sep": [0.1, 0.3, 0.2], "punct": [0.05, 0.1, 0.1]})
    assert (
        special_notice(special, M) == "In model-x, [CLS], not [SEP], takes most attention: 52 to 61% in layers 2 to 3."
    )


def test_special_notice_sep_dominant_as_in_clark():
    special = _special({"cls": [0.2, 0.1, 0.1, 0.1], "sep": [0.1, 0.7, 0.4, 0.56], "punct": [0.05, 0.1, 0.1, 0.1]})
    assert special_notice(special, M) == (
        "In model-x, [SEP] takes most attention, as in Clark et al.: 56 to 70% in layers 2 and 4."
    )


def test_special_notice_absent():
    special = _special({"cls": [0.2, 0.4], "sep": [0.3, 0.1], "punct": [0.05, 0.25]})
    assert special_notice(special, M) == (
        "In model-x, no single kind of token takes most attention in any layer; the peaks: [CLS] 40% (layer 2), "
        "[SEP] 30% (layer 1), punctuation 25% (layer 2)."
    )


# ---------- step 3 -------------------------------------------------------------------------------------------------


def test_no_op_notice_present_with_gradients_and_extra_sentence():
    special = _special({"sep_to_sep": [0.3, 0.95, 0.9]})
    gradients = GradientImportanceResult(5, sep=np.array([[1.0], [0.2], [3.0]]), all=np.array([[0.5], [0.4], [1.0]]))
    sentence = no_op_notice(special, gradients, None, M, ["Norms say more."])
    assert sentence == (
        "In model-x, [SEP] rows send 90 to 95% of their attention to [SEP] in layers 2 to 3. "
        "The loss is less sensitive to attention to [SEP] than to attention in general in layer 2. Norms say more."
    )


def test_no_op_notice_absent_and_without_gradients():
    special = _special({"sep_to_sep": [0.1, 0.2]})
    sentence = no_op_notice(special, None, "model-x has no trained masked-language-model head.", M)
    assert sentence == (
        "In model-x, [SEP] rows send at most 20% of their attention to [SEP] (layer 2): [SEP] is not where they "
        "park it. Gradient importance: model-x has no trained masked-language-model head."
    )
    gradients = GradientImportanceResult(5, sep=np.ones((2, 1)), all=np.ones((2, 1)) * 0.5)
    assert no_op_notice(special, gradients, None, M).endswith(
        "In no layer is the loss less sensitive to attention to [SEP] than to attention in general."
    )


# ---------- step 4 -------------------------------------------------------------------------------------------------


def test_entropy_notice_broad_heads_in_lower_layers():
    special = _special({"entropy": [1.85, 1.0, 0.3]}, uniform=2.0)  # heads 1.84/1.86, 0.99/1.01, 0.29/0.31
    assert entropy_notice(special, M) == (
        "In model-x, attention is broadest in layer 1 (1.85 nats, 92% of uniform's 2.00) and most focused in "
        "layer 3 (0.30 nats, 15%). 2 of 6 heads are broad (above 80% of uniform), mostly in the lower layers, "
        "as Clark et al. found for BERT."
    )


def test_entropy_notice_upper_and_absent():
    upper = _special({"entropy": [0.3, 1.0, 1.85]}, uniform=2.0)
    assert entropy_notice(upper, M).endswith(
        "2 of 6 heads are broad (above 80% of uniform), mostly in the upper layers."
    )
    focused = _special({"entropy": [0.5, 1.2]}, uniform=2.0)
    assert entropy_notice(focused, M).endswith("No head is broad: every head stays below 80% of uniform.")


def test_entropy_notice_even_layers_and_even_spread():
    flat = _special({"entropy": [1.90, 1.906]}, uniform=2.0)  # 95.0% and 95.3% of uniform; every head above 1.6
    assert entropy_notice(flat, M) == (
        "In model-x, every layer has about the same mean entropy: 1.90 to 1.91 nats, 95% of uniform's 2.00. "
        "4 of 4 heads are broad (above 80% of uniform), as many in the upper as in the lower layers."
    )


# ---------- step 5 -------------------------------------------------------------------------------------------------


def _row(relation: str, accuracy: float, baseline: float, layer: int = 0, head: int = 0) -> DependencyRow:
    return DependencyRow(relation, 100, layer, head, "dep->head", accuracy, -1, baseline)


def test_syntax_notice_names_the_clearest_wins():
    rows = [
        _row("all", 0.4, 0.3),
        _row("nsubj", 0.5, 0.45, 1, 2),
        _row("obj", 0.8, 0.4, 2, 0),
        _row("amod", 0.6, 0.7),
        _row("det", 0.9, 0.6, 0, 3),
    ]
    table = DependencyTable(rows, 40, 500, 0)
    assert syntax_notice(table, M) == (
        "In model-x, a single head beats the best fixed offset for 3 of 4 relations, most clearly obj (head 3-1, "
        "80% against 40% for offset -1); det (head 1-4, 90% against 60% for offset -1); nsubj (head 2-3, 50% "
        "against 45% for offset -1)."
    )


def test_syntax_notice_absent_and_empty():
    table = DependencyTable([_row("all", 0.2, 0.3), _row("obj", 0.3, 0.35), _row("det", 0.1, 0.6)], 40, 500, 0)
    assert syntax_notice(table, M) == (
        "In model-x, no single head beats the best fixed offset for any of the 2 relations; the closest is obj "
        "(head 1-1, 30% against 35% for offset -1)."
    )
    assert "no relation has enough dependents" in syntax_notice(DependencyTable([_row("all", 0.2, 0.3)], 1, 5, 0), M)


# ---------- step 6 -------------------------------------------------------------------------------------------------


def _positions(correlation_by_layer: list[float], attention_com: list[float], attribution_com: list[float]):
    n_layers = len(correlation_by_layer)
    per_head = np.array(correlation_by_layer)[:, None] + np.array([-0.1, 0.0, 0.1])  # median = the layer value
    zeros = np.zeros((n_layers, 3, 3))
    return PositionsResult(
        n_inputs=3,
        n_skipped=0,
        n_longer=0,
        head_dim=8,
        offsets=np.array([-1, 0, 1]),
        offset_counts=np.array([2, 3, 2]),
        attention_histograms=zeros,
        attribution_histograms=zeros,
        attention_head_com=np.repeat(np.array(attention_com)[:, None], 3, axis=1),
        attribution_head_com=np.repeat(np.array(attribution_com)[:, None], 3, axis=1),
        correlation={name: per_head for name in CORRELATIONS},
        options=PositionOptions(),
    )


def test_positions_notice_falling_correlation():
    result = _positions([0.8, 0.6, 0.3], [-0.5, -3.0, -1.0], [-0.2, -0.4, -0.5])
    assert positions_notice(result, M) == (
        "In model-x, attention agrees less with attribution as depth grows: the median correlation falls from "
        "0.80 in layer 1 to 0.30 in layer 3. It is first below 0.5 in layer 3 (Pascual et al.: after four layers "
        "in BERT-base). The centres of mass are furthest apart in layer 2: attention at -3.00 tokens, "
        "attribution at -0.40."
    )


def test_positions_notice_lowest_inside_and_never_below_half():
    result = _positions([0.9, 0.55, 0.7], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert positions_notice(result, M) == (
        "In model-x, attention agrees less with attribution as depth grows: the median correlation falls from "
        "0.90 in layer 1 to 0.55 in layer 2 (0.70 in layer 3). The centres of mass are furthest apart in layer 1: "
        "attention at +0.00 tokens, attribution at +0.00."
    )


def test_positions_notice_not_falling():
    result = _positions([0.4, 0.5, 0.43], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0])
    assert positions_notice(result, M) == (
        "In model-x, the median correlation of attention with attribution does not fall with depth: "
        "0.40 in layer 1, at least 0.40 in every layer, 0.43 in layer 3. The centres of mass are furthest apart "
        "in layer 3: attention at +1.00 tokens, attribution at +0.00."
    )


# ---------- the page: every step for the default model and for tiny random models ---------------------------------


def test_norms_notice_follows_the_gap():
    from attnlib.analyses.special import WeightNormGap
    from attnlib.present.tour import norms_notice

    small_vectors = norms_notice(WeightNormGap("cls", 2, 0.60, 0.17), "M")
    assert small_vectors == (
        "In M, [CLS] in layer 3 takes 60% of the attention weights but only 17% of what the heads actually move "
        "(the norms): large weights on small vectors, close to a no-op."
    )
    same_story = norms_notice(WeightNormGap("sep", 0, 0.10, 0.08), "M")
    assert same_story.startswith("In M, weights and norms tell the same story") and "[SEP] in layer 1" in same_story
    assert "10% of the weights against 8%" in same_story
    large_vectors = norms_notice(WeightNormGap("sep", 4, 0.05, 0.30), "M")
    assert (
        "same story" not in large_vectors
        and "[SEP] in layer 5 takes 5% of the attention weights but 30%" in large_vectors
    )
    assert "carries more than its weight says" in large_vectors
    assert norms_notice(None, "M") == "In M, no layer has a [CLS] or [SEP] share to compare."


def test_induction_notice_names_the_jump_and_says_when_there_is_none():
    forming = induction_notice([0, 100, 200, 400], [0.02, 0.05, 0.55, 0.61], [0.01, 0.1, 1.4, 1.9], "M")
    assert forming.startswith("In M, the largest induction score goes from 0.02 at step 0 to 0.61 at step 400")
    assert "in-context gain from 0.01 to 1.90 nat" in forming
    assert "between step 100 and step 200 (0.05 to 0.55)" in forming  # the largest of the jumps 0.03, 0.50, 0.06
    flat = induction_notice([0, 100], [0.02, 0.15], [-0.001, 0.1], "M")  # a rise of 0.13 < INDUCTION_RISE
    assert "gain from 0.00 to 0.10 nat" in flat  # not -0.00
    assert flat.endswith("no induction head formed in these checkpoints.") and "jump" not in flat


# ---------- step 9 -------------------------------------------------------------------------------------------------


def _routes(attention: dict[tuple[int, int, int], list[float]], n: int = 6, layers: int = 2) -> dict:
    """A routes JSON of n positions and the given attention edges {(layer, key, query): each head's share}, its
    prediction at the last position."""
    nodes = [{"id": f"E_{i}", "kind": "E", "layer": None, "position": i} for i in range(n)]
    nodes += [{"id": f"{k}{l}_{i}", "kind": k, "layer": l, "position": i} for l in range(layers) for k in "AFR"
              for i in range(n)]  # fmt: skip
    edges = [
        {"source": "E_" + str(j) if l == 0 else f"R{l - 1}_{j}", "target": f"A{l}_{i}", "kind": "attention",
         "weight": sum(heads), "heads": heads}
        for (l, j, i), heads in attention.items()
    ]  # fmt: skip
    return {"tokens": [f"t{i}" for i in range(n)], "nodes": nodes, "edges": edges,
            "route": {"position": n - 1, "edges": list(range(len(edges)))}}  # fmt: skip


def test_induction_route_reads_the_layer_where_the_key_gives_most():
    routes = _routes(
        {
            (0, 2, 3): [0.0, 0.1, 0.6],  # layer 0: the key 3 reads its previous token 2, mostly through head 0-2
            (0, 3, 3): [0.2, 0.0, 0.0],
            (0, 3, 5): [0.3, 0.0, 0.0],  # layer 0: key 3 gives the last position 0.3
            (1, 3, 5): [0.5, 0.1, 0.3],  # layer 1: 0.9, carried by heads 1-0, 1-2, 1-1
            (1, 4, 5): [0.05, 0.0, 0.0],
        }
    )
    found = induction_route(routes, 3)
    assert found.layer == 1 and found.key == 3 and found.share == pytest.approx(0.9)
    assert found.heads == ((0, 0.5), (2, 0.3), (1, 0.1))
    assert found.previous_share == pytest.approx(0.7) and found.previous_head == (2, 0.6)
    sentence = route_notice(found, M, 4, 2, 0.04)
    assert sentence == (
        "In model-x, on 4 random one-token words then their first 2 again, the route to the prediction runs from the "
        "token after the earlier occurrence of the last word: in layer 2, 0.90 of what the last position's attention "
        "node receives comes from that token, carried by heads 2-1, 2-3, 2-2 (0.50, 0.30, 0.10). In layer 1, that "
        "token takes 0.70 from the token before it, mostly through head 1-3 (0.60): the two steps of an induction "
        "circuit."
    )
    lone = induction_route(_routes({(0, 3, 5): [0.0, 0.02, 0.0]}), 3)  # no head above the threshold: the largest
    assert lone.layer == 0 and lone.previous_head is None
    assert "carried by head 1-2 (0.02)." in route_notice(lone, M, 4, 2, 0.04)
    nothing = induction_route(_routes({(1, 4, 5): [0.5, 0.0, 0.0]}), 3)
    assert nothing.layer == -1 and "no layer's edge" in route_notice(nothing, M, 4, 2, 0.04)
    assert induction_prompt(["a", "b", "c"], 2) == "a b c a b"


@pytest.mark.slow
def test_the_trained_decoders_route_runs_through_its_induction_heads():
    """On the shipped trained decoder: the Tour's prompt's route reads the token after the earlier occurrence in layer
    1 (0-based) through heads 1-0, 1-1 and 1-2, and that token its previous token in layer 0 through head 0-2."""
    from attnlib.analyses.registry import analyse
    from attnlib.analyses.roles import probe_words
    from attnlib.core.model import load_model
    from attnlib.present.tour import INDUCTION_PROMPTS

    lm = load_model(TRAINED_MODEL)
    (words, again), _ = INDUCTION_PROMPTS
    chosen = probe_words(lm.tokenizer, words)
    text = induction_prompt(chosen, again)
    routes = analyse("routes", lm, text=text).result.to_json()
    assert routes["prediction"]["token"] == "Ġ" + chosen[again]  # the model continues the repeat
    found = induction_route(routes, again + 1)  # BOS, then one token per word: the word after the earlier occurrence
    assert found.layer == 1 and found.share > 0.8
    assert {h for h, v in found.heads if v > 0.04} == {0, 1, 2}
    assert found.previous_head is not None and found.previous_head[0] == 2 and found.previous_share > 0.5


# ---------- slow tests


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
    from attnlib.stats.gradient import gradient_importance, unavailable_reason
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
        trained_notice(),
        trained_route_notice(),
    ]


def trained_route_notice() -> str:
    """Step 9's notice, whatever the model: the trained decoder's routes on the two induction prompts."""
    from attnlib.analyses.registry import analyse
    from attnlib.analyses.roles import probe_words
    from attnlib.analyses.routes import RoutesOptions
    from attnlib.core.model import TRAINED_MODEL, load_model
    from attnlib.present.tour import INDUCTION_PROMPTS

    lm = load_model(TRAINED_MODEL)
    found = []
    for words, again in INDUCTION_PROMPTS:
        routes = analyse("routes", lm, text=induction_prompt(probe_words(lm.tokenizer, words), again)).result.to_json()
        found.append(induction_route(routes, again + 1))
    (words, again), (other_words, other_again) = INDUCTION_PROMPTS
    threshold = RoutesOptions().threshold
    return route_notice(found[0], TRAINED_MODEL, words, again, threshold, (other_words, other_again, found[1]))


def trained_notice() -> str:
    """Step 8's notice, whatever the model: the trained decoder's checkpoints probed by the library."""
    from attnlib.analyses.registry import analyse
    from attnlib.analyses.roles import checkpoint_table
    from attnlib.core.model import TRAINED_MODEL, checkpoints_of

    found = analyse("roles", TRAINED_MODEL, checkpoints=tuple(checkpoints_of(TRAINED_MODEL))).result
    table = checkpoint_table(found)
    return induction_notice(list(table["step"]), list(table["max_induction"]), list(table["in_context_gain"]),
                            TRAINED_MODEL)  # fmt: skip


@pytest.fixture(scope="module")
def default_notices(minilm):
    """The default model's notices as the page shows them, and as the library gives them (step 6 not recomputed)."""
    return _walk_tour(None), _expected_notices(minilm, "all-MiniLM-L6-v2", with_positions=False)


@pytest.mark.slow
def test_tour_walks_every_step_for_the_default_model(default_notices):
    shown, expected = default_notices
    for step, notice, want in zip(STEPS, shown, expected):
        trained = step.key in ("induction", "routes")  # steps 8 and 9: the trained decoder
        model = TRAINED_MODEL if trained else "all-MiniLM-L6-v2"
        assert notice.startswith(f"In {model}, "), (step.key, notice)
        assert want is None or notice == want, (step.key, notice, want)
    assert "no trained masked-language-model head" in shown[2]  # the default model has no MLM head: it says so


@pytest.mark.slow
def test_tour_walks_every_step_for_a_tiny_model(default_notices, tiny_model, tiny_model_dir, one_thread):
    shown = _walk_tour(str(tiny_model_dir))
    assert shown == _expected_notices(tiny_model, tiny_model_dir.name)
    steps = [s.key for s in STEPS]
    same = [k for k, a, b in zip(steps, default_notices[0], shown) if a == b]
    assert same == ["induction", "routes"], "a notice does not depend on the model"  # steps 8, 9: the trained decoder
