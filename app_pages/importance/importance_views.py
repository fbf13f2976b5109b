"""The Head importance page's state: its options in the URL, one model's result as shown (shipped, computed, or
from a result file), and the second model's beside it."""

from __future__ import annotations

from dataclasses import replace

import streamlit as st

from attnlib.analyses.base import run_analysis
from attnlib.analyses.importance import IMPORTANCE, HeadImportance, ImportanceOptions
from attnlib.core.model import LoadedModel
from attnlib.stats.importance import MEASURES, mlm_reason, unavailable_reason
from attnlib.views.importance import measure_names
from ui.sources.corpus_page import CorpusPage, Shown, file_shown_as, shown_on_corpus
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import AnalysisForm, field_option
from ui.sources.result_file import FromFile
from ui.widgets.progress import progress

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


@st.cache_data(max_entries=8, show_spinner=False)
def compute(model_name: str, fingerprint: str, options: ImportanceOptions, _inputs: list) -> HeadImportance:
    """The importance of a corpus, once per model, corpus and computed options (a cached library dataclass)."""
    with progress(f"Head importance, {model_name}") as report:
        return run_analysis(IMPORTANCE, model_named(model_name), options, inputs={"corpus": _inputs},
                            progress=report).result  # fmt: skip


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


def model_result(lm: LoadedModel, choice: CorpusChoice, options: ImportanceOptions) -> ShownImportance | None:
    """One model's importance on the chosen corpus: shipped when one answers, else computed when asked."""
    reason = unavailable_reason(lm)
    if reason is not None:
        st.error(reason)
        return None
    return shown_on_corpus("importance", lm, choice, options, compute, cost_sentence(lm, choice, options))


def file_view(found: FromFile[HeadImportance], options: ImportanceOptions) -> ShownImportance:
    """A result file's importance, in the chosen measure."""
    return file_shown_as(found, options)


PAGE: CorpusPage[ImportanceOptions, ShownImportance] = CorpusPage(
    KEY, "importance", options_sidebar, model_result, file_view, default_limit=SHIPPED_LIMIT
)
