"""The `norms` analysis: value-weighted norms, GlobEnc's N and N_ResLN and both rollouts of one sentence or pair
(METHODS §11-13)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from attnlib.analyses.base import Analysis, Options
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from attnlib.core.runner import run
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.batched_norms import NormMaps
from attnlib.stats.value_norms import norm_maps

RANKS = {"value_norm": 3, "weighted_norm": 4, "layer_norm": 3, "residual_ln": 3, "attention_rollout": 3,
         "residual_ln_rollout": 3}  # fmt: skip


@dataclass(frozen=True)
class NormOptions(Options):
    """The norm maps of one input take no options."""


@dataclass
class InputNorms(NormMaps):
    """NormMaps with the command's JSON: tokens, value_norm [layer][head][key], weighted_norm [layer][head][query][key],
    and per layer [query][key] layer_norm, residual_ln (not row-normalised), attention_rollout, residual_ln_rollout."""

    def to_json(self) -> dict:
        """The maps by name, 0-based."""
        return {f.name: getattr(self, f.name) for f in fields(NormMaps)}

    @classmethod
    def from_json(cls, data: dict) -> InputNorms:
        """Read back what to_json wrote; ResultFileError when malformed."""
        with malformed("`norms` result"):
            maps = {name: numeric_array(data[name], name, rank) for name, rank in RANKS.items()}
            return cls(tokens=[str(t) for t in data["tokens"]], **maps)


def input_norms(lm: LoadedModel, item: CorpusInput, options: NormOptions) -> InputNorms:
    """Run one sentence or pair with its value vectors and make every §11-13 map."""
    maps = norm_maps(run(lm, item.text_a, item.text_b, capture_qk=False, capture_norms=True))
    return InputNorms(**{f.name: getattr(maps, f.name) for f in fields(NormMaps)})


NORMS: Analysis[NormOptions, InputNorms] = Analysis(
    name="norms",
    help="value-weighted norms, residual+LayerNorm norms and rollouts of one input",
    options=NormOptions,
    reads="text",
    result=InputNorms,
    methods=(11, 12, 13),
    compute=input_norms,
)
