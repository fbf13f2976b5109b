"""The Head roles page's Over training tab: each role's largest score over the heads and the in-context gain at each
checkpoint of the loaded model (METHODS §20), where the model has checkpoints here (the decoder trained in this
repository ships its own)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

from app_pages.roles.probe import default_corpus
from attnlib.analyses.base import AnalysisRun
from attnlib.analyses.roles import ROLES, RolesOptions, RolesResult, checkpoint_table
from attnlib.core.model import TRAINED_MODEL, LoadedModel, ModelLoadError, checkpoints_of, split_revision
from attnlib.present.tour import page_link
from attnlib.views.roles import training_figure
from ui.sources.result_source import Bar, computed, shipped
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.progress import asked

KEY = "roles_training"


def roles_over_training(
    model_name: str, checkpoints: tuple[str, ...], options: RolesOptions
) -> tuple[AnalysisRun, str]:
    """The roles of every checkpoint, and where they come from: shipped (with detection on the page's default
    corpus), else computed here once per model, list and the options that decide what is computed (not the
    thresholds, which only colour)."""
    wanted = replace(ROLES.computed(options), checkpoints=checkpoints)
    found: tuple[AnalysisRun, str] | None = shipped("roles", model_name, default_corpus(), wanted)
    if found is not None:
        return found[0].as_options(options), f"precomputed, shipped with the app ({found[1]})"
    bar = Bar(f"Head roles over {len(checkpoints)} checkpoints of {{model}}", unit="sequences")
    return computed("roles", model_name, "", wanted, None, bar).as_options(options), "computed here"


def training_lines(model_name: str, found: RolesResult, key: str) -> pd.DataFrame:
    """The lines over the checkpoints; their table (step, each score's largest value, the gain)."""
    table = checkpoint_table(found)
    chart(training_figure(model_name, table), "roles_over_training", key)
    return table


def listed_checkpoints(name: str) -> tuple[str, ...]:
    """The checkpoints of a model (or of the model a checkpoint belongs to: `name@step<N>`, a folder's step<N>/);
    none when it has none."""
    for candidate in (name, split_revision(name)[0], str(Path(name).parent)):
        try:
            return tuple(checkpoints_of(candidate))
        except ModelLoadError:
            continue
    return ()


def over_training(lm: LoadedModel, options: RolesOptions) -> None:
    """The loaded model's checkpoints: the cost, then (when asked) the lines and their table; a model without
    checkpoints is pointed to the trained decoder and to the command line."""
    name = lm.facts.name
    checkpoints = listed_checkpoints(name)
    st.markdown(
        "A model saved at checkpoints along its training: at each, the probe's scores (the largest over the heads) "
        "and the in-context gain G, so that a phase change shows where one happens (Olsson et al. 2022). The x axis "
        "is the training step each checkpoint's name carries (`step1000`)."
    )
    if not checkpoints:
        st.info(
            f"{name} has no checkpoints here. The decoder trained in this repository has: "
            f"[open {TRAINED_MODEL}]({page_link('head-roles', model=TRAINED_MODEL, tab='training')}). "
            "Any model's checkpoints on the command line: `attnlib roles --checkpoints A B ...` (folders, or Hub ids "
            "with a revision, e.g. `EleutherAI/pythia-70m@step1000`), then open the result file here."
        )
        return
    st.caption(f"{len(checkpoints)} checkpoints: each loaded and probed ({options.sequences} sequences).")
    what = (name, checkpoints, ROLES.computed(options))
    if not asked(f"Compute over {len(checkpoints)} checkpoints", f"compute:{KEY}:{name}", what):
        return
    run, _ = roles_over_training(name, checkpoints, options)
    table = training_lines(name, run.result, KEY)
    data_table(table, key=f"{KEY}_table")
    download_table(table, "roles_over_training", key=f"{KEY}_csv")
    download_json(run.to_json, "roles_over_training", key=f"{KEY}_json")  # the command's JSON
