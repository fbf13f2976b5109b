"""The `attention` analysis: the attention maps of one sentence or pair, with its tokens, segments and words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from .analysis import Analysis, OptionError, Options, option
from .corpus import CorpusInput
from .model import LoadedModel
from .results import ResultFileError, malformed, numeric_array
from .runner import run
from .seq2seq import PARTS, require_encoder_decoder, run_seq2seq


@dataclass(frozen=True)
class AttentionOptions(Options):
    """Which attention of an encoder-decoder, and its target; other models have one attention and no target."""

    part: Literal["auto", "encoder", "decoder", "cross"] = option(
        "auto",
        "encoder-decoders (T5, BART, Marian): the encoder's self-attention, the decoder's or the cross-attention "
        "(target to source); auto: the encoder's. Other models: auto, their own self-attention (default %(default)s)",
    )
    target: str = option(
        "",
        "encoder-decoders: the target text, the decoder's input after its start token (default: the model's own "
        "greedy output for the text)",
    )


@dataclass
class AttentionMaps:
    """One input's attention maps [layers, heads, query, key] (float32, 0-based) and what they are over."""

    tokens: list[str]
    segments: list[int]  # [n] 0 for sentence A, 1 for sentence B
    words: list[str]
    word_ids: list[int | None]  # [n] index into words, None for special tokens
    truncated: bool
    n_tokens_full: int  # length before truncation
    attentions: np.ndarray  # [layers, heads, n, n]; an encoder-decoder's cross part: [layers, heads, n, n_source]
    encoder_decoder: dict | None = None  # an encoder-decoder's part, target and key tokens; None for other models

    def to_json(self) -> dict:
        """tokens, segments, words, word_ids, truncated, n_tokens_before_truncation, attentions (0-based); for an
        encoder-decoder first its kind, part, source, target, where the target came from and the key tokens."""
        return {
            **(self.encoder_decoder or {}),
            "tokens": self.tokens,
            "segments": self.segments,
            "words": self.words,
            "word_ids": self.word_ids,
            "truncated": self.truncated,
            "n_tokens_before_truncation": self.n_tokens_full,
            "attentions": self.attentions,
        }

    @classmethod
    def from_json(cls, data: dict) -> AttentionMaps:
        """Read back what to_json wrote; ResultFileError when malformed."""
        with malformed("`attention` result"):
            maps = cls(
                [str(t) for t in data["tokens"]],
                [int(s) for s in data["segments"]],
                [str(w) for w in data["words"]],
                [None if i is None else int(i) for i in data["word_ids"]],
                bool(data["truncated"]),
                int(data["n_tokens_before_truncation"]),
                numeric_array(data["attentions"], "attentions", 4, np.float32),
            )
            if "part" in data:
                maps.encoder_decoder = {k: data[k] for k in ENCODER_DECODER_KEYS}
                keys = [str(t) for t in data["key_tokens"]]
        n = len(maps.tokens)
        n_keys = len(keys) if maps.encoder_decoder else n
        if maps.attentions.shape[2:] != (n, n_keys) or len(maps.segments) != n or len(maps.word_ids) != n:
            raise ResultFileError("the `attention` result's maps, tokens and segments differ in length.")
        return maps


ENCODER_DECODER_KEYS = ("kind", "part", "source", "target", "target_from", "key_tokens")


def attention_maps(lm: LoadedModel, item: CorpusInput, options: AttentionOptions) -> AttentionMaps:
    """Run one sentence or pair and keep its attention maps; an encoder-decoder's chosen part for a source and
    target."""
    if lm.seq2seq is not None:
        return _encoder_decoder_maps(lm, item, options)
    if options.part not in ("auto", lm.facts.kind) or options.target:
        require_encoder_decoder(lm, "--part encoder|decoder|cross and --target")
    r = run(lm, item.text_a, item.text_b, capture_qk=False)
    return AttentionMaps(
        r.tokens, r.segments.tolist(), r.words, list(r.word_ids), r.truncated, r.n_tokens_full, r.attentions
    )


def _encoder_decoder_maps(lm: LoadedModel, item: CorpusInput, options: AttentionOptions) -> AttentionMaps:
    """The maps of one part of an encoder-decoder: the query tokens' words, and the key tokens beside them."""
    if item.text_b is not None or not isinstance(item.text_a, str):
        raise OptionError("An encoder-decoder reads one source text and a target (--target), not a pair (--pair).")
    maps = run_seq2seq(lm, item.text_a, options.target or None)
    part = "encoder" if options.part == "auto" else options.part
    assert part in PARTS
    attentions, _queries, keys = maps.part(part)
    about = {
        "kind": lm.facts.kind,
        "part": part,
        "source": item.text_a,
        "target": maps.target.text,
        "target_from": maps.target.source,
        "key_tokens": keys,
    }
    if part == "encoder":
        s = maps.source
        return AttentionMaps(
            s.tokens, s.segments.tolist(), s.words, list(s.word_ids), s.truncated, s.n_tokens_full, attentions, about
        )
    t = maps.target
    return AttentionMaps(
        t.tokens, [0] * len(t.tokens), t.words, t.word_ids, t.truncated, t.n_tokens_full, attentions, about
    )


ATTENTION: Analysis[AttentionOptions, AttentionMaps] = Analysis(
    name="attention",
    help="attention maps of one sentence or pair",
    options=AttentionOptions,
    reads="text",
    result=AttentionMaps,
    methods=(),
    compute=attention_maps,
)
