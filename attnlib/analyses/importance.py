"""The `importance` analysis: every head's single-head effect over a corpus, the [CLS]/[SEP] knockouts, Michel's
gradient importance, the pruning curve and the no-op test (METHODS §15, with §2's share of attention); and the
`ablate` analysis: one sentence or pair with a set of heads switched off (or knocked out at [CLS]/[SEP]), its effect
under each measure of METHODS §15, and a masked-LM model's top predictions at each typed mask before and after."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.stats import spearmanr

from attnlib.analyses.base import Analysis, FollowUp, Options, option
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import corpus_index, plan_batches
from attnlib.core.model import LoadedModel
from attnlib.core.runner import encode
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.importance import (
    CHANGES,
    DEFAULT_SEED,
    KNOCKOUTS,
    MEASURES,
    Change,
    Head,
    Measure,
    Prepared,
    Variant,
    ceil_tenths,
    changed_states,
    check_available,
    head_gradients,
    parse_heads,
    prepare,
    single_head_variants,
    top_predictions,
    variant_effects,
)
from attnlib.stats.importance import AblationUnavailable as AblationUnavailable
from attnlib.stats.importance import heads_text as heads_text  # the Live page's heads switched off
from attnlib.stats.importance import mlm_reason as mlm_reason  # what the page asks of a model, here
from attnlib.stats.importance import unavailable_reason as unavailable_reason
from attnlib.stats.special import SINK_THRESHOLD, class_share, first_token_share

if TYPE_CHECKING:
    import pandas as pd

MEASURE_HELP = "the effect the no-op test and the pruning curve show: embedding, hidden, or mlm (default %(default)s)"
SEED_HELP = "seed of the positions the mlm measure masks: default_rng(seed + input index) (default %(default)s)"
EffectTable = dict[str, np.ndarray | None]  # measure -> [layers, heads] (None: not defined for the model)


@dataclass(frozen=True)
class ImportanceOptions(Options):
    """What the importance pass adds to every head's single-head ablation effect."""

    knockout: bool = option(False, "add every head's [CLS]/[SEP] knockouts, drop and renormalise", adds=True)
    prune: bool = option(
        False, "add the pruning curves (a second pass: each measure after each tenth of the heads)", adds=True
    )
    measure: Measure = option("embedding", MEASURE_HELP, view=True)
    seed: int = option(DEFAULT_SEED, SEED_HELP, compare=True)


# ------------------------------------------------------------------------------------------- the no-op test


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho of two equal-length arrays, NaN pairs left out; NaN when fewer than 3 pairs or one is constant."""
    a, b = np.ravel(a).astype(float), np.ravel(b).astype(float)
    keep = np.isfinite(a) & np.isfinite(b)
    if keep.sum() < 3 or np.ptp(a[keep]) == 0 or np.ptp(b[keep]) == 0:
        return float("nan")
    return float(spearmanr(a[keep], b[keep]).statistic)


@dataclass
class NoOpTest:
    """Spearman's rho between each head's CLS+SEP share and its effect under each change, over all heads and within
    each layer (NaN where a change was not computed)."""

    measure: str
    overall: dict[str, float]  # change -> rho
    per_layer: dict[str, np.ndarray]  # change -> [layers]

    def to_json(self) -> dict:
        """The command's `spearman` entry: the single-head ablation's rho is named `ablation`, as its issue asked."""
        named = {JSON_NAMES.get(change, change): rho for change, rho in self.overall.items()}
        per_layer = {JSON_NAMES.get(change, change): rhos for change, rhos in self.per_layer.items()}
        return {**named, "per_layer": per_layer, "measure": self.measure}


JSON_NAMES = {"ablate": "ablation"}


def no_op_test(share: np.ndarray, effects: dict[str, np.ndarray | None], measure: str) -> NoOpTest:
    """METHODS §15's no-op test of [layers, heads] shares against {change: [layers, heads] effect or None}."""
    nan_layers = np.full(share.shape[0], np.nan)
    overall: dict[str, float] = {}
    per_layer: dict[str, np.ndarray] = {}
    for change in CHANGES:
        effect = effects.get(change)
        overall[change] = float("nan") if effect is None else spearman(share, effect)
        per_layer[change] = (
            nan_layers.copy() if effect is None else np.array([spearman(s, e) for s, e in zip(share, effect)])
        )
    return NoOpTest(measure, overall, per_layer)


# ------------------------------------------------------------------------------------------- the result


@dataclass
class PruningCurve:
    """Heads removed in order of increasing single-head effect (ties by layer, then head); after each tenth of them,
    the measure of the whole set removed."""

    measure: str
    order: list[Head]
    removed: list[int]  # heads removed at each step: ceil(t N / 10), t = 1..10
    effect: np.ndarray  # [10]

    def to_json(self) -> dict:
        return {"measure": self.measure, "order": [list(h) for h in self.order], "heads_removed": self.removed,
                "effect": self.effect}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> PruningCurve:
        return cls(
            str(data["measure"]),
            [(int(l), int(h)) for l, h in data["order"]],
            [int(k) for k in data["heads_removed"]],
            numeric_array(data["effect"], "pruning.effect", 1),
        )


def pruning_order(effect: np.ndarray) -> list[Head]:
    """Every head, by increasing effect [layers, heads]; ties by layer, then head (a stable sort of row-major order)."""
    flat = np.argsort(np.nan_to_num(effect, nan=np.inf).ravel(), kind="stable")
    return [divmod(int(i), effect.shape[1]) for i in flat]


@dataclass
class HeadImportance:
    """Corpus means per head ([layers, heads]): each change's effect under each measure, the CLS+SEP share on the
    same inputs, Michel's gradient importance (a masked-LM head only) and, when asked, the pruning curve."""

    n_inputs: int
    measure: str
    ablation: EffectTable
    special_share: np.ndarray
    knockout: dict[str, EffectTable] | None = None  # drop / renormalise -> measure -> [layers, heads]
    importance: np.ndarray | None = None  # Michel: mean |dL/dxi|
    pruning: dict[str, PruningCurve] | None = None  # measure -> its curve, in its own order
    n_truncated: int = 0
    causal: bool = False  # a decoder (§18): special_share is first_share, knockouts remove FIRST (and SEP), mlm is
    # the next-token loss, and the no-op test is the sink test

    def effect(self, change: str, measure: str | None = None) -> np.ndarray | None:
        """[layers, heads] of one change under one measure (the result's own by default); None when not computed."""
        table = self.ablation if change == "ablate" else (self.knockout or {}).get(change)
        return None if table is None else table.get(measure or self.measure)

    def measures(self) -> list[str]:
        """The measures defined for this model (mlm only with a trained masked-LM head)."""
        return [m for m in MEASURES if self.ablation.get(m) is not None]

    def no_op(self, measure: str | None = None) -> NoOpTest:
        """The no-op test under a measure (the result's own by default)."""
        measure = measure or self.measure
        return no_op_test(self.special_share, {c: self.effect(c, measure) for c in CHANGES}, measure)

    @property
    def importance_normalised(self) -> np.ndarray | None:
        """Michel's practice: each layer's importance divided by its L2 norm."""
        if self.importance is None:
            return None
        importance = self.importance.astype(np.float64)  # float64 either way, so a JSON round trip gives it again
        norms = np.linalg.norm(importance, axis=1, keepdims=True)
        return importance / np.where(norms > 0, norms, 1.0)

    def to_json(self) -> dict:
        """The `importance` command's JSON: [layer][head] arrays, 0-based."""
        out: dict = {
            "n_inputs": self.n_inputs,
            "n_truncated": self.n_truncated,
            "measure": self.measure,
            "ablation": {m: self.ablation.get(m) for m in MEASURES},
            "special_share": self.special_share,
            "spearman": self.no_op().to_json(),
        }
        if self.causal:  # an encoder's JSON stays as it was
            out["kind"] = "decoder"
        if self.knockout is not None:
            out["knockout"] = {c: {m: self.knockout[c].get(m) for m in MEASURES} for c in KNOCKOUTS}
        if self.pruning is not None:
            out["pruning"] = {m: curve.to_json() for m, curve in self.pruning.items()}
        if self.importance is not None:
            out["importance"] = self.importance
            out["importance_normalised"] = self.importance_normalised
        return out

    @classmethod
    def from_json(cls, data: dict) -> HeadImportance:
        """Read back what to_json wrote (the Spearman numbers are recomputed); ResultFileError when malformed."""

        def table(found: dict, where: str) -> EffectTable:
            return {m: None if found.get(m) is None else numeric_array(found[m], f"{where}.{m}", 2) for m in MEASURES}

        with malformed("`importance` result"):
            knockout = data.get("knockout")
            importance = data.get("importance")
            pruning = data.get("pruning")
            return cls(
                n_inputs=int(data["n_inputs"]),
                measure=str(data["measure"]),
                ablation=table(data["ablation"], "ablation"),
                special_share=numeric_array(data["special_share"], "special_share", 2),
                knockout=None if knockout is None else {c: table(knockout[c], f"knockout.{c}") for c in KNOCKOUTS},
                importance=None if importance is None else numeric_array(importance, "importance", 2),
                pruning=None if pruning is None else {m: PruningCurve.from_json(c) for m, c in pruning.items()},
                n_truncated=int(data.get("n_truncated", 0)),
                causal=data.get("kind") == "decoder",
            )

    def for_options(self, options: ImportanceOptions) -> HeadImportance:
        """The parts these options ask for (a shipped result may hold more)."""
        return replace(
            self,
            measure=options.measure,
            knockout=self.knockout if options.knockout else None,
            pruning=self.pruning if options.prune else None,
        )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Every head's [CLS]/[SEP] share (a decoder's first_share) and effect under each change and measure (corpus
        means), and the no-op test's Spearman's rho per layer."""
        import pandas as pd

        from attnlib.analyses.tables import head_frame

        L, _ = self.special_share.shape
        per_head = {"first_share" if self.causal else "cls_sep_share": self.special_share}
        for change in ("ablate", "drop", "renormalise"):
            for measure in self.measures():
                values = self.effect(change, measure)
                if values is not None:
                    per_head[f"{change}_{measure}"] = values
        if self.importance is not None:
            per_head["gradient_importance"] = self.importance
        test = self.no_op()
        spearman = pd.DataFrame(
            {"model": model, "layer": range(1, L + 1)} | {f"rho_{c}": test.per_layer[c] for c in test.per_layer}
        )
        return {"Per head (effects are corpus means; METHODS §15)": head_frame(model, per_head),
                "No-op test: Spearman's rho of the share against each effect, per layer": spearman}  # fmt: skip


# ------------------------------------------------------------------------------------------- accumulators


@dataclass
class ImportanceSums:
    """Mergeable sums over inputs of each change's per-head effect under each measure, of the CLS+SEP share and of
    Michel's |dL/dxi|."""

    n_layers: int
    n_heads: int
    effects: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # change -> measure -> [layers, heads]
    share: np.ndarray | None = None
    gradient: np.ndarray | None = None
    n_inputs: int = 0
    n_truncated: int = 0
    causal: bool = False  # the share is a decoder's first_share (§18)

    def __post_init__(self) -> None:
        self.share = np.zeros((self.n_layers, self.n_heads)) if self.share is None else self.share

    def add_batch(self, prep: Prepared, effects: Mapping[Measure, np.ndarray], changes: Sequence[Change],
                  gradient: np.ndarray | None, truncated: int) -> None:  # fmt: skip
        """One batch: effects {measure: [V, B]} of single_head_variants(changes), its shares, |dL/dxi| [B, L, H]."""
        L, H, B = self.n_layers, self.n_heads, prep.n_inputs
        for measure, values in effects.items():
            per_head = values.reshape(L, len(changes), H, B).sum(-1)  # the variants go layer by layer
            for c, change in enumerate(changes):
                table = self.effects.setdefault(change, {})
                table[measure] = table.get(measure, 0) + per_head[:, c]
        assert self.share is not None
        for b in range(B):
            n = int(prep.mask[b].sum())
            attn = np.stack([a[b, :, :n, :n].float().cpu().numpy() for a in prep.attentions])  # [L, H, n, n]
            if self.causal:
                self.share += first_token_share(attn)
            else:
                self.share += class_share(attn, prep.special[b, :n].cpu().numpy())
        if gradient is not None:
            self.gradient = np.abs(gradient).sum(0) + (0 if self.gradient is None else self.gradient)
        self.n_inputs += B
        self.n_truncated += truncated

    def merge(self, other: ImportanceSums) -> ImportanceSums:
        """The sums over both input sets; neither operand changes."""
        effects = {c: dict(t) for c, t in self.effects.items()}
        for change, table in other.effects.items():
            mine = effects.setdefault(change, {})
            for measure, values in table.items():
                mine[measure] = mine.get(measure, 0) + values
        gradients = [g for g in (self.gradient, other.gradient) if g is not None]
        return ImportanceSums(
            self.n_layers,
            self.n_heads,
            effects,
            self.share + other.share,  # type: ignore[operator]
            sum(gradients[1:], gradients[0]) if gradients else None,
            self.n_inputs + other.n_inputs,
            self.n_truncated + other.n_truncated,
            self.causal,
        )

    def result(self, options: ImportanceOptions) -> HeadImportance:
        n = max(self.n_inputs, 1)

        def table(change: str) -> EffectTable:
            found = self.effects.get(change, {})
            return {m: found[m] / n if m in found else None for m in MEASURES}

        assert self.share is not None
        return HeadImportance(
            n_inputs=self.n_inputs,
            measure=options.measure,
            ablation=table("ablate"),
            special_share=self.share / n,
            knockout={c: table(c) for c in KNOCKOUTS} if options.knockout else None,
            importance=None if self.gradient is None else self.gradient / n,
            n_truncated=self.n_truncated,
            causal=self.causal,
        )


@dataclass
class PruningSums:
    """Mergeable sums over inputs of each measure after each step of its pruning curve."""

    sums: dict[str, np.ndarray] = field(default_factory=dict)  # measure -> [10]
    n_inputs: int = 0

    def merge(self, other: PruningSums) -> PruningSums:
        sums = dict(self.sums)
        for measure, values in other.sums.items():
            sums[measure] = sums.get(measure, 0) + values
        return PruningSums(sums, self.n_inputs + other.n_inputs)


# ------------------------------------------------------------------------------------------- the corpus passes


def batches(lm: LoadedModel, inputs: Sequence[CorpusInput], batch_size: int):
    """(corpus indices, encodings) of each batch, formed as the engines plan them (windows sorted by length)."""
    for batch in plan_batches(lm, inputs, batch_size):
        yield (
            [corpus_index(inputs[i], i) for i in batch],
            [encode(lm, inputs[i].text_a, inputs[i].text_b) for i in batch],
        )


def importance_accumulators(lm: LoadedModel, options: ImportanceOptions) -> list:
    """Empty accumulators of the first pass."""
    return [ImportanceSums(lm.facts.n_layers, lm.facts.n_heads, causal=lm.facts.causal)]


def importance_fill(lm: LoadedModel, inputs: Sequence[CorpusInput], accumulators: list, batch_size: int,
                    progress: Progress | None, options: ImportanceOptions) -> list:  # fmt: skip
    """Every head's single-head changes on every input, batch by batch; AblationUnavailable for a model whose heads
    attnlib cannot reach, or the mlm measure without a masked-LM head."""
    check_available(lm, options.measure)
    sums: ImportanceSums = accumulators[0]
    changes: tuple[Change, ...] = CHANGES if options.knockout else ("ablate",)
    variants = single_head_variants(lm.facts.n_layers, lm.facts.n_heads, changes)
    done = 0
    for indices, encoded in batches(lm, inputs, batch_size):
        prep = prepare(lm, encoded, indices, options.seed)
        gradient = None
        if prep.labels is not None and not lm.facts.causal:  # Michel's gradients: a masked-LM head only (§15)
            masked = {key: value[prep.n_inputs :] for key, value in prep.batch.items()}
            gradient = head_gradients(lm, masked, prep.labels).float().cpu().numpy()
        sums.add_batch(prep, variant_effects(prep, variants), changes, gradient, sum(e.truncated for e in encoded))
        done += len(encoded)
        if progress is not None:
            progress(done, len(inputs))
    return accumulators


def importance_result(accumulators: list, options: ImportanceOptions) -> HeadImportance:
    return accumulators[0].result(options)


def pruning_accumulators(lm: LoadedModel) -> list:
    return [PruningSums()]


def pruning_fill(lm: LoadedModel, inputs: Sequence[CorpusInput], accumulators: list, batch_size: int,
                 progress: Progress | None, orders: dict[str, tuple[Head, ...]], options: ImportanceOptions) -> list:  # fmt: skip
    """For each measure: that measure of ablating the first ceil(t N / 10) heads of its order, t = 1..10."""
    sums: PruningSums = accumulators[0]
    steps = {m: [Variant("ablate", tuple(order[:k])) for k in ceil_tenths(len(order))] for m, order in orders.items()}
    variants = [v for measure_steps in steps.values() for v in measure_steps]
    done = 0
    for indices, encoded in batches(lm, inputs, batch_size):
        prep = prepare(lm, encoded, indices, options.seed, with_mlm="mlm" in orders)
        found = variant_effects(prep, variants)
        for k, measure in enumerate(steps):
            sums.sums[measure] = sums.sums.get(measure, 0) + found[measure][10 * k : 10 * (k + 1)].sum(1)  # type: ignore[index]
        sums.n_inputs += len(encoded)
        done += len(encoded)
        if progress is not None:
            progress(done, len(inputs))
    return accumulators


def pruning_orders(result: HeadImportance) -> dict[str, tuple[Head, ...]]:
    """Each measure's order of the heads, by increasing single-head ablation effect."""
    return {m: tuple(pruning_order(result.ablation[m])) for m in result.measures()}  # type: ignore[arg-type]


def with_pruning(result: HeadImportance, accumulators: list) -> HeadImportance:
    sums: PruningSums = accumulators[0]
    n = max(sums.n_inputs, 1)
    curves = {
        m: PruningCurve(m, list(order), ceil_tenths(len(order)), sums.sums[m] / n)
        for m, order in pruning_orders(result).items()
    }
    return replace(result, pruning=curves)


def pruning_pass(result: HeadImportance, options: ImportanceOptions) -> FollowUp[HeadImportance] | None:
    """With --prune: the second pass, each measure's heads in the order of the first pass's effects."""
    if not options.prune:
        return None
    return FollowUp(
        pruning_accumulators, partial(pruning_fill, orders=pruning_orders(result), options=options), with_pruning
    )


IMPORTANCE: Analysis[ImportanceOptions, HeadImportance] = Analysis(
    name="importance",
    help="every head's ablation effect, [CLS]/[SEP] knockouts and the no-op test over a corpus",
    options=ImportanceOptions,
    reads="corpus",
    result=HeadImportance,
    methods=(2, 15),
    accumulators=importance_accumulators,
    fill=importance_fill,
    finish=importance_result,
    follow=pruning_pass,
)


# ------------------------------------------------------------------------------------------- in words

SPECIAL_HEAVY = 0.5  # a head that gives more than this share of its attention to [CLS] and [SEP]
NO_OP_FRACTION = 0.25  # dropping the [CLS]/[SEP] term does less than this fraction of what ablating the head does
MEASURE_WORDS = {"embedding": "the sentence embedding", "hidden": "the last hidden states", "mlm": "the masked-LM loss"}
DECODER_MEASURE_WORDS = {**MEASURE_WORDS, "mlm": "the next-token loss"}


def ranked_heads(effect: np.ndarray, top: int = 5) -> tuple[list[tuple[Head, float]], list[tuple[Head, float]]]:
    """The `top` heads whose effect is largest (largest first) and smallest (smallest first)."""
    order = pruning_order(effect)
    least = [(h, float(effect[h])) for h in order[:top]]
    most = [(h, float(effect[h])) for h in order[::-1][:top]]
    return most, least


def _names(heads: Sequence[Head]) -> str:
    return ", ".join(f"{l + 1}-{h + 1}" for l, h in heads)


def no_op_sentence(result: HeadImportance, model: str, measure: str | None = None) -> str:
    """What the no-op test shows for this model, in words (heads 1-based): do the heads that attend most to
    [CLS]/[SEP] change the output when that attention is dropped, against switching them off?"""
    measure = measure or result.measure
    if result.causal:
        return sink_sentence(result, model, measure)
    words = MEASURE_WORDS.get(measure, measure)
    share, ablation = result.special_share, result.effect("ablate", measure)
    if ablation is None:
        return f"In {model}, the {measure} measure is not defined."
    test = result.no_op(measure)
    heavy = share > SPECIAL_HEAVY
    n = share.size
    most, _ = ranked_heads(ablation, 3)
    parts = [f"In {model}, switching one head off changes {words} most for heads {_names([h for h, _ in most])}."]
    drop = result.effect("drop", measure)
    renormalise = result.effect("renormalise", measure)
    if not heavy.any():
        parts.append(f"No head gives more than half its attention to [CLS] and [SEP] (the most: {share.max():.0%}).")
    elif drop is None or renormalise is None:
        parts.append(
            f"{heavy.sum()} of {n} heads give more than half their attention to [CLS] and [SEP]; switching them off "
            f"changes it by a median of {np.median(ablation[heavy]):.2g}, against {np.median(ablation[~heavy]):.2g} "
            "for the others"
            if (~heavy).any()
            else f"{heavy.sum()} of {n} heads give most attention to [CLS]/[SEP]."
        )
    else:
        dropped, ablated, renormed = (float(np.median(x[heavy])) for x in (drop, ablation, renormalise))
        fraction = dropped / ablated if ablated > 0 else float("nan")
        verdict = (
            "close to a no-op, as Clark et al. read it"
            if np.isfinite(fraction) and fraction < NO_OP_FRACTION
            else "not a no-op"
        )
        parts.append(
            f"{heavy.sum()} of {n} heads give more than half their attention to [CLS] and [SEP]. For them, dropping "
            f"that attention changes {words} by a median of {dropped:.2g}, {fraction:.0%} of what switching the head "
            f"off does ({ablated:.2g}): {verdict}. Renormalising the rest without it changes it by {renormed:.2g}"
            + (
                ", more than dropping, as the no-op reading predicts."
                if renormed > dropped
                else ", no more than dropping."
            )
        )
    parts += _rho_sentence(test, "share")
    return " ".join(parts)


def _rho_sentence(test: NoOpTest, share: str) -> list[str]:
    rho = test.overall
    known = [f"{c} {rho[c]:+.2f}" for c in CHANGES if np.isfinite(rho[c])]
    return [f"Spearman's ρ of {share} against effect over all heads: {', '.join(known)}."] if known else []


def sink_sentence(result: HeadImportance, model: str, measure: str | None = None) -> str:
    """A decoder's no-op test, the sink test (METHODS §18), in words (heads 1-based): do the sink heads change the
    output when their attention to the first token (and the end token) is dropped, against switching them off?"""
    measure = measure or result.measure
    words = DECODER_MEASURE_WORDS.get(measure, measure)
    share, ablation = result.special_share, result.effect("ablate", measure)
    if ablation is None:
        return f"In {model}, the {measure} measure is not defined."
    sinks = share > SINK_THRESHOLD
    n = share.size
    most, _ = ranked_heads(ablation, 3)
    parts = [f"In {model}, switching one head off changes {words} most for heads {_names([h for h, _ in most])}."]
    drop, renormalise = result.effect("drop", measure), result.effect("renormalise", measure)
    if sinks.any():
        parts.append(
            f"{sinks.sum()} of {n} heads are sink heads (more than {SINK_THRESHOLD:.0%} of their attention on the "
            "first token)."
        )
        heads, who = sinks, "For them"
    else:
        parts.append(
            f"No head is a sink head, with more than {SINK_THRESHOLD:.0%} of its attention on the first token "
            f"(the most: {share.max():.0%})."
        )
        heads, who = np.ones_like(sinks), "Over all heads"
    if drop is None or renormalise is None:
        parts.append(
            f"{who}, switching the head off changes it by a median of {np.median(ablation[heads]):.2g}; knock the "
            "first token out (the knockouts) to test whether the sink is a no-op."
        )
    else:
        dropped, ablated, renormed = (float(np.median(x[heads])) for x in (drop, ablation, renormalise))
        fraction = dropped / ablated if ablated > 0 else float("nan")
        verdict = (
            "the sink is close to a no-op"
            if np.isfinite(fraction) and fraction < NO_OP_FRACTION
            else "the sink is not a no-op"
        )
        parts.append(
            f"{who}, dropping the first token's term (and the end token's, where the input has one) changes {words} "
            f"by a median of {dropped:.2g}, {fraction:.0%} of what switching the head off does ({ablated:.2g}): "
            f"{verdict}. Renormalising the rest without it changes it by {renormed:.2g}"
            + (", more than dropping." if renormed > dropped else ", no more than dropping.")
        )
    parts += _rho_sentence(result.no_op(measure), "first-token share")
    return " ".join(parts)


# ---------------------------------------------------------------------------- `ablate`: one input, some heads changed

HEADS_HELP = "the heads to switch off: 0-based layer-head pairs, comma-separated, e.g. 1-2,3-0"
CHANGE_HELP = (
    "ablate: their context vectors set to zero; drop / renormalise: the [CLS]/[SEP] knockouts of METHODS §15 "
    "(heads of one layer) (default %(default)s)"
)
Predictions = list[tuple[str, float]]


@dataclass(frozen=True)
class AblateOptions(Options):
    """Which heads change, and how."""

    heads: str = option("", HEADS_HELP)
    change: Change = option("ablate", CHANGE_HELP)
    seed: int = option(DEFAULT_SEED, "seed of the positions the mlm measure masks (default %(default)s)")


@dataclass
class MaskPrediction:
    """At a mask token typed in the text: the likeliest tokens before and after the change."""

    position: int  # 0-based token position
    before: Predictions
    after: Predictions

    def to_json(self) -> dict:
        return {"position": self.position, "before": [list(p) for p in self.before],
                "after": [list(p) for p in self.after]}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> MaskPrediction:
        def read(items: list) -> Predictions:
            return [(str(t), float(p)) for t, p in items]

        return cls(int(data["position"]), read(data["before"]), read(data["after"]))


@dataclass
class InputAblation:
    """One input with some heads changed: the §15 measures (mlm None without a trained masked-LM head) and the
    predictions at each typed mask."""

    tokens: list[str]
    heads: list[Head]
    change: str
    embedding: float  # 1 - cos of the mean-pooled sentence embeddings
    hidden: float
    mlm: float | None
    predictions: list[MaskPrediction] = field(default_factory=list)

    @property
    def similarity(self) -> float:
        """cos(s(x), s_M(x)): the sentence embedding's similarity to the unchanged model's."""
        return 1.0 - self.embedding

    def to_json(self) -> dict:
        """The `ablate` command's JSON (heads 0-based)."""
        return {
            "heads": [list(h) for h in self.heads],
            "change": self.change,
            "embedding": self.embedding,
            "similarity": self.similarity,
            "hidden": self.hidden,
            "mlm": self.mlm,
            "tokens": self.tokens,
            "predictions": [p.to_json() for p in self.predictions],
        }

    @classmethod
    def from_json(cls, data: dict) -> InputAblation:
        with malformed("`ablate` result"):
            return cls(
                tokens=[str(t) for t in data["tokens"]],
                heads=[(int(l), int(h)) for l, h in data["heads"]],
                change=str(data["change"]),
                embedding=float(data["embedding"]),
                hidden=float(data["hidden"]),
                mlm=None if data["mlm"] is None else float(data["mlm"]),
                predictions=[MaskPrediction.from_json(p) for p in data.get("predictions", [])],
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """One row: the heads changed (1-based layer-head), the change and its effect under each measure."""
        import pandas as pd

        row = {"model": model, "heads": ",".join(f"{l + 1}-{h + 1}" for l, h in self.heads), "change": self.change,
               "embedding": self.embedding, "similarity": self.similarity, "hidden": self.hidden, "mlm": self.mlm}  # fmt: skip
        return {"Effect of the change": pd.DataFrame([row])}


def ablate_input(lm: LoadedModel, item: CorpusInput, options: AblateOptions) -> InputAblation:
    """Run one input unchanged and with the heads changed; OptionError for heads outside the model, or a knockout
    across layers; AblationUnavailable for a model whose heads attnlib cannot reach."""
    check_available(lm)
    heads = parse_heads(options.heads, lm.facts.n_layers, lm.facts.n_heads)
    encoded = encode(lm, item.text_a, item.text_b)
    prep = prepare(lm, [encoded], seed=options.seed)
    if heads:
        (_, states), *_ = changed_states(prep, [Variant(options.change, heads)])
    else:  # nothing changed: the model compared with itself
        states = prep.output
    effects = prep.effects(states)
    predictions = []
    if prep.head is not None and not lm.facts.causal:  # a decoder's text has no mask token to predict at
        typed = torch.nonzero(prep.batch["input_ids"][0] == lm.tokenizer.mask_token_id)[:, 0]
        before = top_predictions(prep.head, prep.output[0, typed], lm.tokenizer)
        after = top_predictions(prep.head, states[0, typed], lm.tokenizer)
        predictions = [MaskPrediction(int(p), b, a) for p, b, a in zip(typed, before, after)]
    mlm = effects.get("mlm")
    return InputAblation(
        tokens=list(encoded.tokens),
        heads=list(heads),
        change=options.change,
        embedding=float(effects["embedding"][0, 0]),
        hidden=float(effects["hidden"][0, 0]),
        mlm=None if mlm is None else float(mlm[0, 0]),
        predictions=predictions,
    )


ABLATE: Analysis[AblateOptions, InputAblation] = Analysis(
    name="ablate",
    help="one sentence or pair with some heads switched off: the change of its embedding, hidden states and MLM loss",
    options=AblateOptions,
    reads="text",
    result=InputAblation,
    methods=(15,),
    compute=ablate_input,
)
