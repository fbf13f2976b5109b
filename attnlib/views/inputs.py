"""What the notebook views take: one of our RunResults, or plain arrays as bertviz takes them, from any model: one
model's self-attention (a sentence or a pair), or an encoder-decoder's encoder, decoder and cross attention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from attnlib.core.runner import RunResult

# Pair filter: name -> (segment of the query tokens, segment of the key tokens); None keeps every token.
PAIR_FILTERS: dict[str, tuple[int | None, int | None]] = {
    "All": (None, None),
    "A→A": (0, 0),
    "B→B": (1, 1),
    "A→B": (0, 1),
    "B→A": (1, 0),
}
WHAT_TO_PASS = (
    "pass `outputs.attentions` of a model loaded with attn_implementation='eager' and run with "
    "output_attentions=True (in transformers 5, `outputs.attentions` is empty under the default sdpa attention, and "
    "bertviz's `outputs[-1]` is often the empty `cross_attentions`); for an encoder-decoder, pass "
    "encoder_attention=outputs.encoder_attentions, decoder_attention=outputs.decoder_attentions, "
    "cross_attention=outputs.cross_attentions with encoder_tokens= and decoder_tokens=."
)
EAGER = (
    "the model computed no weights: load it with attn_implementation='eager' and run it with output_attentions=True."
)


@dataclass(frozen=True)
class Kind:
    """One kind of attention a view draws (and switches between): maps [layers, heads, queries, keys] and the tokens
    and 0-based positions of the queries (left) and of the keys (right)."""

    name: str  # the view's name for it ("Encoder", "Cross", "Sentence A → Sentence B"); "" for a model's own attention
    source: str  # the argument it came from, for messages
    maps: np.ndarray
    left: list[str]
    right: list[str]
    left_pos: list[int]
    right_pos: list[int]


def as_numpy(x: Any) -> np.ndarray:
    """A numpy array of x (a torch tensor on any device and in any dtype, or anything np.asarray takes), float32."""
    if hasattr(x, "detach"):  # a torch tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def per_layer(values: Any, name: str, last: str) -> np.ndarray:
    """[layers, heads, n, last] (last: n for attention, d for queries and keys) from an array of that shape, one with
    a batch of one after the layers, or a list or tuple of per-layer arrays or tensors [(1,) heads, n, last] (what HF
    models return with output_attentions=True)."""
    if isinstance(values, list | tuple):
        if not values:
            raise ValueError(f"{name}: no layers.")
        if any(v is None for v in values):
            raise ValueError(f"{name}: layers without weights (None); {EAGER}")
        array = np.stack([as_numpy(v) for v in values])
    else:
        array = as_numpy(values)
    if array.ndim == 5:
        if array.shape[1] != 1:
            raise ValueError(
                f"{name}: a batch of {array.shape[1]} inputs; a view shows one (e.g. [a[i : i + 1] for a in {name}])."
            )
        array = array[:, 0]
    if array.ndim != 4:
        raise ValueError(
            f"{name}: expected [layers][heads][n][{last}] (per layer [heads][n][{last}]), got {array.shape}"
        )
    return array


def attention_of(attention: RunResult | Any, name: str = "attention", square: bool = True) -> np.ndarray:
    """Attention maps [layers, heads, queries, keys] of a RunResult or of arrays (see per_layer); square unless told."""
    if attention is None or (isinstance(attention, list | tuple) and not attention):
        given = "None" if attention is None else f"an empty {type(attention).__name__}"
        raise ValueError(f"{name}: {given}, no layers; {WHAT_TO_PASS}")
    maps = attention.attentions if isinstance(attention, RunResult) else per_layer(attention, name, "n")
    if square and maps.shape[-1] != maps.shape[-2]:
        raise ValueError(f"{name}: maps must be square [n][n], got {maps.shape[-2]} x {maps.shape[-1]}")
    return maps


def labels_of(tokens: Sequence[str] | None, n: int, name: str, hint: str) -> list[str]:
    """The n labels of `tokens` (the argument `name`), checked; `hint` says what to give when they are missing."""
    if tokens is None:
        raise ValueError(f"{name}: {hint}")
    labels = [str(t) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"{name}: {len(labels)} tokens for attention over {n} positions.")
    return labels


def tokens_of(attention: RunResult | Any, tokens: Sequence[str] | None, n: int) -> list[str]:
    """The n token labels: those given, else the RunResult's."""
    if tokens is None and isinstance(attention, RunResult):
        tokens = attention.tokens
    return labels_of(tokens, n, "tokens", "give the tokens of the input (arrays carry none).")


def prettified(tokens: Sequence[str]) -> list[str]:
    """bertviz's prettify_tokens: byte-level BPE's 'Ġ' and SentencePiece's '▁' shown as spaces, '</w>' dropped
    (WordPiece's '##' is kept, as bertviz keeps it)."""
    return [t.replace("Ġ", " ").replace("▁", " ").replace("</w>", "") for t in tokens]


def segments_of(attention: RunResult | Any, sentence_b_start: int | None, n: int) -> list[int] | None:
    """Segment of each position (0 = sentence A, 1 = B): from sentence_b_start (bertviz's argument, the position of
    B's first token), else the RunResult's for a pair, else None (a single sentence)."""
    if sentence_b_start is not None:
        if not 0 < sentence_b_start < n:
            raise ValueError(f"sentence_b_start: {sentence_b_start} is not a position between 1 and {n - 1}.")
        return [0] * sentence_b_start + [1] * (n - sentence_b_start)
    if isinstance(attention, RunResult) and int(np.max(attention.segments, initial=0)) == 1:
        return [int(s) for s in attention.segments]
    return None


def filter_positions(segments: Sequence[int] | None, n: int, pair_filter: str) -> tuple[list[int], list[int]]:
    """Query and key positions that a pair filter keeps (all positions for a single sentence or 'All')."""
    if pair_filter not in PAIR_FILTERS:
        raise ValueError(f"pair filter must be one of {list(PAIR_FILTERS)}, not {pair_filter!r}")
    src, dst = PAIR_FILTERS[pair_filter]
    if segments is None or src is None:
        return list(range(n)), list(range(n))
    seg = np.asarray(segments)
    return np.flatnonzero(seg == src).tolist(), np.flatnonzero(seg == dst).tolist()


def pair_name(pair_filter: str) -> str:
    """The view's name of a pair filter, as bertviz names it ("A→B": "Sentence A → Sentence B")."""
    src, _, dst = pair_filter.partition("→")
    return pair_filter if not dst else f"Sentence {src} → Sentence {dst}"


def pair_kinds(maps: np.ndarray, labels: list[str], segments: list[int] | None, pair_filter: str) -> list[Kind]:
    """A model's own attention: one kind for a sentence or a pair filter, the five filters of a pair for 'All'."""
    if segments is None and pair_filter != "All":
        raise ValueError("pair_filter: a single sentence has no A and B (give sentence_b_start).")
    names = list(PAIR_FILTERS) if segments is not None and pair_filter == "All" else [pair_filter]
    kinds = []
    for name in names:
        left, right = filter_positions(segments, len(labels), name)
        kept = maps if name == "All" else maps[..., left, :][..., right]
        shown = [labels[i] for i in left], [labels[j] for j in right]
        kinds.append(Kind(pair_name(name) if len(names) > 1 else "", "attention", kept, *shown, left, right))
    return kinds


def encoder_decoder_kinds(
    encoder: Any, decoder: Any, cross: Any, encoder_tokens: Sequence[str] | None, decoder_tokens: Sequence[str] | None
) -> list[Kind]:
    """The encoder's, the decoder's and the cross attention, those given; cross attention's queries are the decoder's
    tokens, its keys the encoder's."""
    sides = {"encoder": encoder_tokens, "decoder": decoder_tokens}
    given = [
        (name, value)
        for name, value in (("Encoder", encoder), ("Decoder", decoder), ("Cross", cross))
        if value is not None
    ]
    if not given:
        raise ValueError(f"attention: none given; {WHAT_TO_PASS}")
    kinds = []
    for name, value in given:
        source = f"{name.lower()}_attention"
        maps = attention_of(value, source, square=name != "Cross")
        query_side, key_side = ("decoder", "encoder") if name == "Cross" else (name.lower(), name.lower())
        left = labels_of(sides[query_side], maps.shape[-2], f"{query_side}_tokens", f"give them for {source}.")
        right = labels_of(sides[key_side], maps.shape[-1], f"{key_side}_tokens", f"give them for {source}.")
        kinds.append(Kind(name, source, maps, left, right, list(range(len(left))), list(range(len(right)))))
    return kinds


def kinds_of(
    attention: RunResult | Any,
    tokens: Sequence[str] | None,
    sentence_b_start: int | None = None,
    prettify_tokens: bool = True,
    pair_filter: str = "All",
    encoder_attention: Any = None,
    decoder_attention: Any = None,
    cross_attention: Any = None,
    encoder_tokens: Sequence[str] | None = None,
    decoder_tokens: Sequence[str] | None = None,
) -> list[Kind]:
    """What head_view and model_view draw, from bertviz's arguments: `attention` (with `tokens`, `sentence_b_start`)
    or the encoder-decoder ones, not both."""
    encoder_decoder = (encoder_attention, decoder_attention, cross_attention, encoder_tokens, decoder_tokens)
    if attention is None:
        if sentence_b_start is not None or pair_filter != "All":
            raise ValueError("sentence_b_start and pair_filter are for `attention` (one model's sentence pair).")
        kinds = encoder_decoder_kinds(*encoder_decoder)
    elif any(value is not None for value in encoder_decoder):
        raise ValueError(
            "give `attention` (a model's self-attention) or the encoder-decoder arguments (encoder_attention=, "
            "decoder_attention=, cross_attention=, encoder_tokens=, decoder_tokens=), not both."
        )
    else:
        maps = attention_of(attention)
        labels = tokens_of(attention, tokens, maps.shape[-1])
        kinds = pair_kinds(maps, labels, segments_of(attention, sentence_b_start, len(labels)), pair_filter)
    if not prettify_tokens:
        return kinds
    return [replace(k, left=prettified(k.left), right=prettified(k.right)) for k in kinds]


def describe(view: str, kinds: list[Kind], n_layers: int, n_heads: int) -> str:
    """'Head view: 6 layers, 12 heads, 9 tokens', with an encoder-decoder's kinds of attention and the queries x keys
    of the first kind when they differ."""
    names = [k.name for k in kinds if k.source != "attention"]
    first = kinds[0]
    tokens = f"{len(first.left)}" if len(first.left) == len(first.right) else f"{len(first.left)} x {len(first.right)}"
    named = f" ({', '.join(names)})" if names else ""
    return f"{view}{named}: {n_layers} layers, {n_heads} heads, {tokens} tokens"


def chosen(values: Sequence[int] | None, size: int, name: str) -> list[int]:
    """0-based layers or heads asked for (all when None), each checked against its range."""
    if values is None:
        return list(range(size))
    return [check_index(v, size, name) for v in values]


def subset(maps: np.ndarray, layers: list[int], heads: list[int]) -> np.ndarray:
    """maps [layers, heads, ...] of the layers and heads given; the array itself when they are all of them."""
    if layers != list(range(maps.shape[0])):
        maps = maps[layers]
    if heads != list(range(maps.shape[1])):
        maps = maps[:, heads]
    return maps


def check_index(value: int, size: int, name: str) -> int:
    """A 0-based index checked against its range."""
    if not 0 <= value < size:
        raise ValueError(f"{name} {value} is out of range: 0 to {size - 1} (0-based).")
    return int(value)
