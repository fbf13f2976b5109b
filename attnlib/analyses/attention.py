"""The `attention` analysis: the attention maps of one sentence or pair, with its tokens, segments and words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.blockwise import Block, run_blockwise, supports_blockwise
from attnlib.core.corpus import CorpusInput
from attnlib.core.memory import check_memory, memory_limit, run_size
from attnlib.core.model import LoadedModel
from attnlib.core.runner import Encoded, check_tokens, encode, model_inputs, run_encoded
from attnlib.core.seq2seq import PARTS, Part, Seq2SeqMaps, require_encoder_decoder, run_seq2seq
from attnlib.results.files import ResultFileError, malformed, numeric_array

MAX_JSON_VALUES = 2**25  # attention weights the command prints as JSON (some 500 MB of text); more go to --out x.npz


PartChoice = Literal["auto", "encoder", "decoder", "cross"]


PART_HELP = (
    "encoder-decoders (T5, BART, Marian): the encoder's self-attention, the decoder's or the cross-attention (target to "
    "source); auto: the encoder's. Other models: auto, their own self-attention (default %(default)s)"
)
TARGET_HELP = (
    "encoder-decoders: the target text, the decoder's input after its start token (default: the model's own greedy "
    "output for the text)"
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class AttentionOptions(Options):
    """Which attention of an encoder-decoder, and its target; other models have one attention and no target."""

    part: PartChoice = option("auto", PART_HELP)
    target: str = option("", TARGET_HELP)
    layers: str = option("", "only these layers, 0-based: numbers and half-open ranges, e.g. 0,3:6 (default: all)")
    heads: str = option("", "only these heads, 0-based, written as --layers (default: all)")
    rows: str = option("", "only these query rows (token positions), 0-based, half-open: START:END (default: all)")

    def selects(self) -> bool:
        """Whether only some layers, heads or rows are asked for."""
        return bool(self.layers or self.heads or self.rows)


def parse_indices(text: str, size: int, flag: str) -> list[int]:
    """0-based indices below size from numbers and half-open ranges ("0,3:6"); all of them for an empty text."""
    if not text.strip():
        return list(range(size))
    found: list[int] = []
    for part in text.split(","):
        bounds = part.strip().split(":")
        try:
            first, last = (int(bounds[0]), int(bounds[0]) + 1) if len(bounds) == 1 else (int(bounds[0]), int(bounds[1]))
        except ValueError:
            raise OptionError(f"{flag} takes 0-based numbers and ranges such as 0,3:6, not {text!r}.") from None
        if len(bounds) > 2 or not 0 <= first < last <= size:
            raise OptionError(f"{flag} {part.strip()!r} is outside 0..{size - 1} (0-based; ranges are half-open).")
        found.extend(i for i in range(first, last) if i not in found)
    return found


def parse_rows(text: str, n: int) -> tuple[int, int]:
    """The half-open window START:END of query rows (the whole input for an empty text), within the input's n."""
    if not text.strip():
        return 0, n
    try:
        first, last = (int(x) for x in text.split(":"))
    except ValueError:
        raise OptionError(f"--rows takes a half-open window START:END of 0-based positions, not {text!r}.") from None
    if not 0 <= first < last:
        raise OptionError(f"--rows {text!r} is empty or negative (0-based, half-open: START:END).")
    if first >= n:
        raise OptionError(f"--rows {text!r} starts after this input's last token ({n} tokens, 0-based).")
    return first, min(last, n)


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
    selection: dict | None = None  # {"layers", "heads", "rows"} when only those were kept (attentions: rows x keys)

    def save_npz(self, path: str) -> None:
        """Write the maps and what they are over as a NumPy .npz (float32 attentions; the rest as arrays)."""
        chosen = self.selection or {}
        np.savez_compressed(
            path,
            attentions=self.attentions,
            tokens=np.array(self.tokens),
            word_ids=np.array([-1 if i is None else i for i in self.word_ids]),
            layers=np.array(chosen.get("layers", range(self.attentions.shape[0]))),
            heads=np.array(chosen.get("heads", range(self.attentions.shape[1]))),
            rows=np.array(chosen.get("rows", (0, self.attentions.shape[2]))),
        )

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
            **({"selection": self.selection} if self.selection else {}),
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
            if "selection" in data:
                maps.selection = {k: [int(i) for i in data["selection"][k]] for k in ("layers", "heads", "rows")}
        n = len(maps.tokens)
        n_keys = len(keys) if maps.encoder_decoder else n
        first, last = maps.selection["rows"] if maps.selection else (0, n)
        if maps.attentions.shape[2:] != (last - first, n_keys) or len(maps.segments) != n or len(maps.word_ids) != n:
            raise ResultFileError("the `attention` result's maps, tokens and segments differ in length.")
        return maps

    @property
    def key_tokens(self) -> list[str]:
        """The keys' tokens: an encoder-decoder's cross part: the source's; the queries' otherwise."""
        return (self.encoder_decoder or {}).get("key_tokens") or self.tokens

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Every weight kept: layer, head, query and key (an encoder-decoder's cross part: source tokens as keys)."""
        from attnlib.analyses.tables import cell_frame

        chosen = self.selection or {}
        first_row = chosen["rows"][0] if "rows" in chosen else 0
        frame = cell_frame(model, {"weight": self.attentions}, self.tokens, self.key_tokens,
                           layers=chosen.get("layers"), heads=chosen.get("heads"), first_row=first_row)  # fmt: skip
        return {"Attention weights": frame}


ENCODER_DECODER_KEYS = ("kind", "part", "source", "target", "target_from", "key_tokens")


# The end of the refusal of maps that would not fit in memory: what makes them fit, for a family whose attention runs
# block-wise (a choice of layers, heads and rows is computed so, never a whole layer's maps) and for one whose does not
WHAT_FITS = {
    True: "Use a shorter text, or choose some of the maps with --layers, --heads or --rows (computed block-wise, "
    "METHODS §19).",
    False: "Use a shorter text (this model's attention does not run block-wise: --layers, --heads and --rows are cut "
    "from the whole maps).",
}


def attention_maps(lm: LoadedModel, item: CorpusInput, options: AttentionOptions) -> AttentionMaps:
    """Run one sentence or pair and keep its attention maps; an encoder-decoder's chosen part for a source and
    target."""
    if lm.seq2seq is not None:
        return _selected(_encoder_decoder_maps(lm, item, options), options)
    check_one_attention(lm, options.part, options.target)
    encoded = encode(lm, item.text_a, item.text_b)
    if isinstance(item.text_a, str):
        check_tokens(encoded, item.text_b is not None)
    blockwise = supports_blockwise(lm.encoder)
    if options.selects() and blockwise:
        return _selected_blockwise(lm, encoded, options)
    check_memory(run_size(lm, encoded.n), memory_limit(device=lm.device), advice=WHAT_FITS[blockwise])
    r = run_encoded(lm, [encoded])[0]
    return _selected(_maps_of(r, r.attentions), options)


def _maps_of(e: Encoded, attentions: np.ndarray) -> AttentionMaps:
    """An encoded input's maps."""
    return AttentionMaps(
        e.tokens, e.segments.tolist(), e.words, list(e.word_ids), e.truncated, e.n_tokens_full, attentions
    )


def _selection(options: AttentionOptions, layers: int, heads: int, n: int) -> dict:
    """The layers, heads and rows window the options ask for, checked against the model and the input."""
    return {
        "layers": parse_indices(options.layers, layers, "--layers"),
        "heads": parse_indices(options.heads, heads, "--heads"),
        "rows": list(parse_rows(options.rows, n)),
    }


def _selected(maps: AttentionMaps, options: AttentionOptions) -> AttentionMaps:
    """The maps cut to the options' layers, heads and rows (unchanged when they ask for everything)."""
    if not options.selects():
        return maps
    layers, heads, n = maps.attentions.shape[:3]
    chosen = _selection(options, layers, heads, n)
    first, last = chosen["rows"]
    maps.attentions = np.ascontiguousarray(maps.attentions[np.ix_(chosen["layers"], chosen["heads"])][:, :, first:last])
    maps.selection = chosen
    return maps


def _selected_blockwise(lm: LoadedModel, encoded: Encoded, options: AttentionOptions) -> AttentionMaps:
    """The chosen layers, heads and rows computed block-wise (METHODS §19): never a whole layer's [heads, n, n]."""
    f = lm.facts
    chosen = _selection(options, f.n_layers, f.n_heads, encoded.n)
    first, last = chosen["rows"]
    where = {layer: k for k, layer in enumerate(chosen["layers"])}
    out = np.zeros((len(where), len(chosen["heads"]), last - first, encoded.n), np.float32)

    def keep(block: Block) -> None:
        start = block.first_row
        lo, hi = max(first, start), min(last, start + block.rows)
        if block.layer in where and lo < hi:
            out[where[block.layer], :, lo - first : hi - first] = block.dense()[
                0, chosen["heads"], lo - start : hi - start
            ]

    run_blockwise(lm, model_inputs(lm, [encoded]), keep)
    maps = _maps_of(encoded, out)
    maps.selection = chosen
    return maps


def check_one_attention(lm: LoadedModel, part: PartChoice, target: str) -> None:
    """A model that is not an encoder-decoder has one attention (part auto, or its own kind) and no target;
    NotEncoderDecoderError otherwise."""
    if part not in ("auto", lm.facts.kind) or target:
        require_encoder_decoder(lm, "--part encoder|decoder|cross and --target")


def source_of(item: CorpusInput) -> str:
    """The source text of an encoder-decoder's input (it reads one text); OptionError for a pair or a word list."""
    if item.text_b is not None or not isinstance(item.text_a, str):
        raise OptionError("An encoder-decoder reads one source text and a target (--target), not a pair (--pair).")
    return item.text_a


def encoder_decoder_keys(lm: LoadedModel, source: str, maps: Seq2SeqMaps, part: Part) -> dict:
    """The JSON keys of one part of an encoder-decoder (ENCODER_DECODER_KEYS): its kind, the part, the source, the
    target, where the target came from and the part's key tokens (cross: the source's)."""
    return {
        "kind": lm.facts.kind,
        "part": part,
        "source": source,
        "target": maps.target.text,
        "target_from": maps.target.source,
        "key_tokens": maps.part(part)[2],
    }


def _encoder_decoder_maps(lm: LoadedModel, item: CorpusInput, options: AttentionOptions) -> AttentionMaps:
    """The maps of one part of an encoder-decoder: the query tokens' words, and the key tokens beside them."""
    source = source_of(item)
    maps = run_seq2seq(lm, source, options.target or None)
    part = "encoder" if options.part == "auto" else options.part
    assert part in PARTS
    attentions = maps.part(part)[0]
    about = encoder_decoder_keys(lm, source, maps, part)
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
