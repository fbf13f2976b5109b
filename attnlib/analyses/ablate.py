"""The `ablate` analysis: one sentence or pair with a set of heads switched off (or knocked out at [CLS]/[SEP]), its
effect under each measure of METHODS §15, and a masked-LM model's top predictions at each typed mask before and
after."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from attnlib.analyses.base import Analysis, Options, option
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from attnlib.core.runner import encode
from attnlib.results.files import malformed
from attnlib.stats.importance import (
    DEFAULT_SEED,
    Change,
    Head,
    Variant,
    changed_states,
    check_available,
    parse_heads,
    prepare,
    top_predictions,
)

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
