"""The Head roles page's state: its options in the URL, one model's roles as shown (shipped, computed, or from a result
file) with the probe's text for the Live page, the second model's beside it, and the computations the page asks
for (the roles over a model's checkpoints, the retrieval test), each cached."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import streamlit as st

from attnlib.analyses.roles import ProbeText, RolesOptions, RolesResult, probe_text
from attnlib.core.model import LoadedModel
from attnlib.views.roles import role_thresholds
from ui.sources.corpus_page import CorpusPage, Shown, file_shown_as
from ui.sources.corpus_picker import CorpusChoice
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import AnalysisForm, Option
from ui.sources.result_source import Bar

KEY = "roles"  # widget keys and download names start with it
DETECT_LIMIT = 20  # detection's default corpus: the first 20 inputs (the probe needs none)
FORM = AnalysisForm(RolesOptions(), {}, KEY, fixed=("checkpoints",))  # checkpoints: the Over training tab's
PICK = Option(f"{KEY}_pick", "pick", "", omit_default=True)  # the head opened on the probe: "layer-head", from 1


@dataclass
class RoleScores:
    """One model's roles as the page draws them, read from the result's JSON (the command's keys, heads 0-based): the
    same for a result computed here, shipped, or opened from a file."""

    json: dict[str, Any]

    def scores(self) -> dict[str, np.ndarray | None]:
        """Each score [layers, heads] (copying None where undefined)."""
        return {k: None if v is None else np.asarray(v, float) for k, v in self.json["scores"].items()}

    @property
    def shape(self) -> tuple[int, int]:
        """(layers, heads)."""
        first = np.asarray(self.json["scores"]["induction"])
        return int(first.shape[0]), int(first.shape[1])

    @property
    def gain(self) -> float | None:
        """The in-context gain G in nats (None without a next-token loss)."""
        return self.json.get("in_context_gain")

    @property
    def thresholds(self) -> dict[str, float]:
        """Each role's threshold, keyed by its score's name (the sink's is first_share's)."""
        return role_thresholds(self.json["thresholds"])

    @property
    def notes(self) -> dict[str, str]:
        """Why a part is missing or shortened, in words (copying, in_context_gain, probe)."""
        return dict(self.json.get("notes") or {})

    @property
    def probe(self) -> dict[str, Any]:
        """The probe: its sequences' ids, repeat_length, repeats and BOS."""
        return self.json["probe"]

    def detect(self) -> dict[str, dict[str, np.ndarray]] | None:
        """Detection's scores {measure: {pattern: [layers, heads]}}, when text or a corpus was given."""
        found = self.json.get("detect")
        if not found:
            return None
        return {m: {p: np.asarray(v, float) for p, v in by.items()} for m, by in found.items()}


ShownRoles = Shown[RolesResult]  # one model's roles result as the page shows it


def roles_of(view: ShownRoles) -> RoleScores:
    """A shown result's roles, read from its JSON."""
    return RoleScores(view.result.to_json())


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


@st.cache_data(max_entries=8, show_spinner=False)
def cached_probe_text(model_name: str, length: int) -> ProbeText:
    """The probe as a text for the Live page, once per model."""
    return probe_text(model_named(model_name), length)


PAGE: CorpusPage[RolesOptions, ShownRoles] = CorpusPage(
    KEY,
    "roles",
    options_sidebar,
    from_file=file_shown_as,
    default_limit=DETECT_LIMIT,
    bar=Bar("Head roles, {model}"),
    ask_first=cost_sentence,
)
