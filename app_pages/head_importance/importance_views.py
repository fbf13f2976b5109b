"""The Head importance page's state: its options in the URL, one model's result as shown (shipped, computed, or
from a result file), and the second model's beside it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import streamlit as st

from attnlib.analyses.base import run_analysis
from attnlib.analyses.importance import IMPORTANCE, HeadImportance, ImportanceOptions
from attnlib.core.corpus import CorpusError
from attnlib.core.model import LoadedModel
from attnlib.core.runner import InputError
from attnlib.stats.head_ablation import MEASURES, mlm_reason, unavailable_reason
from attnlib.views.importance import measure_names
from ui.sources.compare import second_source
from ui.sources.corpus_picker import CorpusChoice, corpus_picker
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import AnalysisForm, field_option
from ui.sources.result_file import FromFile, loaded_result
from ui.sources.result_source import shipped_or_computed
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


@dataclass
class ShownImportance:
    """One model's importance as the page shows it: the result (in the chosen measure), where it comes from."""

    result: HeadImportance
    model: str
    corpus: str
    source: str
    from_file: bool = False

    @property
    def n_heads(self) -> int:
        return int(self.result.special_share.size)


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


def options_sidebar(lm: LoadedModel) -> ImportanceOptions:
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
    name = lm.facts.name
    reason = unavailable_reason(lm)
    if reason is not None:
        st.error(reason)
        return None
    computed = IMPORTANCE.computed(options)
    try:
        found, source = shipped_or_computed(
            "importance",
            name,
            choice,
            computed,
            lambda: compute(name, choice.fingerprint, computed, choice.inputs),
            ask_first=cost_sentence(lm, choice, options),
        )
    except (CorpusError, InputError, ValueError) as exc:
        st.error(f"The corpus could not be analysed with {name}: {exc}")
        return None
    if found is None:
        return None
    return ShownImportance(found.for_options(options), name, choice.label, source)


def file_view(found: FromFile[HeadImportance], options: ImportanceOptions) -> ShownImportance:
    source = f"from {found.name}, {found.record.provenance()}"
    return ShownImportance(found.value.for_options(options), found.model, found.corpus, source, from_file=True)


def shown_results(lm: LoadedModel) -> list[ShownImportance]:
    """The first model's result (its loaded file, else the chosen corpus's) and the second's beside it."""
    loaded = loaded_result(KEY, "importance", IMPORTANCE.from_record)
    choice = corpus_picker(KEY, default_limit=SHIPPED_LIMIT) if loaded is None else None
    options = options_sidebar(lm)
    first_name = lm.facts.name if loaded is None else loaded.model
    corpus = None if choice is None else choice.described()
    second = second_source(KEY, "importance", IMPORTANCE.from_record, first_name, loaded, corpus, options)
    first = file_view(loaded, options) if loaded else (model_result(lm, choice, options) if choice else None)
    if first is None:
        return []
    if second.file is not None:
        return [first, file_view(second.file, options)]
    other = model_result(second.model, choice, options) if second.model and choice else None
    return [first] + ([other] if other else [])
