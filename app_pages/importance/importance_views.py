"""The Head importance page's state: its options in the URL, one model's result as shown (shipped, computed, or
from a result file), and the second model's beside it."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attnlib.analyses.importance import MEASURES, HeadImportance, ImportanceOptions, mlm_reason, unavailable_reason
from attnlib.core.model import LoadedModel
from attnlib.views.importance import measure_names
from ui.sources.corpus_page import CorpusPage, Shown, file_shown_as
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.page_state import AnalysisForm, field_option
from ui.sources.result_source import Bar

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
