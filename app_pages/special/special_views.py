"""What the Special tokens page's tabs share: one model's result as shown (`ShownResult`), the statistics' names,
and the helpers that draw a figure and say where two models differ most."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from attnlib.analyses.gradient import GRADIENT, GradientImportance
from attnlib.analyses.labels import TOKEN_NAMES
from attnlib.analyses.special import HeadMap, NormShareResult, SpecialOptions, SpecialTokenResult, SpecialTokens
from attnlib.present.tables import by_layer
from ui.sources.compare import difference_line
from ui.sources.corpus_page import Shown
from ui.sources.result_source import LOAD_TITLE, FromFile, uploaded_result
from ui.widgets.downloads import chart

KEY = "special"  # widget keys and download names of the page start with it
NAMES = TOKEN_NAMES


DECODER_NAMES = {"cls": "first token", "sep": "end token", "cls_entropy": "first-row entropy"}  # METHODS §18


def names_for(views: list[ShownResult]) -> dict[str, str]:
    """The statistics' names for these results: a decoder's FIRST and SEP classes named as such, both names when an
    encoder and a decoder stand side by side."""
    kinds = {v.special.causal for v in views}
    if kinds == {False}:
        return NAMES
    if kinds == {True}:
        return NAMES | DECODER_NAMES
    return NAMES | {key: f"{NAMES[key]} / {name}" for key, name in DECODER_NAMES.items()}


GRADIENT_CAVEAT = "gradients"  # the caveat saying why gradient importance cannot be computed for a model
GRADIENT_TITLE = f"{LOAD_TITLE} (gradient importance)"


@dataclass
class Chosen:
    """The page's options: the analysis's, whether to add gradient importance, and the `gradient` result file."""

    options: SpecialOptions
    gradients: bool
    gradient_file: FromFile[GradientImportance] | None = None


def gradient_file() -> FromFile[GradientImportance] | None:
    """The `gradient` command's result file (sidebar): the gradient importance of the model it names, shown in the
    Gradient tab beside that model's statistics (computed, shipped or from their own file)."""
    with st.sidebar, st.expander(GRADIENT_TITLE):
        found = uploaded_result(
            "JSON written by `python -m attnlib gradient ... --out FILE`",
            f"{KEY}_gradient_result_file",
            "gradient",
            GRADIENT.from_record,
        )
    if found is not None:
        st.info(
            f"Gradient importance of **{found.model}** from **{found.name}**, {found.record.provenance()}. Options: "
            f"{found.record.options_text()}. Remove the file (sidebar, *{GRADIENT_TITLE}*) to compute it instead."
        )
    return found


@dataclass
class ShownResult(Shown[SpecialTokens]):
    """One model's result as the page shows it (`Shown`), with gradient importance when there is one (computed, or
    from a `gradient` result file: `gradient_source` names it)."""

    gradients: GradientImportance | None = None
    gradient_source: str = ""

    @property
    def grad_reason(self) -> str | None:
        """Why gradient importance cannot be computed for this model (None when it can)."""
        return self.caveats.get(GRADIENT_CAVEAT)

    @property
    def fingerprint(self) -> str:
        return "" if self.choice is None else self.choice.fingerprint

    @property
    def special(self) -> SpecialTokenResult:
        return self.result.special

    @property
    def head_map(self) -> HeadMap | None:
        return self.result.head_map

    @property
    def norms(self) -> NormShareResult | None:
        return self.result.norms


def show_figure(fig: go.Figure, name: str) -> None:
    """A figure with its HTML download (`name`.html)."""
    chart(fig, name, f"{KEY}_{name}_chart")


def models_difference(views: list[ShownResult], per_layer: list[dict], keys: list[str], names: dict[str, str]) -> None:
    """With two models: where their per-layer values differ most (per_layer: one {key: [layers]} per view)."""
    if len(views) < 2:
        return
    depths = {len(values[keys[0]]) for values in per_layer}
    a, b = (comparable(values, keys, names, len(depths) > 1) for values in per_layer)
    none = "The two models have no layer at the same relative depth to compare."
    difference_line([v.model for v in views], a, b, none)


def comparable(per_layer: dict, keys: list[str], names: dict[str, str], relative: bool) -> dict[str, dict]:
    """by_layer's {name: {"layer 3": value}}; models of different depth meet at equal fractions of their depth."""
    if not relative:
        return by_layer(per_layer, keys, names)
    return {
        names[k]: {f"relative depth {(l + 1) / len(per_layer[k]):.2f}": float(v) for l, v in enumerate(per_layer[k])}
        for k in keys
    }


def per_model(views: list[ShownResult], keys: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """{model: {key: [layers, heads]}} of some statistics."""
    return {v.model: {k: v.special.heads[k] for k in keys} for v in views}
