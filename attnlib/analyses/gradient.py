"""The `gradient` analysis: Clark et al.'s gradient importance of attention over a corpus (METHODS §5), the mean
|dLoss/dA| of the masked-LM loss to [SEP] keys and to all keys, per head; needs a trained masked-LM head."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from attnlib.analyses.base import Analysis, Options, option, own_loop, single_result
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.gradient import (
    DEFAULT_SEED,
    MASK_RATE,
    GradientImportanceResult,
    GradientImportanceSums,
    GradientImportanceUnavailable,
    add_gradients,
    unavailable_reason,
)

if TYPE_CHECKING:
    import pandas as pd

GRADIENT_BATCH = 8  # a backward pass keeps every layer's activations: smaller batches than the forward-only passes


@dataclass(frozen=True)
class GradientOptions(Options):
    """Which tokens the masked-LM loss masks: 15% of each input's non-special tokens, drawn by this seed."""

    seed: int = option(
        DEFAULT_SEED,
        "seed of the masked positions, 15 percent of the tokens that are not special (default %(default)s)",
    )


@dataclass
class GradientImportance(GradientImportanceResult):
    """GradientImportanceResult with its command's JSON read back: n_inputs, per layer sep and all, per head
    [layer][head] (0-based)."""

    @classmethod
    def from_json(cls, data: dict) -> GradientImportance:
        """Read back what to_json wrote; ResultFileError when malformed."""
        with malformed("`gradient` result"):
            heads = data["heads"]
            return cls(
                int(data["n_inputs"]), numeric_array(heads["sep"], "sep", 2), numeric_array(heads["all"], "all", 2)
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Mean |dLoss/dA| to [SEP] and to all keys, per layer (mean over heads) and per head."""
        from attnlib.analyses.tables import head_frame, layer_frame

        return {"Per layer (mean over heads)": layer_frame(model, self.layers),
                "Per head": head_frame(model, {"sep": self.sep, "all": self.all})}  # fmt: skip


def gradient_accumulators(lm: LoadedModel, options: GradientOptions) -> list:
    """Empty sums; GradientImportanceUnavailable (in words) for a model without a trained masked-LM head."""
    reason = unavailable_reason(lm)
    if reason is not None:
        raise GradientImportanceUnavailable(reason)
    return [GradientImportanceSums(lm.facts.n_layers, lm.facts.n_heads)]


def accumulate_gradients(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    options: GradientOptions = GradientOptions(),
    progress: Progress | None = None,
    batch_size: int = GRADIENT_BATCH,
) -> GradientImportanceSums:
    """Every input's gradient magnitudes in one accumulator (batches of at most GRADIENT_BATCH)."""
    sums = GradientImportanceSums(lm.facts.n_layers, lm.facts.n_heads)
    return add_gradients(lm, inputs, sums, min(batch_size, GRADIENT_BATCH), options.seed, MASK_RATE, progress)


def gradient_result(accumulators: list, options: GradientOptions) -> GradientImportance:
    """The result of the filled sums."""
    found = single_result(accumulators, options)
    return GradientImportance(found.n_inputs, found.sep, found.all)


GRADIENT: Analysis[GradientOptions, GradientImportance] = Analysis(
    name="gradient",
    help="gradient importance of attention to [SEP] and to all tokens per head over a corpus (needs a masked-LM head)",
    options=GradientOptions,
    reads="corpus",
    result=GradientImportance,
    methods=(5,),
    accumulators=gradient_accumulators,
    finish=gradient_result,
    fill=partial(own_loop, accumulate_gradients),
)
