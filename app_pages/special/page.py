"""Special tokens: where attention goes over a corpus ([CLS], [SEP], punctuation), offsets, entropy, head map (Clark §3)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.special.special_views import (
    GRADIENT_CAVEAT,
    GRADIENT_TITLE,
    KEY,
    Chosen,
    ShownResult,
    gradient_file,
    models_difference,
    names_for,
    per_model,
    show_figure,
)
from app_pages.special.weights_norms_tab import weights_norms_tab
from attnlib.analyses.gradient import GradientImportance, GradientOptions, unavailable_reason
from attnlib.analyses.special import (
    BROAD_ENTROPY_FRACTION,
    CLASS_KEYS,
    SHARE_THRESHOLD,
    SINK_THRESHOLD,
    SpecialOptions,
    SpecialTokens,
    heads_above,
)
from attnlib.core.model import LoadedModel
from attnlib.views.special import (
    entropy_figure,
    gradient_figure,
    head_heatmaps,
    head_label,
    head_map_figure,
    layer_lines_by_model,
    layer_lines_with_head_dots,
)
from ui.sources.corpus_page import CorpusPage, file_shown, result_on_corpus
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import AnalysisForm, Option, bind, field_option, lazy_tabs
from ui.sources.result_source import Bar, FromFile
from ui.widgets.data_table import data_table
from ui.widgets.downloads import download_json, download_table
from ui.widgets.family_notes import encoder_part_notes
from ui.widgets.methods import cite_methods
from ui.widgets.page_tabs import SPECIAL_TOKENS
from ui.widgets.side_by_side import side_by_side

PUNCT_LABELS = {False: '"." and "," (Clark et al.)', True: "all punctuation"}
SHOWN_FIRST = SpecialOptions(head_map=True, norms=True)  # the page draws the head map and the norms unless unticked
FIELDS = {
    "all_punct": field_option(SHOWN_FIRST, "all_punct", f"{KEY}_punct", "punct", choices={"clark": False, "all": True}),
    "head_map": field_option(SHOWN_FIRST, "head_map", f"{KEY}_map", "map"),
    "norms": field_option(SHOWN_FIRST, "norms", f"{KEY}_norms", "norms"),
}
FORM = AnalysisForm(SHOWN_FIRST, FIELDS, KEY)
GRADIENTS = Option(f"{KEY}_grad", "grad", True)
COMPUTED_HERE = "computed here"
GRADIENT_BAR = Bar("Gradient importance, {model}")


def options_sidebar(lm: LoadedModel, from_file: bool) -> Chosen:
    """The page's options (kept in the URL): the analysis's, whether to add gradient importance, and its result file."""
    options = FORM.bind()
    gradients = bool(bind([GRADIENTS])["grad"])
    with st.sidebar:
        st.subheader("Options")
        st.radio("Punctuation", list(PUNCT_LABELS), format_func=PUNCT_LABELS.get, key=FIELDS["all_punct"].key)
        st.checkbox("Head map (Jensen-Shannon distances)", key=FIELDS["head_map"].key)
        st.checkbox("Weights vs norms (value norms, same pass)", key=FIELDS["norms"].key)
        FORM.other_widgets()
        if unavailable_reason(lm) is None:
            st.checkbox("Gradient importance (a second, slower pass)", key=GRADIENTS.key)
        else:
            st.caption("Gradient importance needs a model with a trained masked-LM head.")
        if from_file:
            st.caption("These options apply when computing; the loaded file's own are named above.")
    return Chosen(options, gradients, gradient_file())


def grad_asked_key(model: str, fingerprint: str) -> str:
    """Session key remembering that the visitor asked for gradient importance next to a shipped result."""
    return f"_{KEY}_grad_asked:{model}:{fingerprint}"


def gradients_of(model: str, chosen: Chosen) -> tuple[GradientImportance | None, str]:
    """A model's gradient importance from the `gradient` result file loaded for it, and the file's origin."""
    found = chosen.gradient_file
    if found is None or found.model != model:
        return None, ""
    return found.value, f"from {found.name}, {found.record.provenance()}"


def model_result(lm: LoadedModel, choice: CorpusChoice, chosen: Chosen) -> ShownResult | None:
    """One model's result on the chosen corpus (the skeleton's), with its gradient importance: from a loaded file, or
    the `gradient` analysis computed beside it when asked (at once beside a result computed here)."""
    shown = PAGE.on_corpus(lm, choice, chosen)
    if shown is None:
        return None
    name = lm.facts.name
    grads, grad_source = gradients_of(name, chosen)
    reason = unavailable_reason(lm)
    asked = shown.source == COMPUTED_HERE or st.session_state.get(grad_asked_key(name, choice.fingerprint), False)
    if grads is None and chosen.gradients and reason is None and asked:
        run, grad_source = result_on_corpus("gradient", name, choice, GradientOptions(), GRADIENT_BAR)
        grads = None if run is None else run.result
    caveats = {} if reason is None or grads is not None else {GRADIENT_CAVEAT: reason}
    return ShownResult(**vars(shown) | {"caveats": caveats}, gradients=grads, gradient_source=grad_source)


def file_view(found: FromFile[SpecialTokens], chosen: Chosen) -> ShownResult:
    """A result file's statistics as the page shows them, with the gradient importance of a `gradient` file of the
    same model where one is loaded."""
    grads, grad_source = gradients_of(found.model, chosen)
    other = chosen.gradient_file
    caveats = {} if grads is not None or other is None else {GRADIENT_CAVEAT: f"{other.name} is {other.model}'s."}
    return ShownResult(**vars(file_shown(found)) | {"caveats": caveats}, gradients=grads, gradient_source=grad_source)


PAGE: CorpusPage[Chosen, ShownResult] = CorpusPage(
    KEY,
    "special",
    options=options_sidebar,
    result=model_result,
    from_file=file_view,
    analysis_options=lambda chosen: chosen.options,
    bar=Bar("Running {model}"),
)


PER_LAYER, PER_HEAD = "Per layer (mean over heads)", "Per head"  # the result's tables the Tables tab shows


def _per_head_table(view: ShownResult) -> pd.DataFrame:
    """The result's table per head, with each head's label (layer-head from 1) after the model."""
    table = view.result.tables(view.model)[PER_HEAD]
    table.insert(1, "layer-head", [head_label(l - 1, h - 1) for l, h in zip(table["layer"], table["head"])])
    return table


def _heads_over_half(views: list[ShownResult], keys: list[str]) -> pd.DataFrame:
    rows = [
        {"model": v.model, "head": head_label(l, h), "attends to": names_for(views)[key], "share": round(value, 3)}
        for v in views
        for key in keys
        for l, h, value in heads_above(v.special.heads[key], SHARE_THRESHOLD)
    ]
    return pd.DataFrame(rows, columns=["model", "head", "attends to", "share"])


def lines_beside_heatmaps(views: list[ShownResult], keys: list[str], titles: tuple[str, str, str], names: str):
    """Layer lines and per-head heatmaps of some statistics; one model side by side, two overlaid then paired."""
    line_title, y_title, heat_title = titles
    line_name, heat_name = names.split()
    labels = names_for(views)
    cols = 3 if len(keys) == 3 else 2
    if len(views) == 1:
        stats = per_model(views, keys)[views[0].model]
        left, right = st.columns(2) if cols == 2 else (st.container(), st.container())
        with left:
            show_figure(layer_lines_with_head_dots(stats, labels, line_title, y_title), line_name)
        with right:
            show_figure(head_heatmaps(stats, labels, heat_title, cols=cols), heat_name)
        return
    show_figure(layer_lines_by_model(per_model(views, keys), labels, line_title, y_title), line_name)
    models_difference(views, [v.special.layers for v in views], keys, labels)
    side_by_side(
        views,
        lambda v, sfx: show_figure(
            head_heatmaps(per_model([v], keys)[v.model], labels, heat_title, cols=2), heat_name + sfx
        ),
    )


def shares_tab(views: list[ShownResult]) -> None:
    """Shares of attention to [CLS], [SEP], punctuation and the rest (Clark Fig. 2)."""
    st.markdown(
        "Mean share of attention each query row sends to [CLS], [SEP], punctuation and every other token "
        "(METHODS §2): lines are layer means, dots are heads (Clark Fig. 2)."
    )
    titles = ("Share of attention per layer", "share of attention", "Share of attention per head")
    lines_beside_heatmaps(views, list(CLASS_KEYS), titles, "shares_per_layer shares_per_head")


def sep_tab(views: list[ShownResult]) -> None:
    """[SEP] as a no-op: attention to [SEP] from [SEP] rows and from the others."""
    st.markdown(
        "Clark et al. found that heads attending to [SEP] do not gather the segment there: the [SEP] rows "
        "send almost all their attention (>90% in BERT-base) to the [SEP]s themselves, as a no-op. "
        "`sep_to_sep` is the mean over [SEP] query rows of their mass to [SEP] keys; `rest_to_sep` the "
        "same over all other rows. Each input's mean comes first, then the mean over inputs. "
        "The *Weights vs norms* tab asks whether that attention moves anything."
    )
    titles = ("Attention to [SEP] from [SEP] rows and from the rest", "mass to [SEP]", "Attention to [SEP] per head")
    lines_beside_heatmaps(views, ["sep_to_sep", "rest_to_sep"], titles, "sep_no_op sep_no_op_heads")


def sinks_tab(views: list[ShownResult]) -> None:
    """The attention sink (METHODS §18): each head's share to the first token, and the share of sink heads."""
    st.markdown(
        "A decoder's heads often park attention on the first token, the *attention sink* (Xiao et al. 2023; Gu et al. "
        "2024): `first_share` is each head's mean share to position 0 over the rows that can see more than it "
        f"(i >= 1). An encoder's counterpart is Clark's [CLS]+[SEP] share, so the two kinds stand side by side. A head "
        f"is a sink head above {SINK_THRESHOLD} (Gu et al.); the sink rate is the share of such heads."
    )
    first = {v.model: {"first": v.special.first_share} for v in views}
    names = {"first": "first token (decoder) or [CLS]+[SEP] (encoder)"}
    titles = ("Share to the first token per layer", "share of attention", "Share to the first token per head")
    if len(views) == 1:
        left, right = st.columns(2)
        with left:
            show_figure(layer_lines_with_head_dots(first[views[0].model], names, *titles[:2]), "sink_per_layer")
        with right:
            show_figure(head_heatmaps(first[views[0].model], names, titles[2], cols=1), "sink_per_head")
    else:
        show_figure(layer_lines_by_model(first, names, *titles[:2]), "sink_per_layer")
        side_by_side(
            views, lambda v, sfx: show_figure(head_heatmaps(first[v.model], names, titles[2], cols=1), "sink" + sfx)
        )
    rates = pd.DataFrame(
        [
            {
                "model": v.model,
                "kind": "decoder" if v.special.causal else "encoder",
                "layer": "all" if l is None else str(l + 1),
                "sink heads": round(rate, 3),
            }
            for v in views
            for l, rate in [(None, v.special.sink_rate["overall"]), *enumerate(v.special.sink_rate["per_layer"])]
        ]
    )
    data_table(rates, key=f"{KEY}_sink_rates")
    download_table(rates, "sink_rates", key=f"{KEY}_sink_rates_csv")


def offsets_tab(views: list[ShownResult]) -> None:
    """Attention to the previous token, the token itself and the next one, and the heads above the threshold."""
    st.markdown(
        "Share of attention to the previous token, the token itself and the next token "
        f"(METHODS §2). Heads above {SHARE_THRESHOLD} are named below."
    )
    titles = ("Attention to nearby tokens", "share of attention", "Attention to nearby tokens per head")
    lines_beside_heatmaps(views, ["prev", "self", "next"], titles, "offsets_per_layer offsets_per_head")
    named = _heads_over_half(views, ["prev", "self", "next"])
    if named.empty:
        st.info(f"No head gives more than {SHARE_THRESHOLD} of its attention to the previous, same or next token.")
    else:
        data_table(named, key=f"{KEY}_offset_heads")
        download_table(named, "offset_heads", key=f"{KEY}_offset_heads_csv")


def entropy_tab(views: list[ShownResult]) -> None:
    """Mean entropy of each head's rows and of the [CLS] row (Clark Fig. 4)."""
    st.markdown(
        "Mean entropy (nats) of each head's attention rows, and of the [CLS] row alone (METHODS §3, "
        "Clark Fig. 4). The dashed line is uniform attention, the mean of ln n over inputs: heads near it "
        "attend broadly, heads near 0 look at one token."
    )
    models_difference(views, [v.special.layers for v in views], ["entropy", "cls_entropy"], names_for(views))

    def draw(v: ShownResult, sfx: str) -> None:
        heads = v.special.heads
        show_figure(entropy_figure(heads["entropy"], heads["cls_entropy"], v.special.uniform_entropy), "entropy" + sfx)

    side_by_side(views, draw)


def head_map_tab(views: list[ShownResult]) -> None:
    """The MDS map of the heads by Jensen-Shannon divergence, with the behaviour labels."""
    if all(v.head_map is None for v in views):
        for view in [v for v in views if v.from_file] or views[:1]:
            no_head_map(view)
        return
    st.markdown(
        "Each head is a point; heads that attend alike are close. The distance between two heads is the "
        "Jensen-Shannon divergence of their smoothed attention rows summed over every row of every input "
        "(METHODS §4), embedded in 2-D with classical MDS. Hover a point to see its layer-head."
    )
    st.caption(
        f"Behaviour labels (our thresholds; Clark et al. do not publish theirs): a head is *next*, *prev*, "
        f"*[CLS]*, *[SEP]* or *punctuation* when that share of its attention exceeds {SHARE_THRESHOLD} "
        f"(the largest wins); otherwise *broad* when its mean entropy exceeds {BROAD_ENTROPY_FRACTION:.0%} "
        f"of uniform attention's mean ln n; otherwise *other*. The map uses classical MDS, which may "
        f"differ from the paper's MDS by a rotation or reflection."
    )
    side_by_side(views, draw_head_map)


def no_head_map(view: ShownResult) -> None:
    """Why a model has no head map, and how to get one."""
    st.info(
        f"{view.model}: the result file has no head map; run the command with --head-map to include it."
        if view.from_file
        else "Switch on *Head map* in the sidebar to compute the Jensen-Shannon distances between all heads."
    )


def draw_head_map(view: ShownResult, sfx: str) -> None:
    """One model's head map and its JS-divergence table download."""
    hm = view.head_map
    if hm is None:
        no_head_map(view)
        return
    show_figure(head_map_figure(hm.coords, hm.layer, hm.head, hm.labels), "head_map" + sfx)
    names = [head_label(l, h) for l, h in zip(hm.layer, hm.head)]
    distances = pd.DataFrame(hm.divergence, index=names, columns=names)
    download_table(distances.reset_index(names="head"), "js_divergence" + sfx, key=f"{KEY}_js_csv{sfx}")


def gradient_tab(views: list[ShownResult]) -> None:
    """Gradient of the masked-LM loss with respect to attention, to [SEP] and to all keys (Clark Fig. 3)."""
    st.markdown(
        "Mean magnitude of the gradient of the masked-LM loss (15% of non-special tokens masked, fixed "
        "seed) with respect to each attention weight, over heads, rows and [SEP] keys, against all keys "
        "(METHODS §5, Clark Fig. 3). Each input's mean comes first, then the mean over inputs."
    )
    side_by_side(views, draw_gradients)


def ask_gradients(view: ShownResult) -> None:
    """Remember (button callback) that the visitor wants gradient importance beside a shipped result."""
    st.session_state[grad_asked_key(view.model, view.fingerprint)] = True


def draw_gradients(view: ShownResult, sfx: str) -> None:
    """One model's gradient importance, or why it is missing (with a button when it only waits to be asked)."""
    if view.grad_reason is not None:
        st.info(f"Gradient importance is not shown: {view.grad_reason}")
        return
    g = view.gradients
    if g is None and view.from_file:
        st.info(
            f"{view.model}: the result file holds no gradient importance; load the `gradient` command's result file "
            f"(sidebar, *{GRADIENT_TITLE}*) to show it."
        )
        return
    if g is None and view.source != COMPUTED_HERE and st.session_state.get(GRADIENTS.key, True):
        st.info("The statistics above are shipped precomputed; gradient importance is not in them.")
        st.button("Compute gradient importance", key=f"{KEY}_grad_now{sfx}", on_click=ask_gradients, args=(view,))
        return
    if g is None:
        st.info("Switch on *Gradient importance* in the sidebar to compute it (a forward and backward pass per input).")
        return
    if view.gradient_source:
        st.caption(f"{view.model}: gradient importance {view.gradient_source}.")
    show_figure(gradient_figure(g.layers["sep"], g.layers["all"]), "gradient_importance" + sfx)
    grad_table = g.tables(view.model)[PER_LAYER]
    download_table(grad_table, "gradient_importance" + sfx, key=f"{KEY}_grad_csv{sfx}")


def view_json(view: ShownResult) -> dict:
    """One model's numbers as the JSON download holds them (0-based, as the command line)."""
    out = {"model": view.model, "corpus": view.corpus, "source": view.source, **view.result.to_json()}
    if view.gradients is not None:
        out["gradient_importance"] = view.gradients.to_json()
    return out


def tables_tab(views: list[ShownResult]) -> None:
    """Per-layer and per-head tables (a model column in each) and everything as JSON (0-based)."""
    st.markdown("Per layer (mean over heads); layers from 1.")
    per_layer = pd.concat([v.result.tables(v.model)[PER_LAYER] for v in views], ignore_index=True)
    data_table(per_layer, key=f"{KEY}_layers")
    download_table(per_layer, "special_tokens_per_layer", key=f"{KEY}_layers_csv")
    st.markdown("Per head (layer-head from 1).")
    per_head = pd.concat([_per_head_table(v) for v in views], ignore_index=True)
    data_table(per_head, key=f"{KEY}_heads")
    download_table(per_head, "special_tokens_per_head", key=f"{KEY}_heads_csv")
    everything = view_json(views[0]) if len(views) == 1 else {"models": [view_json(v) for v in views]}
    download_json(everything, "special_tokens", key=f"{KEY}_json")
    st.caption("The JSON counts layers and heads from 0, like the command line.")


def summary(views: list[ShownResult]) -> None:
    """Where the numbers come from, and how many inputs were truncated."""
    for view in views:
        special = view.special
        st.caption(
            f"{special.n_inputs} inputs from {view.corpus}; {view.model}, {view.source}. "
            f"Punctuation: {PUNCT_LABELS[special.all_punct]}."
        )
        if special.n_truncated:
            st.warning(f"{view.model}: {special.n_truncated} inputs were longer than its maximum length and were cut.")


RENDERERS = {
    "shares": shares_tab,
    "sep": sep_tab,
    "sinks": sinks_tab,
    "norms": weights_norms_tab,
    "offsets": offsets_tab,
    "entropy": entropy_tab,
    "map": head_map_tab,
    "gradient": gradient_tab,
    "tables": tables_tab,
}  # by URL text, as in ui.widgets.page_tabs
TABS = {SPECIAL_TOKENS[key]: render for key, render in RENDERERS.items()}
TAB = Option("special_tab", "tab", "Shares", SPECIAL_TOKENS, omit_default=True)

st.title("Special tokens and sinks")
st.caption(
    "Where attention goes over a whole corpus, after section 3 of Clark et al. (2019), *What Does BERT Look At?* "
    "Every number follows METHODS.md sections 1-5 and 11. **Layers and heads are numbered from 1 on this page**, "
    "written layer-head as in the paper (8-10 is layer 8, head 10); the JSON download and the command line "
    "`python -m attnlib special` count from 0."
)
cite_methods(1, 2, 3, 4, 5, 18)
encoder_part_notes()
views = PAGE.shown(current_model())
if not views:
    st.stop()
summary(views)
label, tab = lazy_tabs(TAB, list(TABS))
with tab:
    TABS[label](views)
