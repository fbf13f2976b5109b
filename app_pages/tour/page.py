"""Tour: the papers' findings one step per screen, each with the loaded model's figure and what to notice in it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app_pages.deps.dependency_example import example_maps
from attnlib.analyses.circuit import INDUCTION_PAIRS
from attnlib.analyses.deps import DIRECTIONS, head_on_sentence
from attnlib.analyses.gradient import GradientImportance, unavailable_reason
from attnlib.analyses.importance import CHANGES, AblationUnavailable, HeadImportance, no_op_sentence
from attnlib.analyses.patch import PatchOptions
from attnlib.analyses.positions import CORRELATIONS, PositionsResult
from attnlib.analyses.registry import analysis_named
from attnlib.analyses.roles import LINK_REPEAT, RolesOptions, checkpoint_table, head_patterns, probe_words
from attnlib.analyses.routes import RouteGraph, RoutesOptions
from attnlib.analyses.special import SpecialTokenResult, SpecialTokens, largest_weight_norm_gap
from attnlib.core.corpus import Sentence
from attnlib.core.model import TRAINED_MODEL, checkpoints_of
from attnlib.present.tour import (
    IMPORTANCE_SLICE,
    INDUCTION_PROMPTS,
    NO_OP_NAMES,
    POSITIONS_SLICE,
    SHARE_NAMES,
    SLICE,
    SLICE_MIN_COUNT,
    STEPS,
    TOUR_CORPORA,
    TOUR_OPTIONS,
    InductionRoute,
    Step,
    circuit_notice,
    entropy_notice,
    head_name,
    heads_notice,
    induction_notice,
    induction_prompt,
    induction_route,
    no_op_notice,
    norms_notice,
    page_link,
    positions_notice,
    route_notice,
    special_notice,
    step_number,
    syntax_notice,
    syntax_rows,
)
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, corpus_slug
from attnlib.views.deps import arc_diagram
from attnlib.views.head_view import head_view_html
from attnlib.views.importance import no_op_scatter
from attnlib.views.norms import weights_vs_norms_figure
from attnlib.views.positions import center_of_mass_chart, median_correlation_chart
from attnlib.views.roles import training_figure
from attnlib.views.special import entropy_figure, gradient_figure, layer_lines_with_head_dots
from ui.sources.corpus_picker import shipped_corpus
from ui.sources.live_inputs import DEFAULT_A, DEFAULT_B, cached_run, pretty_token
from ui.sources.model_sidebar import current_model, model_named
from ui.sources.result_source import Bar, computed, shipped
from ui.widgets.data_table import data_table
from ui.widgets.family_notes import encoder_part_notes, unsupported_for
from ui.widgets.plotly_figure import plotly_figure
from ui.widgets.progress import progress

KEY = "tour"
NORM_CLASSES = ("cls", "sep", "punct", "other")
PROJECTOR_FONT = 18
PROJECTOR_HEIGHT = 540
ROUTE_OPTIONS = RoutesOptions()  # step 9: METHODS §21's default threshold and mode, the command's
EXAMPLE_MAX_WORDS = 16  # step 5's example sentence must read on a projector
TITLES = {"special": "Special tokens", "deps": "Dependency heads", "positions": "Attribution (estimate mode)",
          "importance": "Head importance", "gradient": "Gradient importance"}  # fmt: skip


# ---------- results: shipped for the model, else computed once on a slice --------------------------------------------


@dataclass
class Sourced:
    """A result and where it came from, in words."""

    value: object
    source: str
    shipped: bool = True  # else computed here on a slice


def _slice_source(n: int, path: Path) -> str:
    return f"computed here on the first {n} inputs of {path.name}"


def _on_slice(analysis: str, model_name: str, n: int) -> Any:
    """The tour's analysis on the first n inputs of its corpus, computed once per model (the skeleton's computation)."""
    corpus = shipped_corpus(TOUR_CORPORA[analysis])
    inputs = {analysis_named(analysis).sources[0]: corpus.inputs[:n]}
    options = TOUR_OPTIONS[analysis]
    found = computed(analysis, model_name, f"{corpus.fingerprint}:first {n}", options, inputs, Bar(TITLES[analysis]))
    return found.result


def _shipped_else_slice(analysis: str, model_name: str, n: int) -> Sourced:
    """An analysis's shipped result on its tour corpus for this model, else computed on the first n inputs."""
    found = shipped(analysis, model_name, shipped_corpus(TOUR_CORPORA[analysis]), TOUR_OPTIONS[analysis])
    if found is not None:
        run, provenance = found
        return Sourced(run.result, provenance)
    return Sourced(_on_slice(analysis, model_name, n), _slice_source(n, TOUR_CORPORA[analysis]), shipped=False)


def special_result(model_name: str) -> Sourced:
    """`special` (with norms) on the classroom pairs: shipped, else computed on a slice."""
    return _shipped_else_slice("special", model_name, SLICE)


def deps_result(model_name: str) -> Sourced:
    """`deps` on gold EWT dev, with the minimum count of its table: shipped, else computed on a slice."""
    got = _shipped_else_slice("deps", model_name, SLICE)
    min_count = TOUR_OPTIONS["deps"].min_count if got.shipped else SLICE_MIN_COUNT  # type: ignore[attr-defined]
    return Sourced((got.value.counts, min_count), got.source, got.shipped)  # type: ignore[attr-defined]


def positions_result(model_name: str) -> Sourced:
    """`positions` in estimate mode on the classroom sentences: shipped, else computed on a slice."""
    return _shipped_else_slice("positions", model_name, POSITIONS_SLICE)


@st.cache_data(max_entries=8, show_spinner=False)
def pattern_scores(model_name: str) -> np.ndarray:
    """Head-finder scores [patterns, layers, heads] on the first sentences and pairs of the classroom set."""
    inputs = (
        shipped_corpus(CLASSROOM_SINGLE).inputs[: SLICE // 2] + shipped_corpus(CLASSROOM_PAIRS).inputs[: SLICE // 2]
    )
    with progress("Head finder") as report:
        return head_patterns(model_named(model_name), inputs, report).scores()


def gradient_result(model_name: str) -> GradientImportance | None:
    """The `gradient` analysis on the special-token slice, or None when the model has no trained masked-LM head."""
    if unavailable_reason(model_named(model_name)) is not None:
        return None
    return _on_slice("gradient", model_name, SLICE)


# ---------- drawing -------------------------------------------------------------------------------------------------


def _show(fig: go.Figure, name: str) -> None:
    """A figure at projector size."""
    big, bigger = PROJECTOR_FONT, PROJECTOR_FONT + 4
    fig.update_layout(
        font_size=big,
        title_font_size=bigger,
        legend_font_size=big,
        height=max(fig.layout.height or 0, PROJECTOR_HEIGHT),
    )
    fig.update_xaxes(tickfont_size=big, title_font_size=big)
    fig.update_yaxes(tickfont_size=big, title_font_size=big)
    fig.update_annotations(font_size=big)
    fig.update_traces(textfont_size=big, selector=dict(mode="text"))
    plotly_figure(fig, key=f"{KEY}_{name}")


def _notice(sentence: str, source: str, link: str) -> None:
    """The "what to notice" line, where the numbers come from, and the link to the full page."""
    st.success(f"**What to notice.** {sentence}", icon=":material/lightbulb:")
    st.caption(f"Numbers: {source}.")
    st.markdown(f"[Open the full page in this state]({link})")


def render_heads(model_name: str, shown: str) -> None:
    """Step 1: the best previous-token, next-token and broad heads on the tutorial pair."""
    notice = heads_notice(pattern_scores(model_name), shown)
    result = cached_run(model_name, DEFAULT_A, DEFAULT_B)
    columns = st.columns(len(notice.picks))
    names = {"prev": "previous token", "next": "next token", "broad": "broad"}
    for column, (pattern, pick) in zip(columns, notice.picks.items()):
        with column:
            st.markdown(f"#### Head {pick.label}: {names[pattern]} ({pick.score:.2f})")
            html = head_view_html(
                result.attentions[pick.layer], result.tokens, [pick.head], pick.layer, result.segments
            )
            st.iframe(html, height="content")
    best = notice.picks.get("prev") or next(iter(notice.picks.values()))
    link = page_link(
        STEPS[0].page, model=model_name, a=DEFAULT_A, b=DEFAULT_B, view="head", layer=best.layer + 1,
        head=best.head + 1,
    )  # fmt: skip
    source = f"computed here on the first {SLICE // 2} inputs of {CLASSROOM_SINGLE.name} and of {CLASSROOM_PAIRS.name}"
    _notice(notice.sentence, source, link)


def render_special(model_name: str, shown: str) -> None:
    """Step 2: share of attention to [CLS], [SEP], punctuation and the rest, per layer."""
    got = special_result(model_name)
    special: SpecialTokenResult = got.value.special  # type: ignore[attr-defined]
    shares = {k: special.heads[k] for k in SHARE_NAMES}
    _show(layer_lines_with_head_dots(shares, SHARE_NAMES, "Share of attention per layer", "share"), "shares")
    _notice(special_notice(special, shown), got.source, _corpus_link(STEPS[1], model_name, "special"))


@dataclass
class Panel:
    """One part of the no-op step: a figure or a message, and sentences for the notice."""

    figure: go.Figure | None = None
    message: str | None = None
    notice: list[str] = field(default_factory=list)


def _gradient_panel(model_name: str) -> tuple[Panel, GradientImportance | None, str | None]:
    reason = unavailable_reason(model_named(model_name))
    gradients = gradient_result(model_name) if reason is None else None
    if gradients is None:
        return Panel(message="No gradient importance for this model: the line below says why."), None, reason
    layers = gradients.layers
    return Panel(figure=gradient_figure(layers["sep"], layers["all"])), gradients, None


def _norms_panel(result: SpecialTokens, shown: str, model_name: str) -> Panel:
    """Weights against value-weighted norms per token class (Kobayashi et al. Fig. 2, METHODS §11)."""
    if result.norms is None:
        reason = unsupported_for(model_name, "norms")
        return Panel(message=reason or "This result has no norms: open Special tokens to compute them.")
    weights = {key: result.special.heads[key] for key in NORM_CLASSES}
    norms = {key: result.norms.heads[key] for key in NORM_CLASSES}
    gap = largest_weight_norm_gap(result.special.layers, result.norms.layers)
    return Panel(weights_vs_norms_figure(weights, norms, "Weights against norms"), notice=[norms_notice(gap, shown)])


def render_no_op(model_name: str, shown: str) -> None:
    """Step 3: [SEP] attending to itself, gradient importance; further panels (e.g. norms) are appended to `panels`.
    A decoder's step 3 is the sink test, answered from the first-token knockouts."""
    if model_named(model_name).facts.causal:
        render_knockout(model_name, shown, STEPS[2])
        return
    got = special_result(model_name)
    special: SpecialTokenResult = got.value.special  # type: ignore[attr-defined]
    nop = {k: special.heads[k] for k in NO_OP_NAMES}
    sep_panel = Panel(layer_lines_with_head_dots(nop, NO_OP_NAMES, "Attention to [SEP]", "mass to [SEP]"))
    gradient_panel, gradients, reason = _gradient_panel(model_name)
    panels = [sep_panel, gradient_panel, _norms_panel(got.value, shown, model_name)]  # type: ignore[arg-type]
    figures = [panel.figure for panel in panels if panel.figure is not None]
    for i, (column, figure) in enumerate(zip(st.columns(len(figures)), figures)):
        with column:
            _show(figure, f"no_op_{i}")
    for message in [panel.message for panel in panels if panel.message is not None]:
        st.info(message)
    extra = [s for panel in panels for s in panel.notice]
    sentence = no_op_notice(special, gradients, reason, shown, extra)
    _notice(sentence, got.source, _corpus_link(STEPS[2], model_name, "special"))


def render_entropy(model_name: str, shown: str) -> None:
    """Step 4: mean entropy per head and layer against uniform attention."""
    got = special_result(model_name)
    special: SpecialTokenResult = got.value.special  # type: ignore[attr-defined]
    _show(entropy_figure(special.heads["entropy"], special.heads["cls_entropy"], special.uniform_entropy), "entropy")
    _notice(entropy_notice(special, shown), got.source, _corpus_link(STEPS[3], model_name, "special"))


def _syntax_example(model_name: str, sentences: list[Sentence], relation: str, layer: int, head: int, d: int) -> None:
    """One short sentence rich in the relation: gold arcs above, the chosen head's predictions below."""
    short = [s for s in sentences if relation in s.deprels and len(s.words) <= EXAMPLE_MAX_WORDS]
    if not short:
        return
    sentence = max(short, key=lambda s: s.deprels.count(relation))  # the first of those with the most arcs
    maps = example_maps(model_name, tuple(sentence.words))
    if maps is None:
        return
    causal = model_named(model_name).facts.causal
    found = head_on_sentence(maps.word_map, maps.present, sentence, relation, layer, head, DIRECTIONS[d], causal)
    title = f"Head {head_name(layer, head)} on '{relation}' ({DIRECTIONS[d]})"
    _show(arc_diagram(sentence.words, sentence.heads, sentence.deprels, found.predicted, found.focus, title), "arcs")


def render_syntax(model_name: str, shown: str) -> None:
    """Step 5: the best head per relation against the best offset, and one sentence as arcs."""
    got = deps_result(model_name)
    counts, min_count = got.value  # type: ignore[misc]
    table = counts.table(min_count=min_count)
    rows = syntax_rows(table)
    frame = pd.DataFrame(
        [
            {"relation": r.relation, "dependents": r.count, "best head": head_name(r.layer, r.head),
             "head accuracy": round(r.accuracy, 3), "best offset": f"{r.baseline_offset:+d}",
             "offset accuracy": round(r.baseline_accuracy, 3)}
            for r in rows
        ]
    )  # fmt: skip
    if rows:
        top = rows[0]
        sentences = shipped_corpus(TOUR_CORPORA["deps"]).inputs[:SLICE]
        d = DIRECTIONS.index(top.direction)
        _syntax_example(model_name, sentences, top.relation, top.layer, top.head, d)  # type: ignore[arg-type]
    data_table(frame, key="tour_syntax_table")
    _notice(syntax_notice(table, shown), got.source, _corpus_link(STEPS[4], model_name, "deps"))


def render_positions(model_name: str, shown: str) -> None:
    """Step 6: centres of mass of attention and attribution, and their correlation per layer."""
    try:
        got = positions_result(model_name)
    except ValueError as exc:  # a model whose attention Hidden Token Attribution cannot follow
        st.warning(f"Attribution could not be computed for {model_name}: {exc}")
        return
    r: PositionsResult = got.value  # type: ignore[assignment]
    left, right = st.columns(2)
    with left:
        _show(center_of_mass_chart(r.attention_center_of_mass, r.attribution_center_of_mass), "centre_of_mass")
    with right:
        medians = {name: r.median_correlation(name) for name in CORRELATIONS}
        _show(median_correlation_chart(medians, "Median correlation with attribution"), "correlation")
    _notice(positions_notice(r, shown), got.source, _corpus_link(STEPS[5], model_name, "positions"))


def render_knockout(model_name: str, shown: str, step: Step = STEPS[6]) -> None:
    """Step 7: each head's [CLS]/[SEP] attention knocked out against the head switched off, share against effect (a
    decoder's first token: its step 3, the sink test)."""
    try:
        got = _shipped_else_slice("importance", model_name, IMPORTANCE_SLICE)
    except AblationUnavailable as exc:
        st.warning(f"Heads of {model_name} cannot be switched off: {exc}")
        return
    result: HeadImportance = got.value  # type: ignore[assignment]
    effects = {c: e for c in CHANGES if (e := result.effect(c)) is not None}
    figure = no_op_scatter(result.special_share, effects, result.no_op().overall, result.measure, result.causal)
    _show(figure, "knockout")
    _notice(no_op_sentence(result, shown), got.source, _corpus_link(step, model_name, "importance"))


def render_induction(model_name: str, shown: str) -> None:
    """Step 8: the decoder trained in the repository, whatever model is loaded: each role's largest score and the
    in-context gain over its checkpoints, then its best induction head on the probe."""
    from app_pages.roles.probe import cached_probe_text
    from app_pages.roles.training import roles_over_training

    run, where = roles_over_training(TRAINED_MODEL, tuple(checkpoints_of(TRAINED_MODEL)), RolesOptions())
    found = run.result
    table = checkpoint_table(found)
    _show(training_figure(TRAINED_MODEL, table, scores=("induction",)), "induction_lines")
    induction = found.scores.induction  # the model's own name loads its last checkpoint
    layer, head = (int(x) for x in np.unravel_index(int(np.argmax(induction)), induction.shape))
    probe = cached_probe_text(TRAINED_MODEL, LINK_REPEAT)
    result = cached_run(TRAINED_MODEL, probe.text, "")
    st.markdown(f"#### Head {head_name(layer, head)}: induction score {induction[layer, head]:.2f}, on the probe")
    html = head_view_html(result.attentions[layer], [pretty_token(t) for t in result.tokens], [head], layer,
                          result.segments)  # fmt: skip
    st.iframe(html, height="content")
    sentence = induction_notice(list(table["step"]), list(table["max_induction"]), list(table["in_context_gain"]),
                                TRAINED_MODEL)  # fmt: skip
    source = f"{where}: the probe of METHODS §20 at {len(table)} checkpoints of {TRAINED_MODEL}"
    _notice(sentence, source, page_link(STEPS[7].page, model=TRAINED_MODEL, tab=STEPS[7].tab))
    causal_picture(found.to_json().get("roles") or {})


def causal_picture(roles: dict) -> None:
    """Step 8's causal picture on the trained decoder: every head's mean noising score over the shipped pairs, and
    the composition into its induction heads over its checkpoints."""
    from app_pages.roles.composition_tab import cached_over_checkpoints
    from attnlib.views.circuit import composition_training_figure
    from attnlib.views.drawing import figures_of

    st.markdown("#### The causal picture")
    options = PatchOptions(pairs=str(INDUCTION_PAIRS), direction="noise")
    bar = Bar("Patching the shipped pairs, {model}", "pairs")
    noising = computed("patch", TRAINED_MODEL, "", options, None, bar).result
    induction = tuple((int(l), int(h)) for l, h in roles.get("induction", []))
    table = cached_over_checkpoints(tuple(checkpoints_of(TRAINED_MODEL)), induction)
    bars = figures_of(noising, TRAINED_MODEL)[1]
    bars.update_layout(title_text=f"Each head's mean noising score over the {noising.pairs} shipped pairs")
    _show(bars, "noising")
    receivers = ", ".join(head_name(l, h) for l, h in induction)
    lines = composition_training_figure(table, TRAINED_MODEL, receivers)
    lines.update_layout(title_text=f"Composition into the induction heads {receivers} over training",
                        legend={"orientation": "h", "y": -0.25})  # fmt: skip
    lines.update_yaxes(title="mean composition")
    _show(lines, "composition")
    sentence = circuit_notice(noising.heads["encoder"], noising.heads_se["encoder"], int(noising.pairs or 0), roles,
                              table, TRAINED_MODEL)  # fmt: skip
    source = (
        f"`attnlib patch --pairs {INDUCTION_PAIRS.name} --direction noise` and `attnlib compose` at each checkpoint, "
        f"computed here on {TRAINED_MODEL}"
    )
    _notice(sentence, source, page_link("predictions", model=TRAINED_MODEL, tab="patching"))


@st.cache_data(max_entries=2, show_spinner=False)
def induction_routes(model_name: str, words: int, again: int) -> tuple[str, dict, InductionRoute]:
    """The route step's prompt (`words` one-token words of the probe, then their first `again`), its routes (the
    prediction at the last token; METHODS §21's default threshold and mode) and where they read from."""
    from app_pages.predictions.prompt_state import cached_routes

    lm = model_named(model_name)
    text = induction_prompt(probe_words(lm.tokenizer, words), again)
    routes = cached_routes(model_name, text, -1, ROUTE_OPTIONS.threshold, ROUTE_OPTIONS.mode)
    tokens = routes["tokens"]
    earlier = tokens[:-1].index(tokens[-1])  # the last word's earlier occurrence (each word is one token)
    return text, routes, induction_route(routes, earlier + 1)


def render_routes(model_name: str, shown: str) -> None:
    """Step 9: the decoder trained in the repository, whatever model is loaded: the route of an induction prompt's
    prediction, and where it reads from."""
    from attnlib.views.routes import route_graph

    (words, again), (other_words, other_again) = INDUCTION_PROMPTS
    text, routes, found = induction_routes(TRAINED_MODEL, words, again)
    _, _, second = induction_routes(TRAINED_MODEL, other_words, other_again)
    st.markdown(f"The prompt: *{text}*")
    figure = route_graph(RouteGraph.from_json(routes), title=f"{TRAINED_MODEL}: the route to the next token")
    figure.update_layout(width=None)
    _show(figure, "route")
    sentence = route_notice(found, TRAINED_MODEL, words, again, ROUTE_OPTIONS.threshold,
                            (other_words, other_again, second))  # fmt: skip
    source = (
        f"computed here on the prompt above with {TRAINED_MODEL} (threshold {ROUTE_OPTIONS.threshold:g}, "
        f"{ROUTE_OPTIONS.mode})"
    )
    _notice(sentence, source, page_link(STEPS[8].page, model=TRAINED_MODEL, text=text))


def _corpus_link(step: Step, model_name: str, command: str) -> str:
    _, _, page, tab = step.shown(model_named(model_name).facts.causal)
    return page_link(page, model=model_name, corpus=corpus_slug(TOUR_CORPORA[command]), tab=tab)


RENDER: dict[str, Callable[[str, str], None]] = {
    "heads": render_heads,
    "special": render_special,
    "no-op": render_no_op,
    "entropy": render_entropy,
    "syntax": render_syntax,
    "positions": render_positions,
    "knockout": render_knockout,
    "induction": render_induction,
    "routes": render_routes,
}


# ---------- the step in the URL, previous / next --------------------------------------------------------------------


def _move(delta: int) -> None:
    """Button callback: go to the previous or next step."""
    st.session_state.tour_step = step_number(str(st.session_state.tour_step + delta))


def current_step() -> Step:
    """The step from the session, else from the URL (?step=3); written back to the URL."""
    state = st.session_state
    if "tour_step" not in state:
        state.tour_step = step_number(st.query_params.get("step"))
    st.query_params["step"] = str(state.tour_step)
    return STEPS[state.tour_step - 1]


def step_buttons(step: Step) -> None:
    """Previous and next, with where the class is."""
    back, where, forward = st.columns([1, 4, 1])
    back.button("← Previous", key="tour_prev", on_click=_move, args=(-1,), disabled=step.number == 1)
    where.markdown(f"**Step {step.number} of {len(STEPS)}**")
    forward.button("Next →", key="tour_next", on_click=_move, args=(1,), disabled=step.number == len(STEPS))


st.title("Tour")
st.caption(
    "What the papers found, one step per screen, shown on the loaded model. Layers and heads are numbered from 1 "
    "(layer-head, as in Clark et al.)."
)
encoder_part_notes(current_model())
model_name = current_model().facts.name
shown_name = Path(model_name).name if Path(model_name).is_dir() else model_name  # a folder by its own name
step = current_step()
step_buttons(step)
title, explanation, _, _ = step.shown(current_model().facts.causal)
st.header(f"{step.number}. {title}")
st.markdown(f"<p style='font-size:1.25rem'>{explanation}</p>", unsafe_allow_html=True)
RENDER[step.key](model_name, shown_name)
