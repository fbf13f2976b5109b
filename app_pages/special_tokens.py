"""Special tokens: where attention goes over a corpus ([CLS], [SEP], punctuation), offsets, entropy, head map (Clark §3)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from attnlib.corpus import CorpusError
from attnlib.engine import accumulate
from attnlib.gradient_importance import GradientImportanceResult, gradient_importance, unavailable_reason
from attnlib.head_distances import (
    BROAD_ENTROPY_FRACTION,
    SHARE_THRESHOLD,
    HeadDistances,
    HeadMap,
    head_map,
    special_from_json,
)
from attnlib.results import json_ready as to_jsonable
from attnlib.runner import InputError
from attnlib.special import STAT_KEYS, SpecialTokenResult, SpecialTokenStats, heads_above
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
from ui.model_sidebar import cached_model, current_model, local_models_allowed
from ui.result_file import loaded_result

KEY = "special"
PUNCT_OPTIONS = {"clark": '"." and "," (Clark et al.)', "all": "all punctuation"}
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


def _progress(text: str):
    """A progress bar and the callback that moves it."""
    bar = st.progress(0.0, text=text)

    def report(done: int, total: int) -> None:
        bar.progress(done / max(total, 1), text=f"{text} {done} of {total} inputs")

    return bar, report


@st.cache_data(max_entries=8, show_spinner=False)
def compute(
    model_name: str, fingerprint: str, all_punct: bool, with_map: bool, with_gradients: bool, _inputs: list
) -> tuple[SpecialTokenResult, HeadMap | None, GradientImportanceResult | None]:
    """Run the corpus once through the engine with every accumulator (cached per model, corpus and options).

    Returns library dataclasses only: the cache pickles its values, and a class defined in a page cannot be pickled."""
    lm = cached_model(model_name, local_models_allowed())
    stats = SpecialTokenStats(lm.facts.n_layers, lm.facts.n_heads, all_punct=all_punct)
    distances = HeadDistances(lm.facts.n_layers, lm.facts.n_heads) if with_map else None
    bar, report = _progress("Running the model:")
    accumulate(lm, _inputs, [a for a in (stats, distances) if a is not None], progress=report)
    bar.empty()
    special = stats.result()
    gradients = None
    if with_gradients:
        bar, report = _progress("Gradient importance:")
        gradients = gradient_importance(lm, _inputs, progress=report)
        bar.empty()
    return special, head_map(distances.result(), special) if distances else None, gradients


def _option_state() -> None:
    """Initialise the page options from the URL once per session."""
    state, params = st.session_state, st.query_params
    if f"{KEY}_punct" not in state:
        state[f"{KEY}_punct"] = params.get("punct", "clark") if params.get("punct") in PUNCT_OPTIONS else "clark"
        state[f"{KEY}_map"] = params.get("map", "1") != "0"
        state[f"{KEY}_grad"] = params.get("grad", "1") != "0"


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


st.title("Special tokens")
st.caption(
    "Where attention goes over a whole corpus, after section 3 of Clark et al. (2019), *What Does BERT Look At?* "
    "Every number follows METHODS.md sections 1-5. **Layers and heads are numbered from 1 on this page**, "
    "written layer-head as in the paper (8-10 is layer 8, head 10); the JSON download and the command line "
    "`python -m attnlib special` count from 0."
)

lm = current_model()
loaded = loaded_result(KEY, "special", lambda record: special_from_json(record.result))
choice = corpus_picker(KEY) if loaded is None else None
_option_state()
with st.sidebar:
    st.subheader("Options")
    st.radio("Punctuation", list(PUNCT_OPTIONS), format_func=PUNCT_OPTIONS.get, key=f"{KEY}_punct")
    st.checkbox("Head map (Jensen-Shannon distances)", key=f"{KEY}_map")
    grad_reason = unavailable_reason(lm)
    if grad_reason is None:
        st.checkbox("Gradient importance (a second, slower pass)", key=f"{KEY}_grad")
    else:
        st.caption("Gradient importance needs a model with a trained masked-LM head.")
    if loaded is not None:
        st.caption("These options apply when computing; the loaded file's own are named above.")
state = st.session_state
st.query_params.update(
    punct=state[f"{KEY}_punct"], map=str(int(state[f"{KEY}_map"])), grad=str(int(bool(state.get(f"{KEY}_grad"))))
)
if loaded is not None:
    record, (special, hm) = loaded
    gradients, corpus_label, model_name = None, record.corpus.get("name", "?"), record.model
    if grad_reason is None:
        grad_reason = "result files hold no gradient importance; compute on the page to see it."
elif choice is None:
    st.stop()
else:
    want_gradients = bool(state.get(f"{KEY}_grad")) and grad_reason is None
    try:
        special, hm, gradients = compute(
            lm.facts.name,
            choice.fingerprint,
            state[f"{KEY}_punct"] == "all",
            state[f"{KEY}_map"],
            want_gradients,
            _inputs=choice.inputs,
        )
    except (CorpusError, InputError, ValueError) as exc:
        st.error(f"The corpus could not be analysed: {exc}")
        st.stop()
    corpus_label, model_name = choice.label, lm.facts.name

st.caption(
    f"{special.n_inputs} inputs from {corpus_label}; {model_name}. "
    f"Punctuation: {PUNCT_OPTIONS['all' if special.all_punct else 'clark']}."
)
if special.n_truncated:
    longest = "the model's maximum length" if loaded is not None else f"{lm.facts.max_length} tokens"
    st.warning(f"{special.n_truncated} inputs were longer than {longest} and were truncated.")

tabs = st.tabs(["Shares", "[SEP] as no-op", "Offset heads", "Entropy", "Head map", "Gradient importance", "Tables"])

with tabs[0]:
    st.markdown(
        "Mean share of attention each query row sends to [CLS], [SEP], punctuation and every other token "
        "(METHODS §2): lines are layer means, dots are heads (Clark Fig. 2)."
    )
    shares = {k: special.heads[k] for k in ("cls", "sep", "punct", "other")}
    left, right = st.columns(2)
    with left:
        _figure(
            layer_lines_with_head_dots(shares, NAMES, "Share of attention per layer", "share of attention"),
            "shares_per_layer",
        )
    with right:
        _figure(head_heatmaps(shares, NAMES, "Share of attention per head"), "shares_per_head")

with tabs[1]:
    st.markdown(
        "Clark et al. found that heads attending to [SEP] do not gather the segment there: the [SEP] rows "
        "send almost all their attention (>90% in BERT-base) to the [SEP]s themselves, as a no-op. "
        "`sep_to_sep` is the mean over [SEP] query rows of their mass to [SEP] keys; `rest_to_sep` the "
        "same over all other rows. Each input's mean comes first, then the mean over inputs."
    )
    nop = {k: special.heads[k] for k in ("sep_to_sep", "rest_to_sep")}
    left, right = st.columns(2)
    with left:
        _figure(
            layer_lines_with_head_dots(
                nop, NAMES, "Attention to [SEP] from [SEP] rows and from the rest", "mass to [SEP]"
            ),
            "sep_no_op",
        )
    with right:
        _figure(head_heatmaps(nop, NAMES, "Attention to [SEP] per head"), "sep_no_op_heads")

with tabs[2]:
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

with tabs[3]:
    st.markdown(
        "Mean entropy (nats) of each head's attention rows, and of the [CLS] row alone (METHODS §3, "
        "Clark Fig. 4). The dashed line is uniform attention, the mean of ln n over inputs: heads near it "
        "attend broadly, heads near 0 look at one token."
    )
    _figure(entropy_figure(special.heads["entropy"], special.heads["cls_entropy"], special.uniform_entropy), "entropy")

with tabs[4]:
    if hm is None and loaded is not None:
        st.info("This result file has no head map: run the command with --head-map to include it.")
    elif hm is None:
        st.info("Switch on *Head map* in the sidebar to compute the Jensen-Shannon distances between all heads.")
    else:
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
        distances = pd.DataFrame(
            hm.divergence,
            index=[head_label(l, h) for l, h in zip(hm.layer, hm.head)],
            columns=[head_label(l, h) for l, h in zip(hm.layer, hm.head)],
        )
        download_table(distances.reset_index(names="head"), "js_divergence", key=f"{KEY}_js_csv")

with tabs[5]:
    if grad_reason is not None:
        st.info(f"Gradient importance is not shown: {grad_reason}")
    elif gradients is None:
        st.info("Switch on *Gradient importance* in the sidebar to compute it (a forward and backward pass per input).")
    else:
        g = gradients.layers
        st.markdown(
            "Mean magnitude of the gradient of the masked-LM loss (15% of non-special tokens masked, fixed "
            "seed) with respect to each attention weight, over heads, rows and [SEP] keys, against all keys "
            "(METHODS §5, Clark Fig. 3). Each input's mean comes first, then the mean over inputs."
        )
        _figure(gradient_figure(g["sep"], g["all"]), "gradient_importance")
        grad_table = pd.DataFrame({"layer": np.arange(1, len(g["sep"]) + 1), "to_sep": g["sep"], "to_all": g["all"]})
        download_table(grad_table, "gradient_importance", key=f"{KEY}_grad_csv")

with tabs[6]:
    st.markdown("Per layer (mean over heads); layers from 1.")
    per_layer = _per_layer_table(special)
    st.dataframe(per_layer.round(4), hide_index=True)
    download_table(per_layer, "special_tokens_per_layer", key=f"{KEY}_layers_csv")
    st.markdown("Per head (layer-head from 1).")
    per_head = _per_head_table(special, hm)
    st.dataframe(per_head.round(4), hide_index=True)
    download_table(per_head, "special_tokens_per_head", key=f"{KEY}_heads_csv")
    everything = {"model": model_name, "corpus": corpus_label, **special.to_json()}
    if hm is not None:
        everything["head_map"] = hm.to_json()
    if gradients is not None:
        everything["gradient_importance"] = gradients.to_json()
    download_json(to_jsonable(everything), "special_tokens", key=f"{KEY}_json")
    st.caption("The JSON counts layers and heads from 0, like the command line.")
