"""An encoder-decoder's three attentions (T5, BART, Marian, ...) for a source text and a target text: the encoder's
self-attention over the source, the decoder's causal self-attention over the target and the decoder's cross-attention
from the target to the source, each as the model's own eager forward pass returns it (T5's relative position bias,
BART's learned positions and every family's masks included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attnlib.core.families import Part, UnsupportedModelError, unsupported_reason
from attnlib.core.hooks import NORMS, Cache, Capture, attentions_returned, hooked_stack, hooks
from attnlib.core.model import LoadedModel
from attnlib.core.runner import (
    Encoded,
    InputError,
    NormWeights,
    _align_words,
    block_scales,
    check_tokens,
    encode,
    norm_weights,
    returned_weights,
)

PARTS: tuple[Part, ...] = ("encoder", "decoder", "cross")
PART_NAMES: dict[Part, str] = {
    "encoder": "encoder self-attention (source to source)",
    "decoder": "decoder self-attention (target to target, causal)",
    "cross": "cross-attention (target to source)",
}
TargetFrom = Literal["given", "greedy", "source"]
GREEDY_TOKENS = 20  # new tokens of the default target: the model's own greedy output for the source
TARGET_FROM_TEXT: dict[TargetFrom, str] = {
    "given": "the target given",
    "greedy": f"no target given: the model's own greedy output for the source (at most {GREEDY_TOKENS} tokens)",
    "source": "no target given and the model's greedy output is empty: the source text itself",
}


class NotEncoderDecoderError(InputError):
    """An encoder-decoder's part or target asked of a model that is not one."""


@dataclass
class Target:
    """The decoder's input: its start token, then the target's tokens as in training (the labels shifted right)."""

    text: str
    source: TargetFrom  # where the text came from
    input_ids: list[int]
    tokens: list[str]
    words: list[str]
    word_ids: list[int | None]  # [n] index into words, None for the start token and special tokens
    truncated: bool
    n_tokens_full: int  # length before truncation (the decoder reads as many tokens as the target has labels)


@dataclass
class PartHeads:
    """One part's queries and keys as its logits see them, from the model's own forward pass (hooks on the part's
    attention modules): logits = qk_scale * q.k + score_bias, then the part's mask (the decoder's causal one), float32,
    0-based: queries [layers, heads, n_query, d], keys [layers, heads, n_key, d] (cross: the target's queries, the
    source's keys), qk_scale [layers], score_bias [layers, heads, n_query, n_key] (T5's relative position bias of its
    encoder or decoder) or None."""

    part: Part
    queries: np.ndarray
    keys: np.ndarray
    qk_scale: np.ndarray
    score_bias: np.ndarray | None


@dataclass
class PartValues:
    """What METHODS §11-12 read of one part, from the model's own forward pass (hooks on the part's modules), float32,
    0-based: values [layers, heads, n_key, d] (cross: the source's, projected from the encoder's output), and for the
    decoder (None for cross, whose residual is no key's: METHODS §18) each layer's input x [layers, n, hidden] and the
    divisors s_i [layers, n] of the LayerNorm after attention (1 for T5's pre-norm), with the part's NormWeights."""

    part: Part
    values: np.ndarray
    layer_inputs: np.ndarray | None
    block_scale: np.ndarray | None
    weights: NormWeights


@dataclass
class Seq2SeqMaps:
    """One source and target's attention maps, float32, 0-based: encoder [layers, heads, n_src, n_src], decoder
    [layers, heads, n_tgt, n_tgt] (nothing above the diagonal), cross [layers, heads, n_tgt, n_src]."""

    source: Encoded
    target: Target
    encoder: np.ndarray
    decoder: np.ndarray
    cross: np.ndarray
    heads: PartHeads | None = None  # the queries and keys of one part, when run_seq2seq was asked for them (qk)
    values: PartValues | None = None  # one part's value vectors and residuals, when run_seq2seq was asked (norms)

    def part(self, part: Part) -> tuple[np.ndarray, list[str], list[str]]:
        """A part's maps with its query tokens (rows) and key tokens (columns)."""
        if part not in PARTS:
            raise InputError(f"The part must be one of {', '.join(PARTS)}, not {part!r}.")
        src, tgt = self.source.tokens, self.target.tokens
        return {
            "encoder": (self.encoder, src, src),
            "decoder": (self.decoder, tgt, tgt),
            "cross": (self.cross, tgt, src),
        }[part]


def require_encoder_decoder(lm: LoadedModel, what: str) -> torch.nn.Module:
    """The whole encoder-decoder model; NotEncoderDecoderError naming `what` when the model is not one."""
    if lm.seq2seq is None:
        raise NotEncoderDecoderError(
            f"{what} are for encoder-decoder models (T5, BART, Marian, ...); '{lm.facts.name}' is "
            f"{'an' if lm.facts.kind == 'encoder' else 'a'} {lm.facts.kind} model."
        )
    return lm.seq2seq


def source_inputs(lm: LoadedModel, source: Encoded) -> dict:
    """The encoder's input_ids and attention_mask [1, n_src] on the model's device."""
    ids = torch.tensor([source.input_ids], device=lm.device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def greedy_target(lm: LoadedModel, source: Encoded) -> str:
    """The model's own greedy output for the source (at most GREEDY_TOKENS new tokens), as text; '' when it has none."""
    model = require_encoder_decoder(lm, "Targets")
    with torch.inference_mode():
        out = model.generate(
            **source_inputs(lm, source),
            max_new_tokens=GREEDY_TOKENS,
            do_sample=False,
            num_beams=1,
            num_return_sequences=1,
        )
    return lm.tokenizer.decode(out[0], skip_special_tokens=True).strip()


def encode_target(lm: LoadedModel, text: str, source: TargetFrom = "given") -> Target:
    """The decoder's input for a target text: the tokenizer's target encoding (`text_target`: Marian's target
    vocabulary) shifted right by the model's own prepare_decoder_input_ids_from_labels (its start token first, the
    last label, its eos, dropped), as in training."""
    model = require_encoder_decoder(lm, "Targets")
    if not text.strip():
        raise InputError("The target is empty: type a sentence (or leave it out for the model's own output).")
    tok, limit = lm.tokenizer, lm.facts.max_length
    kw = dict(text_target=text, return_special_tokens_mask=True, return_offsets_mapping=True)
    n_full = len(tok(**kw, truncation=False)["input_ids"])
    enc = tok(**kw, truncation=n_full > limit, max_length=limit)
    labels = torch.tensor([enc["input_ids"]])
    ids = model.prepare_decoder_input_ids_from_labels(labels=labels)[0].tolist()
    seq_ids = enc.sequence_ids()
    words, label_word_ids = _align_words(enc, seq_ids, text, None, False)
    if not any(w is not None for w in label_word_ids):
        raise InputError("The target has nothing the model can read: the tokenizer removed every character.")
    word_ids = [None, *label_word_ids[: len(ids) - 1]]
    return Target(text, source, ids, tok.convert_ids_to_tokens(ids), words, word_ids, n_full > limit, n_full)


def target_of(lm: LoadedModel, source: Encoded, source_text: str, target_text: str | None) -> Target:
    """The decoder's input: the target given, else the model's greedy output for the source, else (that empty) the
    source text itself (TARGET_FROM_TEXT)."""
    if target_text is not None and target_text.strip():
        return encode_target(lm, target_text)
    greedy = greedy_target(lm, source)
    return encode_target(lm, greedy, "greedy") if greedy else encode_target(lm, source_text, "source")


def _part_captures(lm: LoadedModel, qk: Part | None, norms: Part | None) -> tuple[Part, frozenset[Capture]]:
    """The part hooked and what its hooks capture: queries and keys (qk), the norms' values, layer inputs and norm
    inputs (norms; cross: its values only); UnsupportedModelError when the part's norms are not exact."""
    if qk is not None and norms is not None and qk != norms:
        raise ValueError(f"one part's hooks at a time: queries and keys of {qk}, norms of {norms}")
    captures: frozenset[Capture] = frozenset({"qk"}) if qk else frozenset()
    if norms is not None:
        reason = unsupported_reason(lm.encoder.config, "norms", norms)
        if reason is not None:
            raise UnsupportedModelError(reason)
        captures |= frozenset({"values"}) if norms == "cross" else NORMS
    return qk or norms or "encoder", captures


def run_seq2seq(
    lm: LoadedModel,
    source_text: str,
    target_text: str | None = None,
    qk: Part | None = None,
    norms: Part | None = None,
) -> Seq2SeqMaps:
    """The three attentions of an encoder-decoder for a source and a target (None or blank: the model's greedy
    output for the source, or the source itself when that is empty); `qk`: also that part's queries and keys, `norms`:
    that part's values and residuals (METHODS §11-12; the same part as qk's when both are given), captured in the same
    forward pass (attnlib.core.hooks)."""
    model = require_encoder_decoder(lm, "Targets and the decoder's attentions")
    part, captures = _part_captures(lm, qk, norms)
    source = encode(lm, source_text)
    check_tokens(source, False)
    target = target_of(lm, source, source_text, target_text)
    with hooks(lm, captures, part) as cache, attentions_returned([model]), torch.inference_mode():
        out = model(
            **source_inputs(lm, source),
            decoder_input_ids=torch.tensor([target.input_ids], device=lm.device),
            use_cache=False,
        )

    def stacked(maps) -> np.ndarray:
        return torch.stack([m[0] for m in returned_weights(maps)]).float().cpu().numpy()

    maps = Seq2SeqMaps(
        source, target, stacked(out.encoder_attentions), stacked(out.decoder_attentions), stacked(out.cross_attentions)
    )
    if qk is not None:
        if "qk" not in cache.captured:
            raise InputError(f"No queries and keys: {unsupported_reason(lm.encoder.config, 'queries_keys', qk)}")
        heads, zeros = cache.heads(), np.zeros_like(maps.part(qk)[0][0])
        biases = [zeros if b is None else b[0].float().cpu().numpy() for b in heads.biases]
        has_bias = any(b is not None for b in heads.biases)
        maps.heads = PartHeads(
            qk,
            stacked(heads.queries),
            stacked(heads.keys),
            np.array(heads.scales, np.float32),
            np.stack(biases) if has_bias else None,
        )
    if norms is not None:
        maps.values = _part_values(lm, cache, norms)
    return maps


def _part_values(lm: LoadedModel, cache: Cache, part: Part) -> PartValues:
    """A part's captured values (and the decoder's layer inputs and LayerNorm divisors) as float32 numpy arrays."""
    weights = norm_weights(hooked_stack(lm, part), part)
    values = torch.stack([v[0] for v in cache.heads().values]).float().cpu().numpy()
    if part == "cross":
        return PartValues(part, values, None, None, weights)
    inputs = torch.stack([x[0] for x in cache.layer_inputs]).float().cpu()  # [layers, n, hidden]
    layers, n, _ = inputs.shape
    scale = block_scales(cache.norm_inputs, weights, (1, layers, n))[0]
    return PartValues(part, values, inputs.numpy(), scale.numpy(), weights)
