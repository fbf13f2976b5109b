"""The `norms` analysis: value-weighted norms, GlobEnc's N and N_ResLN and both rollouts of one sentence or pair
(METHODS §11-13); of an encoder-decoder's encoder, decoder (causal) or cross-attention (§11 alone: METHODS §18)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlib.analyses.attention import (
    ENCODER_DECODER_KEYS,
    PART_HELP,
    TARGET_HELP,
    PartChoice,
    check_one_attention,
    encoder_decoder_keys,
    source_of,
)
from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.corpus import CorpusInput
from attnlib.core.families import Part, unsupported_reason
from attnlib.core.model import LoadedModel
from attnlib.core.runner import run
from attnlib.core.seq2seq import run_seq2seq
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.norms import NormMaps, ValueNormMaps, norm_maps, part_norm_maps
from attnlib.stats.norms import row_normalised as row_normalised  # what the Live page draws of one input, here
from attnlib.stats.norms import value_norms_from_values as value_norms_from_values
from attnlib.stats.norms import weighted_norms as weighted_norms

if TYPE_CHECKING:
    import pandas as pd

RANKS = {"value_norm": 3, "weighted_norm": 4, "layer_norm": 3, "residual_ln": 3, "attention_rollout": 3,
         "residual_ln_rollout": 3}  # fmt: skip
RESIDUAL_MAPS = ("residual_ln", "attention_rollout", "residual_ln_rollout")  # METHODS §12-13: none for cross-attention
LAYER_MAPS = ("layer_norm", *RESIDUAL_MAPS)  # the [layers, n, n] maps


@dataclass(frozen=True)
class NormOptions(Options):
    """Which attention of an encoder-decoder, and its target; other models have one attention and no target."""

    part: PartChoice = option("auto", PART_HELP, added_later=True)
    target: str = option("", TARGET_HELP, added_later=True)


@dataclass
class InputNorms(ValueNormMaps):
    """The command's JSON: tokens, value_norm [layer][head][key], weighted_norm [layer][head][query][key], and per
    layer [query][key] layer_norm, residual_ln (not row-normalised), attention_rollout, residual_ln_rollout; for an
    encoder-decoder's decoder or cross part first its kind, part, source, target and key tokens. Cross-attention has
    §11 alone: its §12-13 maps are None, and `not_computed` says why."""

    residual_ln: np.ndarray | None = None
    attention_rollout: np.ndarray | None = None
    residual_ln_rollout: np.ndarray | None = None
    encoder_decoder: dict | None = None  # ENCODER_DECODER_KEYS of a decoder or cross part; None otherwise
    not_computed: str | None = None  # why the §12-13 maps are None

    @property
    def key_tokens(self) -> list[str]:
        """The keys' (columns') tokens: the source's for cross-attention, else the tokens."""
        return (self.encoder_decoder or {}).get("key_tokens") or self.tokens

    def to_json(self) -> dict:
        """The maps by name, 0-based (null where not computed, with `not_computed`: the maps and why)."""
        maps = {name: getattr(self, name) for name in ("tokens", *RANKS)}
        missing = [name for name in RESIDUAL_MAPS if maps[name] is None]
        why = {"not_computed": {"maps": missing, "reason": self.not_computed}} if missing else {}
        return {**(self.encoder_decoder or {}), **maps, **why}

    @classmethod
    def from_json(cls, data: dict) -> InputNorms:
        """Read back what to_json wrote; ResultFileError when malformed."""
        with malformed("`norms` result"):
            maps: dict[str, Any] = {
                name: None if data[name] is None and name in RESIDUAL_MAPS else numeric_array(data[name], name, rank)
                for name, rank in RANKS.items()
            }
            about = {k: data[k] for k in ENCODER_DECODER_KEYS} if "part" in data and "key_tokens" in data else None
            reason = data["not_computed"]["reason"] if "not_computed" in data else None
            return cls(tokens=[str(t) for t in data["tokens"]], **maps, encoder_decoder=about, not_computed=reason)

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """The weighted norms per head, then the per-layer maps (norms, residual+LayerNorm, both rollouts;
        cross-attention: the norms alone, its keys the source's tokens)."""
        from attnlib.analyses.tables import cell_frame

        layer_maps = {name: m for name in LAYER_MAPS if (m := getattr(self, name)) is not None}
        keys = self.key_tokens
        return {
            "Value-weighted norms per head": cell_frame(
                model, {"weighted_norm": self.weighted_norm}, self.tokens, keys
            ),
            "Per layer": cell_frame(model, layer_maps, self.tokens, keys),
        }


def input_norms(lm: LoadedModel, item: CorpusInput, options: NormOptions) -> InputNorms:
    """Run one sentence or pair with its value vectors and make every §11-13 map; an encoder-decoder's decoder or
    cross part for a source and target (cross: §11 alone)."""
    part = "encoder" if options.part == "auto" else options.part
    if lm.seq2seq is None:
        check_one_attention(lm, options.part, options.target)
    elif part != "encoder":
        return _part_norms(lm, item, options.target, part)
    elif options.target:
        raise OptionError(
            "--target is the decoder's input: the encoder's norms do not read it. Give --part decoder or --part cross "
            "for the norms of the attentions that read the target."
        )
    maps = norm_maps(run(lm, item.text_a, item.text_b, capture_qk=False, capture_norms=True))
    return InputNorms(**{f.name: getattr(maps, f.name) for f in fields(NormMaps)})


def _part_norms(lm: LoadedModel, item: CorpusInput, target: str, part: Part) -> InputNorms:
    """The norms of an encoder-decoder's decoder (§11-13) or cross-attention (§11, and why not §12-13)."""
    source = source_of(item)
    maps = run_seq2seq(lm, source, target or None, norms=part)
    found = part_norm_maps(maps)
    about = encoder_decoder_keys(lm, source, maps, part)
    shared = {f.name: getattr(found, f.name) for f in fields(ValueNormMaps)}
    if isinstance(found, NormMaps):
        residual = {name: getattr(found, name) for name in RESIDUAL_MAPS}
        return InputNorms(**shared, **residual, encoder_decoder=about)
    return InputNorms(
        **shared, encoder_decoder=about, not_computed=unsupported_reason(lm.encoder.config, "residual_ln", part)
    )


NORMS: Analysis[NormOptions, InputNorms] = Analysis(
    name="norms",
    help="value-weighted norms, residual+LayerNorm norms and rollouts of one input (an encoder-decoder's part: --part)",
    options=NormOptions,
    reads="text",
    result=InputNorms,
    methods=(11, 12, 13),
    compute=input_norms,
)
