"""Head importance: does a head matter? Every head switched off in turn, its [CLS]/[SEP] attention knocked out, the
no-op test, the pruning curve and Michel's gradient importance (METHODS §15, Michel et al. 2019)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.analyses.importance import (
    MEASURES,
    HeadImportance,
    ImportanceOptions,
    mlm_reason,
    no_op_sentence,
    ranked_heads,
    unavailable_reason,
)
from attnlib.core.model import LoadedModel
from attnlib.views.importance import (
    change_names,
    effect_heatmap,
    measure_names,
    no_op_scatter,
    pruning_figure,
    share_title,
)
from attnlib.views.special import head_label
from ui.sources.compare import difference_line
from ui.sources.corpus_page import CorpusPage, Shown, every_head_tab, file_shown_as
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.model_sidebar import current_model
from ui.sources.page_state import AnalysisForm, Option, field_option, lazy_tabs
from ui.sources.result_source import Bar
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_table
from ui.widgets.family_notes import encoder_part_notes
from ui.widgets.methods import cite_methods
from ui.widgets.page_tabs import HEAD_IMPORTANCE
from ui.widgets.side_by_side import side_by_side

KEY = "importance"  # widget keys and download names start with it
SHIPPED_LIMIT = 100  # EWT dev ships on its first 100 sentences (scripts/precompute.py); the classroom sets whole
SHOWN_FIRST = ImportanceOptions(knockout=True, prune=True)
FIELDS = {
    "knockout": field_option(SHOWN_FIRST, "knockout", f"{KEY}_knockout", "ko"),
    "prune": field_option(SHOWN_FIRST, "prune", f"{KEY}_prune", "prune"),
    "measure": field_option(SHOWN_FIRST, "measure", f"{KEY}_measure", "measure", choices=list(MEASURES)),
}
FORM = AnalysisForm(SHOWN_FIRST, FIELDS, KEY)  # the seed (the gradient importance's masks) a plain widget
ShownImportance = Shown[HeadImportance]  # one model's importance as the page shows it (in the chosen measure)
TAB = Option(f"{KEY}_tab", "tab", HEAD_IMPORTANCE["effects"], HEAD_IMPORTANCE, omit_default=True)


def cost_sentence(lm: LoadedModel, choice: CorpusChoice, options: ImportanceOptions) -> str:
    """What computing it costs, said before it starts."""
    f = lm.facts
    passes = f.n_heads * (f.n_layers + 1) / 2 * (3 if options.knockout else 1) * (2 if lm.mlm is not None else 1)
    special = "first-token" if f.causal else "[CLS]/[SEP]"
    knock = f" (and knocks out its {special} attention)" if options.knockout else ""
    prune = ", then a pruning pass" if options.prune else ""
    return (
        f"Nothing ships for {f.name} on {choice.label}: computing switches every head off in turn{knock}{prune}, about "
        f"{passes:.0f} forward passes over the {choice.n_inputs} inputs."
    )


def options_sidebar(lm: LoadedModel, from_file: bool = False) -> ImportanceOptions:
    """The page's options (kept in the URL): the knockouts, the pruning curve, and the measure shown."""
    options = FORM.bind()
    with st.sidebar:
        st.subheader("Options")
        causal = lm.facts.causal
        special = "First-token" if causal else "[CLS]/[SEP]"
        st.checkbox(f"{special} knockouts (drop, renormalise)", key=FIELDS["knockout"].key)
        st.checkbox("Pruning curve (a second pass)", key=FIELDS["prune"].key)
        measures = [m for m in MEASURES if m != "mlm" or mlm_reason(lm) is None]
        if options.measure not in measures:
            missing = "language-model head: the next-token loss" if causal else "masked-LM head: the mlm measure"
            st.caption(f"{lm.facts.name} has no trained {missing} is not defined for it.")
            options = replace(options, measure="embedding")
            st.session_state[FIELDS["measure"].key] = "embedding"
        names = measure_names(causal)
        st.radio("Effect measure", measures, format_func=names.get, key=FIELDS["measure"].key)
        FORM.other_widgets()
    return options


PAGE: CorpusPage[ImportanceOptions, ShownImportance] = CorpusPage(
    KEY,
    "importance",
    options_sidebar,
    from_file=file_shown_as,
    default_limit=SHIPPED_LIMIT,
    bar=Bar("Head importance, {model}"),
    ask_first=cost_sentence,
    unavailable=unavailable_reason,
)


def per_layer_means(view: ShownImportance) -> dict[str, dict[str, float]]:
    """Per layer, the mean over heads of the ablation effect and of the share (largest_difference's shape)."""
    r = view.result
    out = {SHARE_NAMES[r.causal]: {f"layer {l + 1}": float(v) for l, v in enumerate(r.special_share.mean(1))}}
    effect = r.effect("ablate")
    if effect is not None:
        out[f"ablation ({r.measure})"] = {f"layer {l + 1}": float(v) for l, v in enumerate(effect.mean(1))}
    return out


SHARE_NAMES = {False: "CLS+SEP share", True: "first_share"}
HEAD_TABLE = "Per head (effects are corpus means; METHODS §15)"  # the result's table of every head


def causal(views: list[ShownImportance]) -> bool:
    """Whether the page shows decoders only (a decoder beside an encoder keeps the encoder's words above the figures,
    and each figure its own)."""
    return all(v.result.causal for v in views)


def effects_tab(views: list[ShownImportance]) -> None:
    """A layer-by-head heatmap of each change's effect, with the [CLS]+[SEP] share (a decoder's first_share) beside
    it."""
    measure = views[0].result.measure
    if causal(views):
        st.markdown(
            f"Each cell is one head switched off alone (or its attention to the first token, and to the end token "
            f"where the input has one, knocked out), its effect on **{measure_names(True)[measure]}** averaged over "
            "the corpus (METHODS §15, §18). Beside it, the share of the head's attention that goes to the first "
            "token, the attention sink, on the same inputs (first_share, §18)."
        )
    else:
        st.markdown(
            f"Each cell is one head switched off alone (or its [CLS]/[SEP] attention knocked out), its effect on "
            f"**{measure_names(False)[measure]}** averaged over the corpus (METHODS §15). Beside it, the share of the "
            "head's attention that goes to [CLS] and [SEP] on the same inputs (§2)."
        )
    if len(views) == 2:
        difference_line([v.model for v in views], per_layer_means(views[0]), per_layer_means(views[1]))

    def draw(view: ShownImportance, sfx: str) -> None:
        r = view.result
        shown = {c: r.effect(c) for c in ("ablate", "drop", "renormalise")}
        if shown["ablate"] is None:
            head = "language-model" if r.causal else "masked-LM"
            st.info(f"{view.model}: the {measure} measure is not defined (no trained {head} head).")
            return
        figures = [("special_share", effect_heatmap(r.special_share, share_title(r.causal), "share"))]
        figures += [
            (f"effect_{c}", effect_heatmap(values, f"Effect: {change_names(r.causal)[c]}", "effect"))
            for c, values in shown.items()
            if values is not None
        ]
        columns = st.columns(2) if len(views) == 1 else [st.container(), st.container()]
        for k, (name, fig) in enumerate(figures):
            with columns[k % len(columns)]:
                chart(fig, f"importance_{name}{sfx}", f"{KEY}_{name}{sfx}")
        if r.knockout is None:
            st.caption("The knockouts are off: tick them in the sidebar (three times the work).")
        most, least = ranked_heads(shown["ablate"], min(5, r.special_share.size // 2))
        st.markdown(
            "Matter most: " + ", ".join(f"**{head_label(*h)}** ({v:.3g})" for h, v in most)
            + ". Matter least: " + ", ".join(f"{head_label(*h)} ({v:.2g})" for h, v in least) + "."
        )  # fmt: skip

    side_by_side(views, draw)


def no_op_tab(views: list[ShownImportance]) -> None:
    """The scatter of share against effect with Spearman's rho, the sentence, and rho per layer (for a decoder, the
    sink test)."""
    if causal(views):
        st.markdown(
            "The sink test. A decoder's heads give much of their attention to the first token, the *attention sink* "
            "(Gu et al. 2024): is that attention a no-op, as Clark et al. read attention to [SEP]? If so, removing it "
            "(**drop**: the first token's term taken out, and the end token's where the input has one, no "
            "renormalisation) should change little in the heads that attend there most, and **renormalising** the "
            "rest without it more. Each point is one head; x is its first_share (METHODS §18)."
        )
    else:
        st.markdown(
            "Clark et al. read attention to [SEP] as a *no-op*: a head with nothing to do parks its attention there. "
            "If so, removing that attention (**drop**: its term taken out, no renormalisation) should change little "
            "in heads that attend there most, and **renormalising** the rest without it more. Each point is one head."
        )

    def draw(view: ShownImportance, sfx: str) -> None:
        r = view.result
        test = r.no_op()
        effects = {c: e for c in ("ablate", "drop", "renormalise") if (e := r.effect(c)) is not None}
        if not effects:
            st.info(f"{view.model}: the {r.measure} measure is not defined.")
            return
        st.success(f"**What it shows.** {no_op_sentence(r, view.model)}", icon=":material/lightbulb:")
        figure = no_op_scatter(r.special_share, effects, test.overall, r.measure, r.causal)
        chart(figure, f"no_op{sfx}", f"{KEY}_no_op{sfx}")
        rows = pd.DataFrame(
            {"layer": np.arange(1, len(r.special_share) + 1)}
            | {f"ρ {change_names(r.causal)[c]}": np.round(test.per_layer[c], 3) for c in effects}
        )
        data_table(rows, key=f"{KEY}_rho{sfx}")
        download_table(rows, f"no_op_spearman{sfx}", key=f"{KEY}_rho_csv{sfx}")

    side_by_side(views, draw)


def pruning_tab(views: list[ShownImportance]) -> None:
    """The pruning curves of the models, on one figure."""
    measure = views[0].result.measure
    curves = {v.model: (v.result.pruning or {}).get(measure) for v in views}
    drawn = {model: (c.removed, c.effect) for model, c in curves.items() if c is not None}
    st.markdown(
        f"Heads switched off together, least important first (by their own single-head effect on "
        f"{measure_names(causal(views))[measure]}), and the effect after each tenth of them (Michel et al. Fig. 3)."
    )
    if not drawn:
        st.info("No pruning curve: tick *Pruning curve* in the sidebar (a second pass over the corpus).")
        return
    chart(
        pruning_figure(drawn, {v.model: int(v.result.special_share.size) for v in views}, measure),
        "pruning",
        f"{KEY}_pruning",
    )
    table = pd.DataFrame(
        [{"model": m, "heads removed": k, "effect": float(e)} for m, (removed, eff) in drawn.items()
         for k, e in zip(removed, eff)]
    )  # fmt: skip
    download_table(table, "pruning_curve", key=f"{KEY}_pruning_csv")


def gradient_tab(views: list[ShownImportance]) -> None:
    """Michel's gradient importance, where the model has a trained masked-LM head."""
    st.markdown(
        "Michel et al.'s importance: a multiplier ξ on each head's context vector, and the mean |∂L/∂ξ| of the "
        "masked-LM loss at ξ = 1 — a first-order estimate of what switching the head off does to the loss (§15). "
        "Shown normalised per layer, as Michel et al. do."
    )

    def draw(view: ShownImportance, sfx: str) -> None:
        normalised = view.result.importance_normalised
        if normalised is None and view.result.causal:
            st.info(f"{view.model} is a decoder: gradient importance is defined here with a masked-LM head only (§15).")
            return
        if normalised is None:
            lm = current_model()  # an encoder-decoder's LM loss is its decoder's (§18): the library says so
            why = mlm_reason(lm) if lm.facts.name == view.model and lm.facts.kind == "encoder-decoder" else None
            st.info(why or f"{view.model} has no trained masked-LM head: gradient importance is not defined for it.")
            return
        fig = effect_heatmap(normalised, "Gradient importance (each layer normalised)", "|∂L/∂ξ|")
        chart(fig, f"gradient_importance{sfx}", f"{KEY}_gradient{sfx}")

    side_by_side(views, draw)


def tables_tab(views: list[ShownImportance]) -> None:
    """Every head's share and effects (the result's table), with the command's JSON."""
    every_head_tab(views, HEAD_TABLE, "head_importance", KEY)


RENDERERS = {
    "effects": effects_tab,
    "noop": no_op_tab,
    "pruning": pruning_tab,
    "gradient": gradient_tab,
    "tables": tables_tab,
}
TABS = {HEAD_IMPORTANCE[key]: render for key, render in RENDERERS.items()}

st.title("Head importance")
st.caption(
    "Does a head matter? Each head switched off in turn (Michel et al. 2019), and the causal test of Clark et al.'s "
    "no-op reading of attention to [SEP]. **Layers and heads are numbered from 1 on this page** (layer-head); the "
    "command line `attnlib importance` and the JSON count from 0."
)
cite_methods(2, 15)
encoder_part_notes()
views = PAGE.shown(current_model())
if not views:
    st.stop()
for view in views:
    st.caption(f"{view.result.n_inputs} inputs from {view.corpus}; {view.model}, {view.source}.")
label, tab = lazy_tabs(TAB, list(TABS))
with tab:
    TABS[label](views)
