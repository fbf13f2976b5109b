"""The `hta` analysis: Hidden Token Attribution per head of one sentence or pair (METHODS §9), with the layer-output
attribution of §13."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attnlib.analyses.base import Analysis, Options, option
from attnlib.analyses.positions import MODE_HELP, PROBES_HELP, SEED_HELP
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from attnlib.core.runner import encode
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.hta import DEFAULT_PROBES, DEFAULT_SEED, Attribution, Mode, attribute, exact_seconds

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class AttributionOptions(Options):
    """How the attribution is computed: exactly (forward mode), or estimated with random probes."""

    mode: Mode = option("exact", MODE_HELP)
    probes: int = option(DEFAULT_PROBES, PROBES_HELP, minimum=1)
    seed: int = option(DEFAULT_SEED, SEED_HELP)


@dataclass
class TokenAttribution(Attribution):
    """An Attribution with the command's JSON: mode, probes, tokens, input and previous [layer][head][query][input
    token], output [layer][query][input token], 0-based; each row sums to 1."""

    def to_json(self) -> dict:
        """The attribution by name, 0-based."""
        return {
            "mode": self.mode,
            "probes": self.probes,
            "tokens": self.tokens,
            "input": self.input,
            "previous": self.previous,
            "output": self.output,
        }

    @classmethod
    def from_json(cls, data: dict) -> TokenAttribution:
        """Read back what to_json wrote; ResultFileError when malformed."""
        with malformed("`hta` result"):
            output = data.get("output")
            return cls(
                tokens=[str(t) for t in data["tokens"]],
                input=numeric_array(data["input"], "input", 4, np.float32),
                previous=numeric_array(data["previous"], "previous", 4, np.float32),
                mode=str(data["mode"]),
                probes=None if data["probes"] is None else int(data["probes"]),
                output=None if output is None else numeric_array(output, "output", 3, np.float32),
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Per head, each query's attribution to the input tokens and to the previous layer; per layer, the output's."""
        from attnlib.analyses.tables import cell_frame

        per_head = {"input": self.input, "previous": self.previous}
        tables = {"Attribution per head": cell_frame(model, per_head, self.tokens, self.tokens, ("query", "token"))}
        if self.output is not None:
            tables["Layer-output attribution"] = cell_frame(
                model, {"output": self.output}, self.tokens, self.tokens, ("query", "token")
            )
        return tables


def token_attribution(lm: LoadedModel, item: CorpusInput, options: AttributionOptions) -> TokenAttribution:
    """Attribute one sentence or pair, with the layer-output attribution."""
    a = attribute(lm, item.text_a, item.text_b, options.mode, options.probes, options.seed, with_output=True)
    return TokenAttribution(a.tokens, a.input, a.previous, a.mode, a.probes, a.output)


def exact_cost(lm: LoadedModel, item: CorpusInput, options: AttributionOptions) -> str | None:
    """What an exact attribution of this input costs, said before it starts."""
    if options.mode != "exact":
        return None
    n = len(encode(lm, item.text_a, item.text_b).tokens)
    return f"exact attribution of {n} tokens: about {exact_seconds(lm.facts, n):.0f} s on 2 CPU cores"


HTA: Analysis[AttributionOptions, TokenAttribution] = Analysis(
    name="hta",
    help="Hidden Token Attribution per head (input and previous-layer contribution)",
    options=AttributionOptions,
    reads="text",
    result=TokenAttribution,
    methods=(9, 13),
    compute=token_attribution,
    note=exact_cost,
)
