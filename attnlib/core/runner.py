"""Tokenize inputs, run the encoder, and return attention maps with their tokens, segments and words."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from attnlib.core.errors import InputError as InputError  # part of this module's API
from attnlib.core.families import (
    Layout,
    Part,
    UnsupportedModelError,
    layer_norm_parameters,
    layout,
    linear_weight,
    rms_norm_gamma,
)
from attnlib.core.hooks import ATTENTION, NORMS, Capture, capture_set, hooks
from attnlib.core.hooks import this_thread_only as this_thread_only  # part of this module's API
from attnlib.core.memory import check_memory, estimate_peak_bytes, memory_limit, run_size
from attnlib.core.model import LoadedModel

TextOrWords = str | Sequence[str]


@dataclass
class Encoded:
    """One tokenized input (a sentence or a pair) with its alignment to segments and words."""

    input_ids: list[int]
    token_type_ids: list[int] | None
    tokens: list[str]
    segments: np.ndarray  # [n] 0 for sentence A, 1 for sentence B (special tokens join the segment they close)
    word_ids: list[int | None]  # [n] index into words, None for special tokens
    words: list[str]
    cls_mask: np.ndarray  # [n] bool
    sep_mask: np.ndarray  # [n] bool
    special_mask: np.ndarray  # [n] bool, every special token
    truncated: bool = False
    n_tokens_full: int = 0  # length before truncation

    @property
    def n(self) -> int:
        return len(self.input_ids)


@dataclass
class RunResult(Encoded):
    """An encoded input with its float32 attention maps [layers, heads, n, n] and, optionally, queries and keys."""

    attentions: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0, 0), np.float32))
    queries: np.ndarray | None = None  # [layers, heads, n, head_dim]: as q.k sees them (bias, rotary applied)
    keys: np.ndarray | None = None  # [layers, heads, n, head_dim]
    qk_scale: np.ndarray | None = None  # [layers]: logits = qk_scale * q.k + score_bias (+ mask), softmax over keys
    score_bias: np.ndarray | None = None  # [layers, heads, n, n]: DeBERTa's c2p + p2c, MPNet's position bias; or None
    score_cap: np.ndarray | None = None  # [layers]: logits c tanh(s / c) of s = the above (Gemma 2; inf: uncapped)
    layer_inputs: np.ndarray | None = None  # [layers, n, hidden]: x, each layer's input (hidden_states[l])
    values: np.ndarray | None = None  # [layers, heads, n, head_dim]: v_j = x_j W_V^h + b_V^h
    value_norm: np.ndarray | None = None  # [layers, heads, n]: ||v_j W_O^h||, §11's value norms
    block_scale: np.ndarray | None = None  # [layers, n]: s_i = sqrt(var(u_i) + eps), u_i the first LN's input
    norm_weights: NormWeights | None = None  # the model's output projections and first LayerNorms
    maps: Any = None  # what run_encoded's batch_maps made of this input (stats.norms.batch_norm_maps: its NormMaps)
    deferred: bool = False  # not run here: run_batches' defer chose it for a block-wise run (no attentions)


def _check_text(text: TextOrWords | None, label: str) -> None:
    """Reject empty text with a clear message."""
    if text is None:
        return
    if isinstance(text, str):
        if not text.strip():
            raise InputError(f"{label} is empty: type a sentence.")
    elif not any(w.strip() for w in text):
        raise InputError(f"{label} has no words.")


def encode(lm: LoadedModel, text_a: TextOrWords, text_b: TextOrWords | None = None) -> Encoded:
    """Tokenize a sentence or pair (strings, or lists of words), truncating to the model's maximum length."""
    _check_text(text_a, "Sentence A")
    _check_text(text_b, "Sentence B")
    split = not isinstance(text_a, str)
    tok = (lm.word_tokenizer or lm.tokenizer) if split else lm.tokenizer
    texts = [text_a] if text_b is None else [text_a, text_b]
    args = tuple(list(t) for t in texts) if split else tuple(texts)
    kw = dict(is_split_into_words=split, return_special_tokens_mask=True)
    n_full = len(tok(*args, truncation=False, **kw)["input_ids"])
    truncated = n_full > lm.facts.max_length
    enc = tok(*args, truncation=truncated, max_length=lm.facts.max_length, return_offsets_mapping=not split, **kw)
    with_types = "token_type_ids" in enc and _takes(lm.encoder, "token_type_ids")
    ids = list(enc["input_ids"])
    special = np.array(enc["special_tokens_mask"], dtype=bool)
    seq_ids = enc.sequence_ids()
    segments = np.zeros(len(ids), dtype=np.int8)
    current = 0
    for i, s in enumerate(seq_ids):
        if s is not None:
            current = s
        segments[i] = current
    words, word_ids = _align_words(enc, seq_ids, text_a, text_b, split)
    separator = _separator_id(tok)
    return Encoded(
        input_ids=ids,
        token_type_ids=list(enc["token_type_ids"]) if with_types else None,
        tokens=tok.convert_ids_to_tokens(ids),
        segments=segments,
        word_ids=word_ids,
        words=words,
        cls_mask=_first_mask(len(ids)) if lm.facts.causal else np.array([i == tok.cls_token_id for i in ids]) & special,
        sep_mask=np.array([i == separator for i in ids]) & special,
        special_mask=special,
        truncated=truncated,
        n_tokens_full=n_full,
    )


def with_bos(lm: LoadedModel, encoded: Encoded) -> Encoded:
    """The input with the tokenizer's BOS token in front where the tokenizer does not start it with one
    (TransformerLens's prepend_bos; METHODS §20), cut to the model's maximum length; unchanged where it starts with one
    or the tokenizer has none."""
    tok = lm.word_tokenizer or lm.tokenizer
    bos = tok.bos_token_id
    if bos is None or encoded.input_ids[:1] == [bos]:
        return encoded
    keep = min(encoded.n, lm.facts.max_length - 1)
    ids = [bos] + encoded.input_ids[:keep]
    special = np.concatenate([[True], encoded.special_mask[:keep]])

    def ahead(values: np.ndarray, first) -> np.ndarray:
        return np.concatenate([np.array([first], dtype=values.dtype), values[:keep]])

    return replace(
        encoded,
        input_ids=ids,
        token_type_ids=None if encoded.token_type_ids is None else [0] + encoded.token_type_ids[:keep],
        tokens=tok.convert_ids_to_tokens(ids),
        segments=ahead(encoded.segments, 0),
        word_ids=[None, *encoded.word_ids[:keep]],
        cls_mask=_first_mask(len(ids)) if lm.facts.causal else ahead(encoded.cls_mask, bos == tok.cls_token_id),
        sep_mask=ahead(encoded.sep_mask, False),
        special_mask=special,
        truncated=encoded.truncated or keep < encoded.n,
    )


def _first_mask(n: int) -> np.ndarray:
    """A decoder's FIRST class (METHODS §18): position 0, its BOS where the tokenizer adds one."""
    mask = np.zeros(n, bool)
    mask[:1] = True
    return mask


def _separator_id(tok) -> int | None:
    """Id of the SEP class: the tokenizer's sep token, or a decoder's eos token inside the input (METHODS §18)."""
    return tok.sep_token_id if tok.sep_token_id is not None else tok.eos_token_id


_TAKES: dict[tuple[type, str], bool] = {}


def _takes(encoder: torch.nn.Module, name: str) -> bool:
    """Whether the encoder's forward has a parameter of this name (DistilBERT, MPNet, ModernBERT: no token types)."""
    key = (type(encoder), name)
    if key not in _TAKES:
        _TAKES[key] = name in inspect.signature(encoder.forward).parameters
    return _TAKES[key]


def _align_words(enc, seq_ids, text_a, text_b, split: bool) -> tuple[list[str], list[int | None]]:
    """Number the words of A then B globally and name each token's word (None for special tokens)."""
    raw_word_ids = enc.word_ids()
    texts = [text_a, text_b]
    words: list[str] = []
    spans: dict[tuple[int, int], list[int]] = {}
    for pos, (s, w) in enumerate(zip(seq_ids, raw_word_ids)):
        if s is None or w is None:
            continue
        spans.setdefault((s, w), []).append(pos)
    ordered = sorted(spans)
    index: dict[tuple[int, int], int] = {}
    for key in ordered:
        s, w = key
        index[key] = len(words)
        if split:
            words.append(texts[s][w])
        else:
            positions = spans[key]
            start = enc["offset_mapping"][positions[0]][0]
            end = enc["offset_mapping"][positions[-1]][1]
            words.append(texts[s][start:end])
    word_ids = [None if s is None or w is None else index[(s, w)] for s, w in zip(seq_ids, raw_word_ids)]
    return words, word_ids


@dataclass
class NormWeights:
    """Per layer, the weights that turn head values into the attention block's output (METHODS §11-12), float32."""

    out_weight: np.ndarray  # [layers, heads, head_dim, hidden]: W_O^h, the rows of W_O that multiply head h
    out_bias: np.ndarray  # [layers, hidden]: b_O
    gamma: np.ndarray  # [layers, hidden]: the first LayerNorm's weight
    beta: np.ndarray  # [layers, hidden]
    eps: np.ndarray  # [layers]
    post_layer_norm: bool = True  # False (pre-LN, ModernBERT): no LayerNorm follows; gamma 1, beta 0, s_i = 1
    # True (Gemma 2 and 3, pre-LN): an RMSNorm scales the attention output before the residual; gamma and eps are its
    # own, and s_i is its divisor r_i = sqrt(mean(o_i^2) + eps) of the attention output o_i (METHODS §12)
    attention_norm: bool = False

    @cached_property
    def out_gram(self) -> np.ndarray:
        """W_O^h (W_O^h)^T [layers, heads, head_dim, head_dim]: ||v W_O^h||^2 = v W_O^h (W_O^h)^T v^T."""
        return np.matmul(self.out_weight, self.out_weight.transpose(0, 1, 3, 2))


@dataclass
class PaddedCaptures:
    """What a padded batch captured for METHODS §11-13, as float32 tensors before run_encoded cuts them per input."""

    attentions: torch.Tensor  # [batch, layers, heads, n_max, n_max]
    values: torch.Tensor  # [batch, layers, n_max, hidden]: v = x W_V + b_V, heads side by side
    layer_inputs: torch.Tensor  # [batch, layers, n_max, hidden]: x
    block_scale: torch.Tensor  # [batch, layers, n_max]: the decomposition's divisors s_i
    weights: NormWeights


BatchMaps = Callable[[PaddedCaptures, Sequence[Encoded]], Sequence[Any]]
"""A computation over a whole padded batch (stats.norms.batch_norm_maps: every §11-13 map), one object per input."""


_NORM_WEIGHTS: weakref.WeakKeyDictionary[torch.nn.Module, dict[Part, NormWeights]] = weakref.WeakKeyDictionary()


def norm_weights(encoder: torch.nn.Module, part: Part = "encoder") -> NormWeights:
    """Every layer application's output projection (split per head) and the LayerNorm of its attention block, as
    float32 numpy arrays (read once per model and part: the weights do not change); `encoder` is an encoder-decoder's
    decoder stack for its decoder or cross `part`. UnsupportedModelError for a family whose layout attnlib does not
    know."""
    by_part = _NORM_WEIGHTS.setdefault(encoder, {})
    if part not in by_part:
        by_part[part] = _read_norm_weights(layout(encoder, "norms", part))
    return by_part[part]


def _read_norm_weights(lay: Layout) -> NormWeights:
    """norm_weights, read from the modules of the layout (pre-LN families: gamma 1, beta 0, no LayerNorm after; Gemma 2
    and 3: gamma and eps of the RMSNorm of the attention output)."""
    dense = [linear_weight(s.output) for s in lay.sites]  # [hidden, heads * head_dim] each
    hidden = dense[0].shape[0]

    def numpy(t: torch.Tensor | None, fill: float) -> np.ndarray:
        return (torch.full((hidden,), fill) if t is None else t).detach().float().cpu().numpy()

    out_weight = np.stack([numpy(w, 0).T.reshape(lay.n_heads, -1, hidden) for w in dense])
    post = lay.family.post_layer_norm
    if lay.family.attention_norm is not None:
        norms = []
        for s in lay.sites:
            _, _, eps = layer_norm_parameters(s.attention_norm, hidden)
            norms.append((rms_norm_gamma(s.attention_norm, hidden, eps), None, eps))
    else:
        norms = [layer_norm_parameters(s.norm, hidden) if post else (None, None, 0.0) for s in lay.sites]
    return NormWeights(
        out_weight=np.ascontiguousarray(out_weight),
        out_bias=np.stack([numpy(s.output.bias, 0.0) for s in lay.sites]),
        gamma=np.stack([numpy(g, 1.0) for g, _, _ in norms]),
        beta=np.stack([numpy(b, 0.0) for _, b, _ in norms]),
        eps=np.array([e for _, _, e in norms], np.float32),
        post_layer_norm=post,
        attention_norm=lay.family.attention_norm is not None,
    )


def block_scales(norm_inputs: list[torch.Tensor], weights: NormWeights, shape: tuple[int, int, int]) -> torch.Tensor:
    """The decomposition's divisors [batch, layers, n] (METHODS §12) from each layer's captured norm input
    [batch, n, hidden]: s_i of the LayerNorm after attention, r_i of Gemma's RMSNorm of the attention output, else 1."""
    if weights.post_layer_norm:
        # s_i = sqrt(var(u_i) + eps) of the LayerNorm's input u, centred by hand: torch's var is 5x slower here
        variances = [(u - u.mean(-1, keepdim=True)).square_().mean(-1) for u in norm_inputs]
        return torch.stack(variances, dim=1).float().cpu().add_(torch.from_numpy(weights.eps)[:, None]).sqrt_()
    if weights.attention_norm:  # r_i = sqrt(mean(o_i^2) + eps) of the RMSNorm of the attention output o
        squares = [o.float().square().mean(-1) for o in norm_inputs]
        return torch.stack(squares, dim=1).cpu().add_(torch.from_numpy(weights.eps)[:, None]).sqrt_()
    return torch.ones(shape)  # no LayerNorm follows a pre-LN block: the decomposition's divisor is 1


class NoAttentionWeightsError(UnsupportedModelError):
    """A forward pass that was asked for attention weights (with eager attention) returned none."""


def returned_weights(attentions: Sequence[torch.Tensor] | None) -> Sequence[torch.Tensor]:
    """The attention weights a forward pass returned, one per layer; NoAttentionWeightsError when it returned none."""
    if not attentions or any(a is None for a in attentions):
        raise NoAttentionWeightsError(
            "The model returned no attention weights, although it runs with eager attention and was asked for "
            "them; attnlib cannot read its attention."
        )
    return attentions


def _check_attentions(attentions, n_layers: int, batch: dict) -> None:
    """The model's attentions must be one [batch, heads, n, n] map per layer."""
    b, n = batch["input_ids"].shape
    returned_weights(attentions)
    shapes = {tuple(a.shape[:1]) + tuple(a.shape[2:]) for a in attentions}
    if len(attentions) != n_layers or shapes != {(b, n, n)}:
        raise UnsupportedModelError(
            f"This model returns {len(attentions)} attention maps of shape {tuple(attentions[0].shape)}, not one "
            f"[batch, heads, {n}, {n}] map per layer ({n_layers}); its attention cannot be shown as token-to-token maps."
        )


def model_inputs(lm: LoadedModel, encoded: Sequence[Encoded]) -> dict:
    """Pad a list of encodings into a batch of tensors the encoder accepts."""
    n_max = max(e.n for e in encoded)
    pad = lm.tokenizer.pad_token_id or 0
    ids = torch.full((len(encoded), n_max), pad, dtype=torch.long)
    mask = torch.zeros((len(encoded), n_max), dtype=torch.long)
    types = torch.zeros((len(encoded), n_max), dtype=torch.long)
    for b, e in enumerate(encoded):
        ids[b, : e.n] = torch.tensor(e.input_ids)
        mask[b, : e.n] = 1
        if e.token_type_ids is not None:
            types[b, : e.n] = torch.tensor(e.token_type_ids)
    batch = {"input_ids": ids, "attention_mask": mask}
    if encoded[0].token_type_ids is not None:
        batch["token_type_ids"] = types
    return {k: v.to(lm.device) for k, v in batch.items()}


def _layers_of_input(per_layer: list[torch.Tensor], b: int, n: int) -> np.ndarray:
    """Input b's [layers, heads, n, ...] from per-layer [batch, heads, n_max, ...] tensors: one copy, no batch stack."""
    return torch.stack([x[b, :, :n] for x in per_layer]).numpy()


def run_encoded(
    lm: LoadedModel,
    encoded: Sequence[Encoded],
    capture: Iterable[Capture] = ATTENTION,
    batch_maps: BatchMaps | None = None,
) -> list[RunResult]:
    """Run a padded batch and cut each input's maps (and captures) back to its own length.

    `capture` (attnlib.core.hooks; attention is always captured): qk adds queries, keys, qk_scale and score_bias
    (left None for a family attnlib does not know: see families.unsupported_reason); values the value vectors and
    their norms, layer_inputs each layer's input and norm_inputs the block scales, each with the model's NormWeights
    (METHODS §11-12). `batch_maps` (which implies those three) runs on the whole padded batch's captures, and each
    input's RunResult.maps is its object (stats.norms.batch_norm_maps: every §11-13 map)."""
    check_memory(run_size(lm, max(e.n for e in encoded), len(encoded)), memory_limit(device=lm.device))
    batch = model_inputs(lm, encoded)
    wanted = capture_set(capture) | ATTENTION | (NORMS if batch_maps is not None else frozenset())
    with hooks(lm, wanted) as cache, torch.inference_mode():
        lm.encoder(**batch)
    _check_attentions(cache.attn, lm.facts.n_layers, batch)
    captured = cache.captured
    stacked_maps = torch.stack(cache.attn, dim=1).float().cpu()  # [batch, layers, heads, n_max, n_max]
    stacked = stacked_maps.numpy()
    if captured & {"qk", "values"}:
        heads = cache.heads()
    if "qk" in captured:
        queries, keys = [q.float().cpu() for q in heads.queries], [k.float().cpu() for k in heads.keys]
        has_bias = any(bias is not None for bias in heads.biases)
        if has_bias:
            zeros = torch.zeros_like(stacked_maps[:, 0])
            bias = torch.stack([zeros if b is None else b.float() for b in heads.biases], 1)
    if captured & NORMS:
        weights = norm_weights(lm.encoder)
    b_, l_, _, n_, _ = stacked_maps.shape
    if "layer_inputs" in captured:
        stacked_inputs = torch.stack(cache.layer_inputs, dim=1).float().cpu()  # [batch, layers, n_max, hidden]
        inputs = stacked_inputs.numpy()
    if "values" in captured:
        by_head = torch.stack(heads.values, dim=1).float().cpu()  # [batch, layers, heads, n_max, d]
        h_, d_ = by_head.shape[2], by_head.shape[4]
        values = by_head.permute(0, 1, 3, 2, 4).reshape(b_, l_, n_, h_ * d_)  # [batch, layers, n_max, hidden]
        values_np = by_head.numpy()
    if "norm_inputs" in captured:
        scales_t = block_scales(cache.norm_inputs, weights, (b_, l_, n_))
    if batch_maps is not None:
        made = batch_maps(PaddedCaptures(stacked_maps, values, stacked_inputs, scales_t, weights), encoded)
    if "values" in captured:
        out_gram = torch.from_numpy(weights.out_gram)
        value_norms = torch.matmul(by_head, out_gram).mul_(by_head).sum(-1).clamp_(min=0).sqrt_().numpy()
    results = []
    for b, e in enumerate(encoded):
        r = RunResult(**vars(e), attentions=np.ascontiguousarray(stacked[b, :, :, : e.n, : e.n]))
        if "qk" in captured:
            r.queries, r.keys = _layers_of_input(queries, b, e.n), _layers_of_input(keys, b, e.n)
            r.qk_scale = np.array(heads.scales, np.float32)
            if any(heads.caps):
                r.score_cap = np.array([c or np.inf for c in heads.caps], np.float64)
            r.score_bias = np.ascontiguousarray(bias[b, :, :, : e.n, : e.n].numpy()) if has_bias else None
        if "layer_inputs" in captured:
            r.layer_inputs = np.ascontiguousarray(inputs[b, :, : e.n])
        if "values" in captured:
            r.values = np.ascontiguousarray(values_np[b, :, :, : e.n])
            r.value_norm = np.ascontiguousarray(value_norms[b, :, :, : e.n])
        if "norm_inputs" in captured:
            r.block_scale = np.ascontiguousarray(scales_t[b, :, : e.n].numpy())
        if captured & NORMS:
            r.norm_weights = weights
        if batch_maps is not None:
            r.maps = made[b]
        results.append(r)
    return results


def check_tokens(encoded: Encoded, has_b: bool) -> None:
    """Refuse a typed input of which the tokenizer kept nothing (only control or invisible characters)."""
    for segment, label in ((0, "Sentence A"), (1, "Sentence B"))[: 1 + has_b]:
        if not any(w is not None and s == segment for w, s in zip(encoded.word_ids, encoded.segments)):
            raise InputError(
                f"{label} has nothing the model can read: the tokenizer removed every character "
                "(control or invisible characters only). Type a sentence."
            )


def run(
    lm: LoadedModel,
    text_a: TextOrWords,
    text_b: TextOrWords | None = None,
    capture_qk: bool = True,
    capture_norms: bool = False,
) -> RunResult:
    """Run one sentence or pair; attentions are float32 [layers, heads, n, n], queries and keys [layers, heads, n, d]
    (capture_qk: run_encoded's qk capture; capture_norms: its values, layer_inputs and norm_inputs)."""
    encoded = encode(lm, text_a, text_b)
    if isinstance(text_a, str):  # typed text; corpus word lists keep their words without pieces (deps handles them)
        check_tokens(encoded, text_b is not None)
    qk: frozenset[Capture] = frozenset({"qk"}) if capture_qk else frozenset()
    return run_encoded(lm, [encoded], qk | (NORMS if capture_norms else frozenset()))[0]


def run_batches(
    lm: LoadedModel,
    inputs: Iterable[tuple[TextOrWords, TextOrWords | None]],
    batch_size: int = 32,
    window: int = 512,
    capture: Iterable[Capture] = ATTENTION,
    defer: Callable[[Encoded], bool] | None = None,
    batch_maps: BatchMaps | None = None,
) -> Iterator[RunResult]:
    """Run many inputs in padded batches of similar length, yielding results in input order (run_encoded's
    captures and batch_maps for each); an input that defer chooses is yielded unrun (deferred)."""
    buffer: list[Encoded] = []
    options = (batch_size, capture_set(capture), defer, batch_maps)
    for text_a, text_b in inputs:
        buffer.append(encode(lm, text_a, text_b))
        if len(buffer) == window:
            yield from _run_window(lm, buffer, *options)
            buffer = []
    if buffer:
        yield from _run_window(lm, buffer, *options)


def _run_window(
    lm: LoadedModel,
    encoded: list[Encoded],
    batch_size: int,
    capture: frozenset[Capture] = ATTENTION,
    defer: Callable[[Encoded], bool] | None = None,
    batch_maps: BatchMaps | None = None,
) -> Iterator[RunResult]:
    """Sort a window of inputs by length so batches carry little padding, then restore the order."""
    out: list[RunResult | None] = [None] * len(encoded)
    kept = []
    for i, e in enumerate(encoded):
        if defer is not None and defer(e):
            out[i] = RunResult(**vars(e), deferred=True)
        else:
            kept.append(i)
    order = sorted(kept, key=lambda i: encoded[i].n)
    limit = memory_limit(device=lm.device)

    def fits(count: int, n: int) -> bool:
        return limit is None or estimate_peak_bytes(run_size(lm, n, count)) <= limit

    for idx in _batches(order, [e.n for e in encoded], batch_size, fits):
        batch = [encoded[i] for i in idx]
        for i, r in zip(idx, run_encoded(lm, batch, capture, batch_maps)):
            out[i] = r
    yield from out  # type: ignore[misc]


BATCH_CELLS = 32 * 48 * 48  # a batch's padded attention cells per head: batch_size inputs up to 48 tokens, fewer above


def _batches(
    order: list[int], lengths: list[int], batch_size: int, fits: Callable[[int, int], bool] | None = None
) -> Iterator[list[int]]:
    """Consecutive runs of order (sorted by length) of at most batch_size inputs and BATCH_CELLS padded cells, so
    a batch's transient memory (every layer's [batch, heads, n, n] maps, twice) does not depend on where the longest
    inputs fall: peak memory stays flat in corpus size; and, given fits(inputs, n), batches within the memory guard's
    limit (an input that does not fit alone is its own batch, which run_encoded refuses)."""
    batch: list[int] = []
    for i in order:
        full = len(batch) == batch_size or (len(batch) + 1) * lengths[i] ** 2 > BATCH_CELLS
        if batch and (full or (fits is not None and not fits(len(batch) + 1, lengths[i]))):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
