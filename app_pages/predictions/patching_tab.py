"""The Predictions page's Patching tab (METHODS §22): a clean and a corrupted prompt (both in the URL; a button makes
the corrupted one), the two runs' predictions and the metric, every head patched (denoising or noising), the heads x
positions and layers x positions grids, attribution patching beside the exact scores with their correlation, and a
file of pairs' means with standard errors; every result is `attnlib patch`'s, computed once (the skeleton's cache)."""

from __future__ import annotations

import hashlib
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from app_pages.predictions.prompt_state import cached_lens
from attnlib.analyses.circuit import INDUCTION_PAIRS, corrupted_prompt
from attnlib.analyses.patch import PatchOptions, PatchResult, read_pairs
from attnlib.core.model import TRAINED_MODEL, LoadedModel
from attnlib.stats.patching import Grid, unavailable_reason
from attnlib.views.drawing import figures_of
from ui.sources.compare import compared_model
from ui.sources.live_inputs import pretty_token
from ui.sources.page_state import Option, bind
from ui.sources.result_source import REFUSED, Bar, computed
from ui.widgets.data_table import data_table
from ui.widgets.downloads import chart, download_json, download_table
from ui.widgets.methods import cite_methods
from ui.widgets.progress import asked, estimated

KEY = "patch"  # widget keys and download names start with it
SHIPPED_PAIRS = INDUCTION_PAIRS
DEFAULT_PAIR = (  # any decoder's first pair: the name that repeats changes (one token in GPT-2's vocabulary)
    "When Mary and John went to the store, John gave a drink to",
    "When Mary and John went to the store, Paul gave a drink to",
)
MASKED_PAIR = ("Paris is the capital of {mask}.", "Rome is the capital of {mask}.")  # a masked LM's first pair
METRICS = {"logit-diff": "logit-diff", "logprob": "logprob"}
DIRECTIONS = {"denoise": "denoise", "noise": "noise"}
QUICK_SECONDS = 5.0  # work estimated below this runs without asking
QUICK_WEIGHTS = 1e9  # ... where parameters x patched runs stay below this too
TOP = 5  # tokens of each run's prediction

CLEAN = Option(f"{KEY}_clean", "clean", "")
CORRUPTED = Option(f"{KEY}_corrupted", "corrupted", "")
POSITION = Option(f"{KEY}_position", "ppos", -1, omit_default=True)
ANSWER = Option(f"{KEY}_answer", "answer", "")
WRONG = Option(f"{KEY}_wrong", "wrong", "")
METRIC = Option(f"{KEY}_metric", "metric", "logit-diff", METRICS, omit_default=True)
DIRECTION = Option(f"{KEY}_direction", "direction", "denoise", DIRECTIONS, omit_default=True)
PAIR_OPTIONS = (CLEAN, CORRUPTED, POSITION, ANSWER, WRONG, METRIC, DIRECTION)
SEED = f"_{KEY}_seed"  # the corrupt button's seed, one more each press
SAID = f"_{KEY}_said"  # the corrupt button's refusal, shown under it


def default_pair(lm: LoadedModel) -> tuple[str, str]:
    """The pair shown first: the trained decoder's first shipped pair, a masked LM's city at its mask, else a name
    that repeats, changed."""
    if lm.facts.name.split("@")[0] == TRAINED_MODEL:
        clean, corrupted = SHIPPED_PAIRS.read_text(encoding="utf-8").splitlines()[0].split("\t")[:2]
        return clean, corrupted
    if not lm.facts.causal and lm.seq2seq is None:  # a masked LM: the metric at its mask
        mask = lm.tokenizer.mask_token or "[MASK]"
        return MASKED_PAIR[0].format(mask=mask), MASKED_PAIR[1].format(mask=mask)
    return DEFAULT_PAIR


def fill_defaults(lm: LoadedModel) -> None:
    """The first pair, where neither the session nor the URL gives one."""
    state = st.session_state
    for option, text in zip((CLEAN, CORRUPTED), default_pair(lm), strict=True):
        if option.key not in state and f"_kept_{option.key}" not in state and option.param not in st.query_params:
            state[option.key] = text


def corrupt(lm: LoadedModel) -> None:
    """Button callback: the corrupted prompt made from the clean one (a new draw each press), or why not."""
    state = st.session_state
    state[SEED] = state.get(SEED, -1) + 1
    try:
        state[CORRUPTED.key] = corrupted_prompt(lm, state[CLEAN.key], seed=state[SEED])
        state.pop(SAID, None)
    except REFUSED as exc:
        state[SAID] = str(exc)


def pair_inputs(lm: LoadedModel) -> PatchOptions:
    """The two prompts, the corrupt button, the metric, direction, position and answer tokens: the options."""
    fill_defaults(lm)
    values = bind(list(PAIR_OPTIONS))
    st.text_area("Clean prompt", key=CLEAN.key, height=80, help="The input whose prediction is explained.")
    st.text_area("Corrupted prompt", key=CORRUPTED.key, height=80,
                 help="As many tokens as the clean prompt; what differs is what patching traces.")  # fmt: skip
    st.button("Corrupt the first occurrence", key=f"{KEY}_corrupt", on_click=corrupt, args=(lm,),
              icon=":material/shuffle:",
              help="The corrupted prompt becomes the clean one with the tokens of the first occurrence of its longest "
              "repeated span replaced by as many random one-token words (a new draw each press).")  # fmt: skip
    if SAID in st.session_state:
        st.error(st.session_state[SAID])
    metric, direction, position, answer, wrong = st.columns([1.2, 1.2, 1, 1, 1])
    metric.radio("Metric", list(METRICS), key=METRIC.key, horizontal=True,
                 help="logit-diff: z(w) − z(w'); logprob: log p(w), at the position.")  # fmt: skip
    direction.radio("Direction", list(DIRECTIONS), key=DIRECTION.key, horizontal=True,
                    help="denoise: a head's clean value into the corrupted run; noise: its corrupted value into the "
                    "clean run. 1 is the whole difference.")  # fmt: skip
    position.number_input("Position (−1: the last)", step=1, key=POSITION.key)
    answer.text_input("Answer w", key=ANSWER.key, placeholder="the clean run's top token",
                      help="One token (a leading space counts).")  # fmt: skip
    wrong.text_input("Wrong answer w'", key=WRONG.key, placeholder="the corrupted run's top token",
                     help="One token; the logit difference only.")  # fmt: skip
    return PatchOptions(clean=values["clean"], corrupted=values["corrupted"], position=int(values["ppos"]),
                        answer=values["answer"], wrong=values["wrong"], metric=values["metric"],
                        direction=values["direction"], attribution=True)  # fmt: skip


def patched(model_name: str, options: PatchOptions, what: str) -> PatchResult:
    """`attnlib patch` of the model with these options (the skeleton's computation: once per model and options)."""
    return computed("patch", model_name, "", options, None, Bar(f"{what}, {{model}}", "pairs")).result


def runs_of(result: PatchResult, grid: Grid) -> int:
    """The patched runs a grid costs: a run per head (and per position), or per layer and position."""
    heads = sum(int(t.size) for t in result.heads.values())
    n = len((result.clean or {}).get("ids", [])) or 1
    return {
        "heads": heads,
        "heads-positions": heads * n,
        "residual": int(next(iter(result.heads.values())).shape[0]) * n,
    }[grid]


def seconds_per_run(model_name: str) -> float | None:
    """The seconds a patched run took the last time this session patched every head of this model."""
    return st.session_state.get(f"_{KEY}_per_run", {}).get(model_name)


def estimate(model_name: str, runs: int) -> str:
    """The cost of `runs` patched runs in words."""
    per = seconds_per_run(model_name)
    return f"{runs} patched runs" + ("" if per is None else f", about {max(runs * per, 0.1):.1f} s")


def go_ahead(lm: LoadedModel, runs: int, label: str, what: object) -> bool:
    """Whether to compute: at once where it is quick (measured here, and a small model: a time measured on a cache
    hit would be too short), else when the visitor asks (the cost said first)."""
    per = seconds_per_run(lm.facts.name)
    if per is not None and runs * per < QUICK_SECONDS and lm.facts.parameters * runs < QUICK_WEIGHTS:
        return True
    st.info(f"{label}: {estimate(lm.facts.name, runs)}.")
    return asked(f"Compute ({runs} runs)", f"{KEY}_ask_{abs(hash(what))}", what)


def tables_and_downloads(result: PatchResult, model_name: str, name: str) -> None:
    """The result's tables (CSV each) and its JSON."""
    for title, frame in result.tables(model_name).items():
        st.markdown(f"**{title}**")
        slug = f"{KEY}_{name}_{title.split()[-1]}"
        data_table(frame, key=f"{slug}_table", formats={c: "%.4f" for c in ("score", "se", "attribution")})
        download_table(frame, f"{model_name.replace('/', '_')}_{name}_{title.split()[-1]}", key=f"{slug}_csv")
    download_json(
        {"model": model_name, **result.to_json()}, f"{model_name.replace('/', '_')}_{name}", f"{KEY}_{name}_json"
    )


def runs_section(lm: LoadedModel, result: PatchResult) -> None:
    """The two inputs token by token, each run's prediction at the position, and the metric."""
    name = lm.facts.name
    clean, corrupted = result.clean or {}, result.corrupted or {}
    t = int(result.position or 0)
    tokens = pd.DataFrame({"position": range(len(clean.get("tokens", []))),
                           "clean": [pretty_token(x) for x in clean.get("tokens", [])],
                           "corrupted": [pretty_token(x) for x in corrupted.get("tokens", [])]})  # fmt: skip
    tokens["differs"] = tokens["clean"] != tokens["corrupted"]
    left, right = st.columns([1, 1])
    with left:
        st.markdown(f"**The two inputs** (the metric at position {t}: {tokens['clean'].get(t, '?')!r})")
        data_table(tokens[tokens["differs"] | (tokens["position"] == t)], key=f"{KEY}_tokens")
        download_table(tokens, f"{name.replace('/', '_')}_patch_tokens", key=f"{KEY}_tokens_csv")
    with right:
        st.markdown("**The two runs' predictions**")
        for run, text in (("clean", st.session_state[CLEAN.key]), ("corrupted", st.session_state[CORRUPTED.key])):
            try:
                top = cached_lens(name, text, t, "", "", "normalise")["prediction"]["top"][:TOP]
                st.caption(f"{run}: " + ", ".join(f"{pretty_token(p['token'])!r} {p['probability']:.2f}" for p in top))
            except (*REFUSED, KeyError) as exc:
                st.caption(f"{run}: no prediction shown ({exc}).")
    said = {"logit-diff": "z(w) − z(w')", "logprob": "log p(w)"}[result.metric]
    words = f"w = {pretty_token(str((result.answer or {}).get('token')))!r}" + (
        f", w' = {pretty_token(str(result.wrong['token']))!r}" if result.wrong else ""
    )
    m_c, m_r = float(result.clean_metric or 0), float(result.corrupted_metric or 0)
    a, b, c = st.columns(3)
    a.metric(f"Clean metric {said}", f"{m_c:.3f}")
    b.metric(f"Corrupted metric {said}", f"{m_r:.3f}")
    c.metric("Difference m_c − m_r (a score of 1)", f"{m_c - m_r:.3f}")
    st.caption(f"The metric's tokens: {words}.")


def heads_section(lm: LoadedModel, result: PatchResult) -> None:
    """Every head's score, attribution patching beside it with Pearson's r, the tables and downloads."""
    name = lm.facts.name
    figures = figures_of(result, name)
    parts = len(result.heads)
    st.subheader("Every head patched")
    for k, figure in enumerate(figures[:parts]):
        chart(figure, f"{KEY}_heads_{k}", f"{KEY}_heads_{k}")
    st.subheader("Attribution patching beside the exact scores")
    st.markdown(
        "Each head's first-order estimate (Nanda 2023): the difference of its clean and corrupted values times the "
        "metric's gradient, one backward pass for every head. Where the points leave the line y = x the shortcut "
        "does not hold."
    )
    if result.attribution_r is not None:
        st.metric("Pearson r (attribution against exact)", f"{result.attribution_r:.3f}")
    left, right = st.columns(2)
    with left:
        for k, figure in enumerate(figures[parts : 2 * parts]):
            chart(figure, f"{KEY}_attribution_{k}", f"{KEY}_attribution_{k}")
    with right:
        scatter = figures[-1]
        scatter.update_layout(title_text=scatter.layout.title.text.replace(" (Pearson", "<br>(Pearson"))  # half width
        chart(scatter, f"{KEY}_scatter", f"{KEY}_scatter")
    tables_and_downloads(result, name, "heads")


def grids_section(lm: LoadedModel, options: PatchOptions, heads: PatchResult) -> None:
    """The heads x positions and layers x positions grids, each computed when quick or asked for."""
    name = lm.facts.name
    st.subheader("Heads × positions and layers × positions")
    grids: tuple[tuple[Grid, str, str], ...] = (
        ("heads-positions", "Every head at one position at a time", "heads_positions"),
        ("residual", "The residual stream at each layer's input and position", "residual"),
    )
    for grid, label, words in grids:
        runs = runs_of(heads, grid)
        shown = replace(options, grid=grid, attribution=False)
        if not go_ahead(lm, runs, label, (name, shown)):
            continue
        with estimated(label) as (say, _):
            say(estimate(name, runs))
            result = patched(name, shown, label)
        for k, figure in enumerate(figures_of(result, name)[len(result.heads) :]):
            chart(figure, f"{KEY}_{words}_{k}", f"{KEY}_{words}_{k}")
        download_json({"model": name, **result.to_json()}, f"{name.replace('/', '_')}_{words}", f"{KEY}_{words}_json")
        download_table(grid_table(result, name), f"{name.replace('/', '_')}_{words}", key=f"{KEY}_{words}_csv")


def grid_table(result: PatchResult, model_name: str) -> pd.DataFrame:
    """A grid's cells (layers and heads from 1, positions from 0): the residual stream's, or every head's at each
    position."""
    if result.residual is not None:
        return result.tables(model_name)["Patching the residual stream"]
    rows = [{"model": model_name, "part": part, "layer": l + 1, "head": h + 1, "position": q, "score": float(v)}
            for part, grid in (result.heads_positions or {}).items() for (l, h, q), v in np.ndenumerate(grid)]  # fmt: skip
    return pd.DataFrame(rows)


def pair_file(lm: LoadedModel) -> tuple[Path, str] | None:
    """The pair file: the shipped set (offered for the trained decoder) or an upload, kept under its own name."""
    shipped = lm.facts.name.split("@")[0] == TRAINED_MODEL
    sources = ([f"The shipped pair set ({SHIPPED_PAIRS.name})"] if shipped else []) + ["Upload a pair file"]
    source = st.radio("Pairs", sources, key=f"{KEY}_pairs_source", horizontal=True)
    if source != "Upload a pair file":
        return SHIPPED_PAIRS, SHIPPED_PAIRS.name
    upload = st.file_uploader("A pair file: one pair a line, clean TAB corrupted [TAB answer [TAB wrong]]",
                              type=["tsv", "txt"], key=f"{KEY}_pairs_upload")  # fmt: skip
    if upload is None:
        return None
    data = upload.getvalue()
    folder = Path(tempfile.gettempdir()) / "attnlib-pairs" / hashlib.sha1(data).hexdigest()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(upload.name).name
    path.write_bytes(data)
    return path, upload.name


def pairs_section(lm: LoadedModel, options: PatchOptions, heads: PatchResult) -> None:
    """A file of pairs: every head's mean score with its standard error (the metric, direction and position above)."""
    name = lm.facts.name
    st.subheader("Many pairs: the mean score and its standard error")
    found = pair_file(lm)
    if found is None:
        return
    path, shown_name = found
    try:
        count = len(read_pairs(path))
    except REFUSED as exc:
        st.error(str(exc).replace(str(path), shown_name))
        return
    asked_for = PatchOptions(position=options.position, metric=options.metric, direction=options.direction,
                             pairs=str(path))  # fmt: skip
    per_pair = runs_of(heads, "heads") + 2  # and the clean and corrupted runs
    if not go_ahead(lm, count * per_pair, f"{count} pairs, every head of each", (name, asked_for)):
        return
    try:
        result = patched(name, asked_for, f"Patching {count} pairs")
    except REFUSED as exc:
        st.error(str(exc).replace(str(path), shown_name))
        return
    for k, figure in enumerate(figures_of(result, name)):
        chart(figure, f"{KEY}_pairs_{k}", f"{KEY}_pairs_{k}")
    tables_and_downloads(result, name, "pairs")


def patching_tab(lm: LoadedModel) -> None:
    """The tab: the pair's inputs, then (when the model can be patched) the runs, the heads, the grids and the pairs."""
    name = lm.facts.name
    st.markdown(
        "Which heads carry the difference between a clean and a corrupted input? Patch one head's output (its "
        "context vector, before the output projection) from one run into the other and see how much of the metric "
        "moves: 1 is the whole difference (Meng et al. 2022; Wang et al. 2022; Heimersheim & Nanda 2024)."
    )
    cite_methods(22)
    other = compared_model()
    if other is not None and other.facts.name != name:
        st.caption(f"Patching is shown for {name} alone; open {other.facts.name} as the model to patch it.")
    reason = unavailable_reason(lm)
    if reason is not None:
        st.info(reason, icon=":material/info:")
        return
    options = pair_inputs(lm)
    if not options.clean.strip() or not options.corrupted.strip():
        st.info("Type a clean and a corrupted prompt (or make the corrupted one with the button).")
        return
    started = time.perf_counter()
    try:
        result = patched(name, options, "Patching every head")
    except REFUSED as exc:
        st.error(str(exc))
        return
    elapsed = time.perf_counter() - started
    if elapsed > 0.005:  # computed, not a cache hit: how long a patched run takes here
        runs = runs_of(result, "heads") + 3  # and the clean, corrupted and backward passes
        st.session_state.setdefault(f"_{KEY}_per_run", {})[name] = elapsed / runs
    runs_section(lm, result)
    heads_section(lm, result)
    grids_section(lm, options, result)
    pairs_section(lm, options, result)
