"""Special tokens: where attention goes over a corpus ([CLS], [SEP], punctuation), offsets, entropy, head map (Clark §3)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.corpus import CorpusError
from attnlib.gradient_importance import GradientImportanceResult, gradient_importance, unavailable_reason
from attnlib.head_distances import BROAD_ENTROPY_FRACTION, SHARE_THRESHOLD, HeadMap, special_from_json
from attnlib.model import LoadedModel
from attnlib.runner import InputError
from attnlib.special import STAT_KEYS, SpecialTokenResult, heads_above
from attnlib.special_tokens import special_tokens
from figures.special_tokens import (
    entropy_figure,
    gradient_figure,
    head_heatmaps,
    head_label,
    head_map_figure,
    layer_lines_with_head_dots,
)
from ui.corpus_picker import corpus_picker
from ui.downloads import download_figure, download_json, download_table
from ui.model_sidebar import current_model, model_named
from ui.page_state import Option, bind
from ui.progress import progress
from ui.result_file import loaded_result

KEY = "special"
PUNCT_OPTIONS = {"clark": '"." and "," (Clark et al.)', "all": "all punctuation"}
PUNCT = Option(f"{KEY}_punct", "punct", "clark", list(PUNCT_OPTIONS))
HEAD_MAP = Option(f"{KEY}_map", "map", True)
GRADIENTS = Option(f"{KEY}_grad", "grad", True)
NAMES = {
    "cls": "[CLS]",
    "sep": "[SEP]",
    "punct": "punctuation",
    "other": "other tokens",
    "prev": "previous token",
    "self": "the token itself",
    "next": "next token",
    "sep_to_sep": "[SEP] rows to [SEP]",
    "rest_to_sep": "other rows to [SEP]",
    "entropy": "entropy",
    "cls_entropy": "[CLS]-row entropy",
}


@dataclass
class Shown:
    """What the page shows: the statistics, where they come from, and why gradient importance is missing (if so)."""

    special: SpecialTokenResult
    head_map: HeadMap | None
    gradients: GradientImportanceResult | None
    corpus: str
    model: str
    grad_reason: str | None
    from_file: bool


@st.cache_data(max_entries=8, show_spinner=False)
def compute(
    model_name: str, fingerprint: str, all_punct: bool, with_map: bool, with_gradients: bool, _inputs: list
) -> tuple[SpecialTokenResult, HeadMap | None, GradientImportanceResult | None]:
    """Run the corpus once with every accumulator, then the gradients if asked (cached per model, corpus, options).

    Returns library dataclasses only: the cache pickles its values, and a class defined in a page cannot be pickled."""
    lm = model_named(model_name)
    with progress("Running the model") as report:
        run = special_tokens(lm, _inputs, all_punct, with_map, progress=report)
    special, hm = run.special, run.head_map
    if not with_gradients:
        return special, hm, None
    with progress("Gradient importance") as report:
        return special, hm, gradient_importance(lm, _inputs, progress=report)


def options_sidebar(lm: LoadedModel, from_file: bool) -> tuple[dict, str | None]:
    """The page's options (kept in the URL) and why gradient importance cannot be computed (None when it can)."""
    values = bind([PUNCT, HEAD_MAP, GRADIENTS])
    grad_reason = unavailable_reason(lm)
    with st.sidebar:
        st.subheader("Options")
        st.radio("Punctuation", list(PUNCT_OPTIONS), format_func=PUNCT_OPTIONS.get, key=PUNCT.key)
        st.checkbox("Head map (Jensen-Shannon distances)", key=HEAD_MAP.key)
        if grad_reason is None:
            st.checkbox("Gradient importance (a second, slower pass)", key=GRADIENTS.key)
        else:
            st.caption("Gradient importance needs a model with a trained masked-LM head.")
        if from_file:
            st.caption("These options apply when computing; the loaded file's own are named above.")
    return values, grad_reason


def shown_result(lm: LoadedModel) -> Shown | None:
    """The statistics of an uploaded result file, else of the chosen corpus; None (with a message) when neither."""
    loaded = loaded_result(KEY, "special", lambda record: special_from_json(record.result))
    choice = corpus_picker(KEY) if loaded is None else None
    values, grad_reason = options_sidebar(lm, loaded is not None)
    if loaded is not None:
        record, (special, hm) = loaded
        reason = grad_reason or "result files hold no gradient importance; compute on the page to see it."
        return Shown(special, hm, None, record.corpus.get("name", "?"), record.model, reason, True)
    if choice is None:
        return None
    want_gradients = values["grad"] and grad_reason is None
    try:
        special, hm, grads = compute(
            lm.facts.name, choice.fingerprint, values["punct"] == "all", values["map"], want_gradients, choice.inputs
        )
    except (CorpusError, InputError, ValueError) as exc:
        st.error(f"The corpus could not be analysed: {exc}")
        return None
    return Shown(special, hm, grads, choice.label, lm.facts.name, grad_reason, False)


def _per_layer_table(special: SpecialTokenResult) -> pd.DataFrame:
    table = pd.DataFrame(special.layer_rows())
    table.insert(0, "layer", np.arange(1, len(table) + 1))
    return table


def _per_head_table(special: SpecialTokenResult, hm: HeadMap | None) -> pd.DataFrame:
    n_layers, n_heads = special.heads["cls"].shape
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    table = pd.DataFrame(
        {"head": [head_label(l, h) for l, h in zip(layer, head)], "layer": layer + 1, "head_in_layer": head + 1}
    )
    for key in STAT_KEYS:
        table[key] = special.heads[key].ravel()
    if hm is not None:
        table["behaviour"] = hm.labels
    return table


def _figure(fig, name: str) -> None:
    st.plotly_chart(fig, key=f"{KEY}_{name}_chart")
    download_figure(fig, name, key=f"{KEY}_{name}_fig")


def _heads_over_half(special: SpecialTokenResult, keys: list[str]) -> pd.DataFrame:
    rows = [
        {"head": head_label(l, h), "attends to": NAMES[key], "share": round(v, 3)}
        for key in keys
        for l, h, v in heads_above(special.heads[key], SHARE_THRESHOLD)
    ]
    return pd.DataFrame(rows, columns=["head", "attends to", "share"])


def lines_beside_heatmaps(special: SpecialTokenResult, keys: list[str], titles: tuple[str, str, str], names: str):
    """Layer lines with head dots (left) and per-head heatmaps (right) of some statistics; names: "left right"."""
    stats = {k: special.heads[k] for k in keys}
    line_title, y_title, heat_title = titles
    left, right = st.columns(2)
    with left:
        _figure(layer_lines_with_head_dots(stats, NAMES, line_title, y_title), names.split()[0])
    with right:
        _figure(head_heatmaps(stats, NAMES, heat_title), names.split()[1])


def shares_tab(special: SpecialTokenResult) -> None:
    """Shares of attention to [CLS], [SEP], punctuation and the rest (Clark Fig. 2)."""
    st.markdown(
        "Mean share of attention each query row sends to [CLS], [SEP], punctuation and every other token "
        "(METHODS §2): lines are layer means, dots are heads (Clark Fig. 2)."
    )
    titles = ("Share of attention per layer", "share of attention", "Share of attention per head")
    lines_beside_heatmaps(special, ["cls", "sep", "punct", "other"], titles, "shares_per_layer shares_per_head")


def sep_tab(special: SpecialTokenResult) -> None:
    """[SEP] as a no-op: attention to [SEP] from [SEP] rows and from the others."""
    st.markdown(
        "Clark et al. found that heads attending to [SEP] do not gather the segment there: the [SEP] rows "
        "send almost all their attention (>90% in BERT-base) to the [SEP]s themselves, as a no-op. "
        "`sep_to_sep` is the mean over [SEP] query rows of their mass to [SEP] keys; `rest_to_sep` the "
        "same over all other rows. Each input's mean comes first, then the mean over inputs."
    )
    titles = ("Attention to [SEP] from [SEP] rows and from the rest", "mass to [SEP]", "Attention to [SEP] per head")
    lines_beside_heatmaps(special, ["sep_to_sep", "rest_to_sep"], titles, "sep_no_op sep_no_op_heads")


def offsets_tab(special: SpecialTokenResult) -> None:
    """Attention to the previous token, the token itself and the next one, and the heads above the threshold."""
    st.markdown(
        "Share of attention to the previous token, the token itself and the next token "
        f"(METHODS §2). Heads above {SHARE_THRESHOLD} are named below."
    )
    offsets = {k: special.heads[k] for k in ("prev", "self", "next")}
    _figure(
        layer_lines_with_head_dots(offsets, NAMES, "Attention to nearby tokens", "share of attention"),
        "offsets_per_layer",
    )
    _figure(head_heatmaps(offsets, NAMES, "Attention to nearby tokens per head", cols=3), "offsets_per_head")
    named = _heads_over_half(special, ["prev", "self", "next"])
    if named.empty:
        st.info(f"No head gives more than {SHARE_THRESHOLD} of its attention to the previous, same or next token.")
    else:
        st.dataframe(named, hide_index=True)
        download_table(named, "offset_heads", key=f"{KEY}_offset_heads_csv")


def entropy_tab(special: SpecialTokenResult) -> None:
    """Mean entropy of each head's rows and of the [CLS] row (Clark Fig. 4)."""
    st.markdown(
        "Mean entropy (nats) of each head's attention rows, and of the [CLS] row alone (METHODS §3, "
        "Clark Fig. 4). The dashed line is uniform attention, the mean of ln n over inputs: heads near it "
        "attend broadly, heads near 0 look at one token."
    )
    _figure(entropy_figure(special.heads["entropy"], special.heads["cls_entropy"], special.uniform_entropy), "entropy")


def head_map_tab(hm: HeadMap | None, from_file: bool) -> None:
    """The MDS map of the heads by Jensen-Shannon divergence, with the behaviour labels."""
    if hm is None:
        st.info(
            "This result file has no head map: run the command with --head-map to include it."
            if from_file
            else "Switch on *Head map* in the sidebar to compute the Jensen-Shannon distances between all heads."
        )
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
    _figure(head_map_figure(hm.coords, hm.layer, hm.head, hm.labels), "head_map")
    names = [head_label(l, h) for l, h in zip(hm.layer, hm.head)]
    distances = pd.DataFrame(hm.divergence, index=names, columns=names)
    download_table(distances.reset_index(names="head"), "js_divergence", key=f"{KEY}_js_csv")


def gradient_tab(gradients: GradientImportanceResult | None, grad_reason: str | None) -> None:
    """Gradient of the masked-LM loss with respect to attention, to [SEP] and to all keys (Clark Fig. 3)."""
    if grad_reason is not None:
        st.info(f"Gradient importance is not shown: {grad_reason}")
        return
    if gradients is None:
        st.info("Switch on *Gradient importance* in the sidebar to compute it (a forward and backward pass per input).")
        return
    g = gradients.layers
    st.markdown(
        "Mean magnitude of the gradient of the masked-LM loss (15% of non-special tokens masked, fixed "
        "seed) with respect to each attention weight, over heads, rows and [SEP] keys, against all keys "
        "(METHODS §5, Clark Fig. 3). Each input's mean comes first, then the mean over inputs."
    )
    _figure(gradient_figure(g["sep"], g["all"]), "gradient_importance")
    grad_table = pd.DataFrame({"layer": np.arange(1, len(g["sep"]) + 1), "to_sep": g["sep"], "to_all": g["all"]})
    download_table(grad_table, "gradient_importance", key=f"{KEY}_grad_csv")


def tables_tab(shown: Shown) -> None:
    """Per-layer and per-head tables, and everything as JSON (0-based)."""
    st.markdown("Per layer (mean over heads); layers from 1.")
    per_layer = _per_layer_table(shown.special)
    st.dataframe(per_layer.round(4), hide_index=True)
    download_table(per_layer, "special_tokens_per_layer", key=f"{KEY}_layers_csv")
    st.markdown("Per head (layer-head from 1).")
    per_head = _per_head_table(shown.special, shown.head_map)
    st.dataframe(per_head.round(4), hide_index=True)
    download_table(per_head, "special_tokens_per_head", key=f"{KEY}_heads_csv")
    everything = {"model": shown.model, "corpus": shown.corpus, **shown.special.to_json()}
    if shown.head_map is not None:
        everything["head_map"] = shown.head_map.to_json()
    if shown.gradients is not None:
        everything["gradient_importance"] = shown.gradients.to_json()
    download_json(everything, "special_tokens", key=f"{KEY}_json")
    st.caption("The JSON counts layers and heads from 0, like the command line.")


def summary(shown: Shown, lm: LoadedModel) -> None:
    """Where the numbers come from, and how many inputs were truncated."""
    special = shown.special
    st.caption(
        f"{special.n_inputs} inputs from {shown.corpus}; {shown.model}. "
        f"Punctuation: {PUNCT_OPTIONS['all' if special.all_punct else 'clark']}."
    )
    if special.n_truncated:
        longest = "the model's maximum length" if shown.from_file else f"{lm.facts.max_length} tokens"
        st.warning(f"{special.n_truncated} inputs were longer than {longest} and were truncated.")


TABS = ["Shares", "[SEP] as no-op", "Offset heads", "Entropy", "Head map", "Gradient importance", "Tables"]

st.title("Special tokens")
st.caption(
    "Where attention goes over a whole corpus, after section 3 of Clark et al. (2019), *What Does BERT Look At?* "
    "Every number follows METHODS.md sections 1-5. **Layers and heads are numbered from 1 on this page**, "
    "written layer-head as in the paper (8-10 is layer 8, head 10); the JSON download and the command line "
    "`python -m attnlib special` count from 0."
)
lm = current_model()
shown = shown_result(lm)
if shown is None:
    st.stop()
summary(shown, lm)
tabs = st.tabs(TABS)
for tab, render in zip(tabs, [shares_tab, sep_tab, offsets_tab, entropy_tab]):
    with tab:
        render(shown.special)
with tabs[4]:
    head_map_tab(shown.head_map, shown.from_file)
with tabs[5]:
    gradient_tab(shown.gradients, shown.grad_reason)
with tabs[6]:
    tables_tab(shown)
