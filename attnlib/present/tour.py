"""The classroom tour: the papers' findings as steps, and the "what to notice" line of each, computed from results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import numpy as np

from attnlib.analyses.base import Options
from attnlib.analyses.deps import ALL, DependencyRow, DependencyTable, DepsOptions
from attnlib.analyses.gradient import GradientOptions
from attnlib.analyses.importance import ImportanceOptions
from attnlib.analyses.labels import CLASS_NAMES, TOKEN_NAMES
from attnlib.analyses.positions import PositionOptions, PositionsResult
from attnlib.analyses.special import SpecialOptions, WeightNormGap
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV
from attnlib.stats.gradient import GradientImportanceResult
from attnlib.stats.head_distances import BROAD_ENTROPY_FRACTION, SHARE_THRESHOLD
from attnlib.stats.patterns import PATTERNS, HeadPick, rank_heads
from attnlib.stats.special import SpecialTokenResult

if TYPE_CHECKING:
    import pandas as pd

NOTICED_PATTERNS = ("prev", "next", "broad")  # step 1: the head finder's patterns the tour names
MOST = 0.5  # "most attention": more than half of it
FALL_MARGIN = 0.05
PASCUAL_LOW = 0.5  # Pascual et al.: the input-contribution correlation falls below this after four layers  # step 6: a correlation "falls" when the last layer is at least this much below the first
SYNTAX_SHOWN = 3  # step 5: relations named in the sentence
SLICE = 40  # inputs computed on when nothing is shipped for the model: the tour must open in seconds
POSITIONS_SLICE = 20  # attribution costs about a second per input for the default model
SLICE_MIN_COUNT = 20  # step 5 on the slice: relations with at least this many dependents (Clark's 100 on a treebank)
COMPOSITION_RISE = 0.03  # step 8: K-composition into the induction heads must rise by this much to be said to rise
INDUCTION_RISE = 0.2  # step 8: the largest induction score must rise by this much for the notice to call it forming
IMPORTANCE_SLICE = 10  # step 7: every head switched off three ways costs about 126 forward passes per input
# Each analysis's corpus and options: its defaults (the command's), with the norms for the no-op step.
TOUR_CORPORA = {
    "special": CLASSROOM_PAIRS,
    "deps": EWT_DEV,
    "positions": CLASSROOM_SINGLE,
    "importance": CLASSROOM_PAIRS,
    "gradient": CLASSROOM_PAIRS,  # step 3, beside the special-token shares
}
TOUR_OPTIONS: dict[str, Options] = {
    "special": SpecialOptions(norms=True),
    "deps": DepsOptions(),
    "positions": PositionOptions(),
    "importance": ImportanceOptions(knockout=True),
    "gradient": GradientOptions(),
}
INDUCTION_PROMPTS = ((20, 10), (16, 8))  # the tour's route step: s random one-token words, then their first k again
LINK_KEYS = (
    "model",
    "a",
    "b",
    "layer",
    "head",
    "heads",
    "view",
    "corpus",
    "norms",
    "tab",
    "text",
)  # URL keys of the full pages (see page_link)


@dataclass(frozen=True)
class Step:
    """One screen of the tour: its title, the plain-language explanation, and the full page it opens."""

    number: int  # 1-based, as in ?step=
    key: str
    title: str
    explanation: str
    page: str  # url_path of the full page ("" is the Live page at /)
    tab: str | None = None  # the tab of that page it opens (its URL text)
    decoder: tuple[str, str, str, str | None] | None = None  # a decoder's own title, explanation, page and tab

    def shown(self, causal: bool) -> tuple[str, str, str, str | None]:
        """(title, explanation, page, tab) for an encoder, or for a decoder (causal) where the step has its own."""
        if causal and self.decoder is not None:
            return self.decoder
        return self.title, self.explanation, self.page, self.tab


STEPS: tuple[Step, ...] = (
    Step(
        1,
        "heads",
        "Heads look at different things",
        "Every layer has several attention heads, and each head learns its own way of reading a sentence. "
        "Below are three heads of the loaded model on the pair from the bertviz tutorial: the head that "
        "most looks at the previous token, the one that most looks at the next token, and the one that "
        "spreads its attention most evenly (scores from the head finder over the classroom set).",
        "",
    ),
    Step(
        2,
        "special",
        "Most attention goes to a few tokens",
        "Clark et al. (2019) found that much of BERT's attention goes to just three kinds of token: [CLS] at the "
        "start, [SEP] at the end of each sentence, and the punctuation marks '.' and ','. The lines show, per "
        "layer, the share of attention each kind receives (Clark Fig. 2).",
        "special-tokens",
        "shares",
    ),
    Step(
        3,
        "no-op",
        "Is that attention a no-op?",
        "If a head has nothing useful to look at, it can park its attention on [SEP]. Clark et al. saw that "
        "[SEP] tokens attend almost only to [SEP] themselves, and that changing attention to [SEP] barely changes "
        "the model's output (small gradients). Attention weights alone do not say how much a token moves the "
        "output: that also depends on the size of the vector it sends.",
        "special-tokens",
        "norms",
        (
            "Is the sink a no-op?",
            "In a decoder each token sees only itself and the tokens before it, and many heads park much of their "
            "attention on the first token: the attention sink (Gu et al. 2024). Is that attention a no-op, as Clark "
            "et al. read attention to [SEP]? Test it: take one head at a time and remove only its attention to the "
            "first token (drop), or remove it and spread the rest over the other tokens (renormalise), and measure "
            "how much the output moves; switching the whole head off is the yardstick.",
            "head-importance",
            "noop",
        ),
    ),
    Step(
        4,
        "entropy",
        "Broad and focused heads",
        "Entropy measures how spread out a head's attention is: 0 when it looks at one token, ln n when it "
        "looks at all n tokens equally. Clark et al. found broad heads in the lowest layers of BERT (Fig. 4). "
        "The dashed line is uniform attention.",
        "special-tokens",
        "entropy",
    ),
    Step(
        5,
        "syntax",
        "Heads that find syntax",
        "Take each word, and let one head guess its syntactic head: the word it attends to most. Clark et al. "
        "(Table 1) found single heads that do this far better than the best fixed rule 'the word k places "
        "away'. Gold trees: Universal Dependencies English EWT.",
        "dependency-heads",
    ),
    Step(
        6,
        "positions",
        "Local and global",
        "Attention says where a head looks; Hidden Token Attribution says which input tokens actually shape the "
        "output (Pascual et al. 2021). The centre of mass is the mean offset a head reaches to (negative: "
        "earlier tokens); the correlation between attention and attribution tells how far attention can be "
        "read as an explanation.",
        "local-global",
    ),
    Step(
        7,
        "knockout",
        "Switch it off: is attention to [SEP] a no-op?",
        "Step 3 looked at attention to [SEP]; now we test it. Take one head at a time and remove only its attention "
        "to [CLS] and [SEP] (drop), or remove it and spread the rest over the other tokens (renormalise), and measure "
        "how much the sentence embedding moves; switching the whole head off is the yardstick. If attention to [SEP] "
        "is a no-op, dropping it barely matters in the heads that give it most (Michel et al. 2019; Clark et al.).",
        "head-importance",
        "noop",
        (
            "Switch it off: which heads matter?",
            "Step 3 knocked the first token out of each head; here the yardstick itself: each head switched off in "
            "turn, and how much the sentence embedding moves (Michel et al. 2019). The points are the heads, by their "
            "share of attention to the first token.",
            "head-importance",
            "effects",
        ),
    ),
    Step(
        8,
        "induction",
        "Watch induction heads form",
        "An induction head finds the earlier occurrence of the current token and looks at the token that followed "
        "it, so the model can continue a repeated text (Olsson et al. 2022). The probe: random tokens, then the same "
        "tokens again. The decoder trained in this repository was saved at checkpoints along its training; at each "
        "one, the lines show its largest induction score over the heads and its in-context gain (how much better it "
        "predicts the second repeat than the first, in nats). Both stay near zero, then rise together: a phase "
        "change. Below, its best induction head on the probe: from each word of the second repeat a line to the word "
        "after its first occurrence. Last, the causal picture: which heads the prediction needs (each head's output "
        "patched from a corrupted input, METHODS §22), and how the induction heads came to read the previous-token "
        "head (K-composition over training).",
        "head-roles",
        "training",
    ),
    Step(
        9,
        "routes",
        "Follow a prediction's route",
        "Which states carry what the model needs for its next token? Each state of the residual stream is a sum of "
        "parts (the heads' outputs, the feed-forward blocks, the residual), and each part's contribution says how much "
        "of that sum it makes (Ferrando & Voita 2024). Follow the edges above a threshold back from the prediction and "
        "you have its route. The decoder trained in this repository reads random tokens followed by their first ones "
        "again: to predict the next token it should read the token after the earlier occurrence of the last one, "
        "through its induction heads, and that token should already know its own predecessor.",
        "predictions",
    ),
)


def step_number(raw: str | None) -> int:
    """The step asked for in the URL (1-based), clamped to the tour; 1 when missing or not a number."""
    try:
        number = int(str(raw).strip())
    except ValueError:
        return 1
    return min(max(number, 1), len(STEPS))


def page_link(page: str, **params: str | int | None) -> str:
    """Relative URL of a full page in the given state (None values left out); every tour link is built here."""
    unknown = set(params) - set(LINK_KEYS)
    if unknown:
        raise ValueError(f"unknown URL keys {sorted(unknown)}")
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{page}?{query}" if page else f"./?{query}"


def live_head_link(model: str, text: str, layer: int, head: int) -> str:
    """The Live page's head view of one head (0-based) of `model` on `text`, that head alone drawn."""
    return page_link("", model=model, a=text, view="head", layer=layer + 1, head=head + 1, heads=head + 1)


# ---------- formatting --------------------------------------------------------------------------------------------


def pct(x: float) -> str:
    """A share as a whole percentage: 0.523 -> '52%'."""
    return f"{round(100 * float(x))}%"


def pct_range(values: Sequence[float] | np.ndarray) -> str:
    """'52 to 61%', or '52%' when they round alike."""
    low, high = round(100 * float(min(values))), round(100 * float(max(values)))
    return f"{low}%" if low == high else f"{low} to {high}%"


def layer_span(layers: Sequence[int] | np.ndarray) -> str:
    """0-based layers as 1-based words: 'layer 3', 'layers 2 to 5', 'layers 1, 3 and 5'."""
    numbers = sorted(int(l) + 1 for l in layers)
    if len(numbers) == 1:
        return f"layer {numbers[0]}"
    if numbers == list(range(numbers[0], numbers[-1] + 1)):
        return f"layers {numbers[0]} to {numbers[-1]}"
    return "layers " + ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"


def two_places(x: float) -> str:
    """A number to two decimals, never "-0.00"."""
    return f"{round(float(x), 2) + 0.0:.2f}"


def head_name(layer: int, head: int) -> str:
    """1-based layer-head, as in Clark et al."""
    return f"{layer + 1}-{head + 1}"


# ---------- step 1: heads look at different things ----------------------------------------------------------------


@dataclass(frozen=True)
class HeadsNotice:
    """The best head for each pattern the tour names, whether it shows the pattern, and the sentence."""

    picks: dict[str, HeadPick]
    present: dict[str, bool]
    sentence: str


def heads_notice(scores: np.ndarray, model: str) -> HeadsNotice:
    """From head-finder scores [patterns, layers, heads]: the best previous-token, next-token and broad heads."""
    order = list(PATTERNS)
    chosen = np.stack([scores[order.index(p)] for p in NOTICED_PATTERNS])
    picks = {p.pattern: p for p in rank_heads(chosen, top=1, patterns=NOTICED_PATTERNS)}
    present = {
        p: p in picks and picks[p].score > (BROAD_ENTROPY_FRACTION if p == "broad" else SHARE_THRESHOLD)
        for p in NOTICED_PATTERNS
    }
    parts = []
    for p in ("prev", "next"):
        target = "previous" if p == "prev" else "next"
        if p not in picks:
            parts.append(f"no head could be scored for the {target} token")
        elif present[p]:
            parts.append(f"head {picks[p].label} gives {pct(picks[p].score)} of its attention to the {target} token")
        else:
            parts.append(
                f"no head gives more than half its attention to the {target} token "
                f"(the best, {picks[p].label}, gives {pct(picks[p].score)})"
            )
    broad = picks.get("broad")
    if broad is not None and present["broad"]:
        parts.append(f"head {broad.label} spreads its attention almost evenly ({pct(broad.score)} of uniform entropy)")
    elif broad is not None:
        parts.append(f"no head is broad (the broadest, {broad.label}, reaches {pct(broad.score)} of uniform entropy)")
    sentence = f"In {model}, " + "; ".join(parts) + "."
    if all(present.values()):
        sentence += " Three heads of one model, three different jobs."
    return HeadsNotice(picks, present, sentence)


# ---------- step 2: most attention goes to a few tokens -----------------------------------------------------------

SPECIAL_NAMES = {key: CLASS_NAMES[key] for key in ("cls", "sep", "punct")}
SHARE_NAMES = {key: TOKEN_NAMES[key] for key in ("cls", "sep", "punct", "other")}
NO_OP_NAMES = {key: TOKEN_NAMES[key] for key in ("sep_to_sep", "rest_to_sep")}


def special_notice(special: SpecialTokenResult, model: str) -> str:
    """Which of [CLS], [SEP] and punctuation takes most attention, in which layers, or that none does."""
    layers = special.layers
    # a class no token belongs to (T5 has no CLS, METHODS §18) is left out
    peaks = {key: float(np.nanmax(layers[key])) for key in SPECIAL_NAMES if np.any(layers[key])} or {"sep": 0.0}
    top = max(peaks, key=peaks.__getitem__)
    over = np.flatnonzero(layers[top] > MOST)
    if len(over) == 0:
        best = ", ".join(
            f"{SPECIAL_NAMES[k]} {pct(peaks[k])} ({layer_span([int(np.nanargmax(layers[k]))])})" for k in peaks
        )
        return f"In {model}, no single kind of token takes most attention in any layer; the peaks: {best}."
    who = (
        "[SEP] takes most attention, as in Clark et al."
        if top == "sep"
        else f"{SPECIAL_NAMES[top]}, not [SEP], takes most attention"
    )
    return f"In {model}, {who}: {pct_range(layers[top][over])} in {layer_span(over)}."


# ---------- step 3: is that attention a no-op? --------------------------------------------------------------------


def no_op_notice(
    special: SpecialTokenResult,
    gradients: GradientImportanceResult | None,
    gradient_reason: str | None,
    model: str,
    extra: Sequence[str] = (),
) -> str:
    """[SEP] attending to itself, gradient importance (or why there is none), then any further sentences (norms)."""
    sep_to_sep = special.layers["sep_to_sep"]
    if np.isnan(sep_to_sep).all():
        parts = [f"In {model}, no input had a [SEP] row, so [SEP] attending to itself cannot be measured."]
    else:
        over = np.flatnonzero(sep_to_sep > MOST)
        if len(over):
            parts = [
                f"In {model}, [SEP] rows send {pct_range(sep_to_sep[over])} of their attention to [SEP] "
                f"in {layer_span(over)}."
            ]
        else:
            peak = int(np.nanargmax(sep_to_sep))
            parts = [
                f"In {model}, [SEP] rows send at most {pct(sep_to_sep[peak])} of their attention to [SEP] "
                f"({layer_span([peak])}): [SEP] is not where they park it."
            ]
    if gradients is None:
        parts.append(f"Gradient importance: {gradient_reason or 'not computed.'}")
    else:
        g = gradients.layers
        low = np.flatnonzero(g["sep"] < g["all"])
        if len(low):
            parts.append(
                f"The loss is less sensitive to attention to [SEP] than to attention in general in {layer_span(low)}."
            )
        else:
            parts.append("In no layer is the loss less sensitive to attention to [SEP] than to attention in general.")
    return " ".join([*parts, *extra])


# ---------- step 4: broad and focused heads -----------------------------------------------------------------------


def entropy_notice(special: SpecialTokenResult, model: str) -> str:
    """The broadest and most focused layer against uniform attention, and how many heads are broad, and where."""
    uniform = special.uniform_entropy
    per_layer = special.layers["entropy"]
    broadest, focused = int(np.argmax(per_layer)), int(np.argmin(per_layer))
    if pct(per_layer[broadest] / uniform) == pct(per_layer[focused] / uniform):
        sentence = (
            f"In {model}, every layer has about the same mean entropy: {per_layer[focused]:.2f} to "
            f"{per_layer[broadest]:.2f} nats, {pct(per_layer[focused] / uniform)} of uniform's {uniform:.2f}."
        )
    else:
        sentence = (
            f"In {model}, attention is broadest in {layer_span([broadest])} ({per_layer[broadest]:.2f} nats, "
            f"{pct(per_layer[broadest] / uniform)} of uniform's {uniform:.2f}) and most focused in "
            f"{layer_span([focused])} ({per_layer[focused]:.2f} nats, {pct(per_layer[focused] / uniform)})."
        )
    heads = special.heads["entropy"]
    broad = np.argwhere(heads > BROAD_ENTROPY_FRACTION * uniform)
    if len(broad) == 0:
        return sentence + f" No head is broad: every head stays below {pct(BROAD_ENTROPY_FRACTION)} of uniform."
    middle = (heads.shape[0] - 1) / 2
    lower, upper = int((broad[:, 0] < middle).sum()), int((broad[:, 0] > middle).sum())
    if lower > upper:
        where = "mostly in the lower layers, as Clark et al. found for BERT"
    elif upper > lower:
        where = "mostly in the upper layers"
    else:
        where = "as many in the upper as in the lower layers"
    return sentence + (
        f" {len(broad)} of {heads.size} heads are broad (above {pct(BROAD_ENTROPY_FRACTION)} of uniform), {where}."
    )


# ---------- step 5: heads that find syntax ------------------------------------------------------------------------


def _row_text(row: DependencyRow) -> str:
    return (
        f"{row.relation} (head {head_name(row.layer, row.head)}, {pct(row.accuracy)} against "
        f"{pct(row.baseline_accuracy)} for offset {row.baseline_offset:+d})"
    )


def syntax_rows(table: DependencyTable) -> list[DependencyRow]:
    """The table's relations (not the pooled 'all'), the largest margin over the baseline first."""
    return sorted((r for r in table.rows if r.relation != ALL), key=lambda r: (-r.margin, r.relation))


def syntax_notice(table: DependencyTable, model: str) -> str:
    """How many relations have a head beating the best fixed offset, naming the clearest ones; or that none does."""
    rows = syntax_rows(table)
    if not rows:
        return f"In {model}, no relation has enough dependents in these sentences to compare heads with offsets."
    beating = [r for r in rows if r.margin > 0]
    if not beating:
        return (
            f"In {model}, no single head beats the best fixed offset for any of the {len(rows)} relations; "
            f"the closest is {_row_text(rows[0])}."
        )
    named = "; ".join(_row_text(r) for r in beating[:SYNTAX_SHOWN])
    return (
        f"In {model}, a single head beats the best fixed offset for {len(beating)} of {len(rows)} relations, "
        f"most clearly {named}."
    )


# ---------- step 6: local and global -------------------------------------------------------------------------------


def positions_notice(result: PositionsResult, model: str, correlation: str = "pearson_input") -> str:
    """Whether attention's correlation with attribution falls with depth, and where the two centres of mass part most."""
    corr = result.median_correlation(correlation)
    finite = np.flatnonzero(np.isfinite(corr))
    if len(finite) == 0:
        return f"In {model}, no layer has a correlation between attention and attribution to show."
    first, last = int(finite[0]), int(finite[-1])
    lowest = int(finite[np.argmin(corr[finite])])
    if lowest != first and corr[lowest] < corr[first] - FALL_MARGIN:
        sentence = (
            f"In {model}, attention agrees less with attribution as depth grows: the median correlation falls from "
            f"{corr[first]:.2f} in {layer_span([first])} to {corr[lowest]:.2f} in {layer_span([lowest])}"
        )
        sentence += "." if lowest == last else f" ({corr[last]:.2f} in {layer_span([last])})."
        below = [int(l) for l in finite if corr[l] < PASCUAL_LOW]
        if below and corr[first] >= PASCUAL_LOW:
            sentence += (
                f" It is first below {PASCUAL_LOW} in {layer_span(below[:1])} (Pascual et al.: after four layers "
                "in BERT-base)."
            )
    else:
        sentence = (
            f"In {model}, the median correlation of attention with attribution does not fall with depth: "
            f"{corr[first]:.2f} in {layer_span([first])}, at least {np.nanmin(corr):.2f} in every layer, "
            f"{corr[last]:.2f} in {layer_span([last])}."
        )
    att, attr = result.attention_center_of_mass, result.attribution_center_of_mass
    gap = np.abs(att - attr)
    if np.isfinite(gap).any():
        far = int(np.nanargmax(gap))
        sentence += (
            f" The centres of mass are furthest apart in {layer_span([far])}: attention at {att[far]:+.2f} tokens, "
            f"attribution at {attr[far]:+.2f}."
        )
    return sentence


def norms_notice(gap: WeightNormGap | None, model: str) -> str:
    """Weights against value-weighted norms (METHODS §11): where [CLS]/[SEP] take much weight but move small vectors."""
    if gap is None:
        return f"In {model}, no layer has a [CLS] or [SEP] share to compare."
    name = SPECIAL_NAMES[gap.key]
    where = f"{name} in layer {gap.layer + 1}"
    if gap.verdict == "smaller":
        return (
            f"In {model}, {where} takes {pct(gap.weight_share)} of the attention weights but only "
            f"{pct(gap.norm_share)} of what the heads actually move (the norms): large weights on small vectors, "
            "close to a no-op."
        )
    if gap.verdict == "larger":
        return (
            f"In {model}, {where} takes {pct(gap.weight_share)} of the attention weights but "
            f"{pct(gap.norm_share)} of what the heads actually move (the norms): its vectors are large, so it "
            "carries more than its weight says."
        )
    return (
        f"In {model}, weights and norms tell the same story: the largest gap is {where}, "
        f"{pct(gap.weight_share)} of the weights against {pct(gap.norm_share)} of the norms."
    )


# ---------- step 8: induction heads form -----------------------------------------------------------------------------


def induction_notice(steps: Sequence[int], induction: Sequence[float], gain: Sequence[float], model: str) -> str:
    """Where the largest induction score and the in-context gain start and end over the checkpoints, and the step
    at which the induction score jumps most (the phase change), or that it does not rise."""
    first, last = 0, len(steps) - 1
    sentence = (
        f"In {model}, the largest induction score goes from {induction[first]:.2f} at step {steps[first]} to "
        f"{induction[last]:.2f} at step {steps[last]}, and the in-context gain from {two_places(gain[first])} to "
        f"{two_places(gain[last])} nat."
    )
    if len(steps) < 2 or induction[last] - induction[first] < INDUCTION_RISE:
        return sentence + " The induction score does not rise: no induction head formed in these checkpoints."
    jumps = np.diff(np.asarray(induction, float))
    k = int(np.argmax(jumps))
    return sentence + (
        f" The largest jump comes between step {steps[k]} and step {steps[k + 1]} "
        f"({induction[k]:.2f} to {induction[k + 1]:.2f}): the induction heads form there."
    )


def circuit_notice(noising: np.ndarray, se: np.ndarray, pairs: int, roles: dict, composition: pd.DataFrame,
                   model: str) -> str:  # fmt: skip
    """The causal picture in words (layers and heads from 1): the two heads with the largest mean noising score over
    the pairs, with their standard errors and roles, and each kind of composition into the induction heads at the
    first and last checkpoint against 1/sqrt(d), saying whether K rises while Q and V do not."""
    noising, se = np.asarray(noising, float), np.asarray(se, float)
    top = [divmod(int(i), noising.shape[1]) for i in np.argsort(noising.ravel())[::-1][:2]]
    tags = {role: {(int(l), int(h)) for l, h in roles.get(role, [])} for role in ("previous", "induction")}
    named = {"previous": "the previous-token head", "induction": "an induction head"}

    def said(layer: int, head: int) -> str:
        role = next((named[r] for r in named if (layer, head) in tags[r]), "")
        what = f", {role}" if role else ""
        return (
            f"head {head_name(layer, head)}{what} ({two_places(noising[layer, head])} ± {two_places(se[layer, head])})"
        )

    sentence = (
        f"On the {pairs} shipped pairs, putting one head's corrupted output into the clean run (noising) takes away "
        f"most of the logit difference at {said(*top[0])} and {said(*top[1])}: the two largest."
    )
    if {top[0], top[1]} & tags["previous"] and {top[0], top[1]} & tags["induction"]:
        sentence += " The two steps of the induction circuit are the two heads the prediction needs most."
    if len(composition) < 2 or not tags["induction"]:
        return sentence
    first, last = composition.iloc[0], composition.iloc[-1]
    receivers = ", ".join(head_name(l, h) for l, h in sorted(tags["induction"]))
    rise = {kind: float(last[kind] - first[kind]) for kind in ("q", "k", "v")}
    sentence += (
        f" The K-composition from earlier heads into the induction heads {receivers} goes from "
        f"{two_places(first['k'])} at step {int(first['step'])} to {two_places(last['k'])} at step "
        f"{int(last['step'])} (1/√d = {last['baseline']:.3f}), Q from {two_places(first['q'])} to "
        f"{two_places(last['q'])} and V from {two_places(first['v'])} to {two_places(last['v'])}"
    )
    if rise["k"] > COMPOSITION_RISE and rise["k"] > 2 * max(rise["q"], rise["v"], 0.0):
        return sentence + (
            ": K rises while Q and V do not. The induction heads learned to read, through their keys, what the "
            "previous-token head writes."
        )
    return sentence + ": K does not rise apart from Q and V."


# ---------- step 9: a prediction's route ------------------------------------------------------------------------------


def induction_prompt(words: Sequence[str], again: int) -> str:
    """The route step's prompt: the words, then their first `again` words again (so the next is the word after)."""
    return " ".join([*words, *words[:again]])


@dataclass(frozen=True)
class InductionRoute:
    """Where the route to the last position's prediction reads from (0-based), from the routes' own edge weights: in
    the layer where the key `key` (the token after the earlier occurrence of the last token) gives the last position's
    attention node its largest part, that edge's weight (its share of all the node receives) and each head's share;
    a layer below, the edge from the key's previous token into the key's own attention node and its largest head."""

    layer: int
    key: int
    share: float
    heads: tuple[tuple[int, float], ...]  # (head, share of the node), largest first
    previous_share: float | None  # the edge key - 1 -> key a layer below; None where it is not in the graph
    previous_head: tuple[int, float] | None


def _edge(routes: dict, layer: int, key: int, query: int) -> dict | None:
    """The attention edge R^(layer-1)_key -> A^layer_query of the graph, None where it is not above the threshold."""
    source, target = ("E" if layer == 0 else f"R{layer - 1}") + f"_{key}", f"A{layer}_{query}"
    return next((e for e in routes["edges"] if e["kind"] == "attention" and e["source"] == source
                 and e["target"] == target), None)  # fmt: skip


def induction_route(routes: dict, key: int) -> InductionRoute:
    """From `attnlib routes` JSON (the route to the prediction at the last position): the layer where `key` gives the
    last position's attention node its largest part, the heads that carry it, and the edge that brings the key its
    previous token a layer below."""
    position = int(routes["route"]["position"])
    layers = sorted({int(n["layer"]) for n in routes["nodes"] if n["kind"] == "A"})
    weights = {l: float(e["weight"]) for l in layers if (e := _edge(routes, l, key, position)) is not None}
    if not weights:
        return InductionRoute(-1, key, 0.0, (), None, None)
    layer = max(weights, key=weights.__getitem__)
    edge = _edge(routes, layer, key, position)
    assert edge is not None
    heads = tuple(sorted(((h, float(v)) for h, v in enumerate(edge["heads"])), key=lambda x: -x[1]))
    below = _edge(routes, layer - 1, key - 1, key) if layer > 0 and key > 0 else None
    if below is None:
        return InductionRoute(layer, key, weights[layer], heads, None, None)
    best = int(np.argmax(below["heads"]))
    return InductionRoute(
        layer, key, weights[layer], heads, float(below["weight"]), (best, float(below["heads"][best]))
    )


def route_notice(found: InductionRoute, model: str, words: int, again: int, threshold: float,
                 other: tuple[int, int, InductionRoute] | None = None) -> str:  # fmt: skip
    """Where the route of the induction prompt reads from, in words (layers and heads from 1): the heads named are
    those whose own share is above the threshold (on the route, METHODS §21)."""
    prompt = f"{words} random one-token words then their first {again} again"
    if found.layer < 0:
        return f"In {model}, on {prompt}, no layer's edge from the token after the earlier occurrence is above the threshold."

    def carried(route: InductionRoute) -> str:
        on = [(h, v) for h, v in route.heads if v > threshold] or list(route.heads[:1])
        names = ", ".join(head_name(route.layer, h) for h, _ in on)
        return f"head{'s' if len(on) > 1 else ''} {names} ({', '.join(two_places(v) for _, v in on)})"

    sentence = (
        f"In {model}, on {prompt}, the route to the prediction runs from the token after the earlier occurrence of the "
        f"last word: in {layer_span([found.layer])}, {two_places(found.share)} of what the last position's attention "
        f"node receives comes from that token, carried by {carried(found)}."
    )
    if found.previous_head is not None and found.previous_share is not None:
        head, share = found.previous_head
        sentence += (
            f" In {layer_span([found.layer - 1])}, that token takes {two_places(found.previous_share)} from the token "
            f"before it, mostly through head {head_name(found.layer - 1, head)} ({two_places(share)}): the two steps "
            "of an induction circuit."
        )
    if other is not None:
        w, k, second = other
        if second.layer >= 0:
            sentence += (
                f" On {w} words then their first {k}: {two_places(second.share)} in {layer_span([second.layer])}, "
                f"through {carried(second)}."
            )
    return sentence
