"""Head roles: which heads are previous-token, duplicate-token, induction, copying, retrieval or sink heads (METHODS
§20, §18), the causal check of each role (§15's ablation), detection on a corpus or the visitor's own text, and the
roles over a model's training checkpoints."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app_pages.roles.composition_tab import composition_tab
from app_pages.roles.own_text import own_text_detection
from app_pages.roles.probe import DETECT_LIMIT, cached_probe_text
from attnlib.analyses.roles import LINK_REPEAT, ROLE_NAMES, RolesOptions, RolesResult
from attnlib.core.model import LoadedModel
from attnlib.present.tour import live_head_link
from attnlib.views.head_view import head_view_html
from attnlib.views.roles import causal_bars, role_map, score_heatmap
from attnlib.views.special import head_label
from ui.sources.corpus_page import CorpusPage, Shown, every_head_tab, file_shown_as
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.live_inputs import cached_run, pretty_token
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import AnalysisForm, Option, bind, lazy_tabs, set_value
from ui.sources.result_source import Bar
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart
from ui.widgets.family_notes import encoder_part_notes
from ui.widgets.methods import cite_methods
from ui.widgets.page_tabs import HEAD_ROLES
from ui.widgets.plotly_figure import clicked_point
from ui.widgets.side_by_side import side_by_side

KEY = "roles"  # widget keys and download names start with it
FORM = AnalysisForm(RolesOptions(), {}, KEY, fixed=("checkpoints",))  # checkpoints: the Over training tab's
PICK = Option(f"{KEY}_pick", "pick", "", omit_default=True)  # the head opened on the probe: "layer-head", from 1
TAB = Option(f"{KEY}_tab", "tab", HEAD_ROLES["map"], HEAD_ROLES, omit_default=True)
MEASURE = Option(f"{KEY}_measure", "detect", "mul", ["mul", "abs"], omit_default=True)
PROBE_SCORES = ("induction", "duplicate", "previous", "copying", "first_share")
ShownRoles = Shown[RolesResult]  # one model's roles result as the page shows it


def cost_sentence(lm: LoadedModel, choice: CorpusChoice, options: RolesOptions) -> str:
    """What computing it costs, said before it starts."""
    f = lm.facts
    sequences, length = options.sequences, options.repeat_length * options.repeats
    causal = " and the causal check (about 30 more passes of the probe with heads switched off)" if f.causal else ""
    return (
        f"Nothing ships for {f.name}: computing runs the probe ({sequences} sequences of about {length} tokens){causal}, "
        f"then detection on the {choice.n_inputs} inputs of {choice.label}: seconds for a small model, a minute or "
        "more for a large one."
    )


def options_sidebar(lm: LoadedModel, from_file: bool = False) -> RolesOptions:
    """The page's options (kept in the URL): the probe's, the causal check's, detection's and the thresholds."""
    options = FORM.bind()
    with st.sidebar:
        st.subheader("Options")
        FORM.other_widgets()
    return options


PAGE: CorpusPage[RolesOptions, ShownRoles] = CorpusPage(
    KEY,
    "roles",
    options_sidebar,
    from_file=file_shown_as,
    default_limit=DETECT_LIMIT,
    bar=Bar("Head roles, {model}", unit="sequences"),
    ask_first=cost_sentence,
)


def bidirectional_note(views: list[ShownRoles]) -> None:
    """For an encoder: what the probe means for maps that look both ways."""
    if all(v.result.in_context_gain is not None for v in views) or current_model().facts.causal:
        return
    st.info(
        "An encoder's maps are bidirectional: every token of the probe also sees the repeat after it. The scores "
        "count attention to the *earlier* repeat only (the token that followed the query's earlier occurrence, the "
        "earlier occurrence itself, the token before); what a head gives to the later repeat (from the first repeat to "
        "the second) is not counted, so a head that matches tokens both ways scores lower than its pattern suggests. "
        "An encoder has no next-token loss: no in-context gain and no causal check; its copying score is not defined "
        "(it needs a linear unembedding after the last norm, as every decoder has).",
        icon=":material/swap_horiz:",
    )


def pick_head(key: str, n_heads: int) -> None:
    """A click on a cell of the role map: that head (its customdata l * heads + h) is the one opened on the probe."""
    point = clicked_point(key)
    if point is not None and point.get("index") is not None:
        layer, head = divmod(int(point["index"]), n_heads)
        set_value(PICK, head_label(layer, head))


def map_tab(views: list[ShownRoles], options: RolesOptions) -> None:
    """The role map of each model (click a head to open it on the probe), then each score as a heatmap."""
    thresholds = views[0].result.score_thresholds
    st.markdown(
        "Each cell is one head, coloured by its role: the role whose score passes its threshold by the largest "
        "factor (" + ", ".join(f"{ROLE_NAMES.get(r, r)} ≥ {t:g}" for r, t in thresholds.items() if r in ROLE_NAMES)
        + "). Hover a head for all its scores; click it to open it in the head view on the probe below."
    )  # fmt: skip
    bidirectional_note(views)

    def draw(view: ShownRoles, sfx: str) -> None:
        roles = view.result
        key = f"{KEY}_map{sfx}"
        scores = roles.scores.grids()
        n_heads = roles.scores.induction.shape[1]
        chart(role_map(scores, roles.score_thresholds, f"Head roles: {view.model}"), f"head_roles{sfx}", key,
              on_click=lambda: pick_head(key, n_heads))  # fmt: skip
        shown = [(name, scores[name]) for name in PROBE_SCORES if scores.get(name) is not None]
        columns = st.columns(2) if len(views) == 1 else [st.container(), st.container()]
        for k, (name, values) in enumerate(shown):
            with columns[k % len(columns)]:
                chart(score_heatmap(values, name), f"{name}_score{sfx}", f"{KEY}_{name}{sfx}")
        if scores.get("copying") is None:
            st.caption(f"{view.model}: no copying score. {roles.notes.get('copying', '')}")

    side_by_side(views, draw)
    head_on_probe(views[0])


def default_pick(view: ShownRoles) -> str:
    """The head opened on the probe at first: the best induction head."""
    induction = view.result.scores.induction
    layer, head = np.unravel_index(int(np.nanargmax(induction)), induction.shape)
    return head_label(int(layer), int(head))


def head_on_probe(view: ShownRoles) -> None:
    """The picked head (by a click on the map, or here) in the head view on the probe as a text, and the link that
    opens it in the Live page."""
    if view.model != current_model().facts.name:
        return
    n_layers, n_heads = view.result.scores.induction.shape
    labels = [head_label(l, h) for l in range(n_layers) for h in range(n_heads)]
    bind([PICK])
    if st.session_state[PICK.key] not in labels:
        st.session_state[PICK.key] = default_pick(view)
    st.subheader("One head on the probe")
    picked = st.selectbox("Head (layer-head)", labels, key=PICK.key, help="Or click a head on the role map.")
    layer, head = (int(x) - 1 for x in picked.split("-"))
    probe = cached_probe_text(view.model, LINK_REPEAT)
    run = cached_run(view.model, probe.text, "")
    s = probe.length
    st.caption(
        f"The probe as a text: {s} random words of the vocabulary, then the same {s} words again"
        + (" (one token each)." if probe.exact else " (the tokenizer splits some: the stripe may be uneven).")
        + f" An induction head attends from each word of the second repeat to the word after its first occurrence: "
        f"the offset 1 − s = {1 - s}; a duplicate-token head to the occurrence itself (−s = {-s})."
    )
    tokens = [pretty_token(t) for t in run.tokens]
    st.iframe(head_view_html(run.attentions[layer], tokens, [head], layer, run.segments), height="content")
    st.link_button(
        f"Open head {picked} in the Live page",
        live_head_link(view.model, probe.text, layer, head),
        icon=":material/open_in_new:",
    )


def detection_tab(views: list[ShownRoles], options: RolesOptions) -> None:
    """Detection's scores on the corpus (TransformerLens's detect_head), in the measure chosen."""
    bind([MEASURE])
    st.radio(
        "Measure",
        ["mul", "abs"],
        key=MEASURE.key,
        horizontal=True,
        help="mul: the share of the head's attention on the pattern. abs: 1 − n·mean|A − P| (METHODS §20).",
    )
    measure = st.session_state[MEASURE.key]
    st.markdown(
        "Each head's attention compared with the pattern a role would draw on the corpus's own tokens: the key "
        "before the query (previous), earlier occurrences of the query's token (duplicate), the tokens that followed "
        "them (induction). Inputs without a repeated token score 0 for the last two."
    )

    def draw(view: ShownRoles, sfx: str) -> None:
        found = view.result.detect
        if not found:
            st.info(f"{view.model}: this result has no detection (it was computed without text or a corpus).")
            return
        for name, values in found[measure].items():
            chart(score_heatmap(values, name, measure), f"detect_{measure}_{name}{sfx}", f"{KEY}_detect_{name}{sfx}")

    side_by_side(views, draw)
    own_text_detection(measure, options)


def causal_tab(views: list[ShownRoles], options: RolesOptions) -> None:
    """The in-context gain with each role's top heads switched off, against as many random heads."""
    st.markdown(
        "Is a role what the model uses? The in-context gain G = L₁ − L₂ (how much better the model predicts the "
        "second repeat of the probe than the first) with the role's top heads switched off (zero ablation, METHODS "
        "§15), against the same number of random other heads (mean of 5 draws). Induction heads are shown, not only "
        "scored, when switching them off takes the gain away and the control does not."
    )

    def draw(view: ShownRoles, sfx: str) -> None:
        roles = view.result
        if roles.in_context_gain is None or not roles.causal:
            why = roles.notes.get("causal") or roles.notes.get("in_context_gain", "it has no next-token loss here.")
            st.info(f"{view.model}: no causal check. {why}")
            return
        checks = {role: check.to_json() for role, check in roles.causal.items()}
        chart(causal_bars(checks, roles.in_context_gain), f"causal{sfx}", f"{KEY}_causal{sfx}")

    side_by_side(views, draw)


def retrieval_tab(views: list[ShownRoles], options: RolesOptions) -> None:
    """The needle test of Wu et al. 2024 on the loaded model."""
    from app_pages.roles.retrieval_tab import retrieval_test

    retrieval_test(current_model(), views[0].choice)


def training_tab(views: list[ShownRoles], options: RolesOptions) -> None:
    """The roles over training: of a result file that holds checkpoints, else of the loaded model's checkpoints."""
    from app_pages.roles.training import over_training, training_lines

    with_points = [v for v in views if v.result.checkpoints]
    for view in with_points:
        table = training_lines(view.model, view.result, f"{KEY}_training_{view.model}")
        data_table(table, key=f"{KEY}_training_table_{view.model}")
    if not with_points:
        over_training(current_model(), options)


def tables_tab(views: list[ShownRoles], options: RolesOptions) -> None:
    """Every head's scores and the role the map colours it by (the result's table), with the command's JSON."""
    every_head_tab(views, "Head roles", "head_roles", KEY, formats={name: "%.4f" for name in PROBE_SCORES})


RENDERERS = {
    "map": map_tab,
    "detect": detection_tab,
    "causal": causal_tab,
    "retrieval": retrieval_tab,
    "training": training_tab,
    "composition": composition_tab,
    "tables": tables_tab,
}
TABS = {HEAD_ROLES[key]: render for key, render in RENDERERS.items()}

st.title("Head roles")
st.caption(
    "Which heads are induction heads? Previous-token, duplicate-token, induction, copying, retrieval and sink heads "
    "of any model (Olsson et al. 2022; Elhage et al. 2021; Wu et al. 2024), scored on a probe of repeated random "
    "tokens, checked by switching them off, and followed over training. **Layers and heads are numbered from 1 on "
    "this page** (layer-head); `attnlib roles` and the JSON count from 0."
)
cite_methods(20, 15, 18)
encoder_part_notes()
lm = current_model()
given = PAGE.inputs(lm)
views = PAGE.results(lm, given, PAGE.second(lm, given))
if not views:
    st.stop()
for view in views:
    probe, notes = view.result.probe, view.result.notes
    st.caption(
        f"{view.model}: the probe of {len(probe.tokens)} sequences, {probe.repeats} repeats of {probe.repeat_length} "
        f"tokens; detection on {view.corpus}; {view.source}." + (f" {notes['probe']}" if "probe" in notes else "")
    )
label, tab = lazy_tabs(TAB, list(TABS))
with tab:
    TABS[label](views, given.options)
