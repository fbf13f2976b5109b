"""The Head roles page's retrieval test (Wu et al. 2024, METHODS §20): a needle hidden in a haystack (the page's corpus,
else UD English EWT dev) at several depths, the decoder asked for it, and each head's retrieval score; for decoders,
computed when asked."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from attnlib.analyses.base import AnalysisRun
from attnlib.analyses.retrieval import HAYSTACK, RetrievalOptions, RetrievalResult
from attnlib.core.corpus import CorpusError
from attnlib.core.model import LoadedModel
from attnlib.views.roles import retrieval_heatmap
from attnlib.views.special import head_label
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.page_state import AnalysisForm, forget
from ui.sources.result_source import REFUSED, Bar, computed
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.progress import asked

KEY = "retrieval"
FORM = AnalysisForm(RetrievalOptions(), {}, KEY)
BAR = Bar("Retrieval test, {model}", unit="tests")


def tests_table(lm: LoadedModel, found: RetrievalResult) -> pd.DataFrame:
    """One row per test: its length and depth, where the needle lies, and what the model decoded."""
    decode = lm.tokenizer.decode
    return pd.DataFrame(
        [
            {"length": t.length, "depth": t.depth, "needle_start": t.needle_span[0],
             "needle_end": t.needle_span[1], "decoded": decode(t.decoded_ids), "forced": t.forced,
             "recall": t.recall, "counts": t.counts}
            for t in found.tests
        ]
    )  # fmt: skip


def on_haystack(lm: LoadedModel, choice: CorpusChoice | None, options: RetrievalOptions) -> tuple[AnalysisRun, str]:
    """The test with the page's corpus as the haystack, else (a result file shown, or a corpus with fewer tokens than
    the haystack takes) with UD English EWT dev; and the haystack in words."""
    name = lm.facts.name
    if choice is None:
        why = "a result file is shown, not a corpus: the haystack is UD English EWT dev"
    else:
        try:
            run = computed("retrieval", name, choice.fingerprint, options, {"corpus": choice.inputs}, BAR)
            return run, f"the page's corpus, {choice.label} ({choice.n_inputs} inputs one after another)"
        except CorpusError as exc:  # too short: said, and the default haystack used
            why = f"{choice.label} ({choice.n_inputs} inputs) is too short: {exc} The haystack is UD English EWT dev"
    return computed("retrieval", name, "", options, {"corpus": HAYSTACK}, BAR), why


def retrieval_test(lm: LoadedModel, choice: CorpusChoice | None) -> None:
    """The needle and its test's options, the cost, then (when asked) each head's retrieval score and the tests, on
    the page's corpus (`choice`) as the haystack where it is long enough."""
    st.markdown(
        "Wu et al. (2024): hide a sentence (the needle) in a long text (the haystack: the page's corpus, its inputs "
        "one after another, or UD English EWT dev where it is too short) at several depths, ask for it, and let the model answer greedily. A head *retrieves* when, at a decoding step, the key "
        "it attends to most lies in the needle and holds the token just produced; its score is the share of the "
        "needle it so copies, over the tests that retrieved the needle (as in Wu et al.'s code: the needle's ROUGE-1 "
        "recall in the answer above 0.5; forced tests always count). Above 0.1: a retrieval head."
    )
    if not lm.facts.causal:
        st.info(f"{lm.facts.name} is not a decoder: the retrieval test asks the model to generate (decoders only).")
        return
    with st.expander("The needle, the question, the lengths and depths"):
        try:
            options = FORM.bind()
        except ValueError as exc:  # an empty needle, a depth outside 0..1: said, and the defaults kept
            st.warning(f"{exc}. The defaults are used.")
            forget(FORM.others().values())
            options = FORM.bind()
        FORM.other_widgets()
    depths = len(options.depth_list())
    lengths = options.length_list() or ("the longest it takes",)
    st.caption(f"{depths} depths × {len(lengths)} lengths ({', '.join(map(str, lengths))} tokens): each test is one "
               "prefill of the haystack and up to the needle's length + 5 decoding steps.")  # fmt: skip
    if not asked("Run the retrieval test", f"compute:{KEY}:{lm.facts.name}", (lm.facts.name, options)):
        return
    try:
        run, haystack = on_haystack(lm, choice, options)
    except REFUSED as exc:  # a model too short for the needle, ...: said in words
        st.warning(f"The retrieval test cannot run on {lm.facts.name}: {exc}")
        return
    found: RetrievalResult = run.result
    st.caption(f"Haystack: {haystack}. {found.counted} of {len(found.tests)} tests count.")
    if found.reason is not None:
        st.info(f"No retrieval scores for {lm.facts.name}: {found.reason}")
    else:
        chart(retrieval_heatmap(found.scores, found.threshold), "retrieval_scores", f"{KEY}_scores")
    heads = ", ".join(head_label(l, h) for l, h in found.heads) or "none"
    st.markdown(f"Retrieval heads (score above {found.threshold:g}): **{heads}**.")
    table = tests_table(lm, found)
    data_table(table, key=f"{KEY}_tests")
    download_table(table, "retrieval_tests", key=f"{KEY}_tests_csv")
    download_json(run.to_json, "retrieval", key=f"{KEY}_json")  # the command's JSON
