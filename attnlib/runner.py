"""Tokenize inputs, run the encoder, and return attention maps with their tokens, segments and words."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .model import LoadedModel
from .norm_batch import NormMaps, NormWeights, padded_norm_maps

TextOrWords = str | Sequence[str]
QUERY_NAMES = ("query", "q_lin", "q_proj", "query_proj")
KEY_NAMES = ("key", "k_lin", "k_proj", "key_proj")
VALUE_NAMES = ("value", "v_lin", "v_proj", "value_proj")
OUT_DENSE_SUFFIXES = ("attention.output.dense", "attention.out_lin")  # BERT/RoBERTa, DistilBERT
ATTENTION_NORM_SUFFIXES = ("attention.output.LayerNorm", "sa_layer_norm")


class InputError(ValueError):
    """The text given to the model cannot be run (empty, say); the message is meant for users."""


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
    queries: np.ndarray | None = None  # [layers, heads, n, head_dim]
    keys: np.ndarray | None = None
    layer_inputs: np.ndarray | None = None  # [layers, n, hidden]: x, each layer's input (hidden_states[l])
    values: np.ndarray | None = None  # [layers, heads, n, head_dim]: v_j = x_j W_V^h + b_V^h
    value_norm: np.ndarray | None = None  # [layers, heads, n]: ||v_j W_O^h||, §11's value norms
    block_scale: np.ndarray | None = None  # [layers, n]: s_i = sqrt(var(u_i) + eps), u_i the first LN's input
    norm_weights: NormWeights | None = None  # the model's output projections and first LayerNorms
    maps: NormMaps | None = None  # every §11-13 map, when the run was asked for them (norm_maps=True)


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
    return Encoded(
        input_ids=ids,
        token_type_ids=list(enc["token_type_ids"]) if "token_type_ids" in enc else None,
        tokens=tok.convert_ids_to_tokens(ids),
        segments=segments,
        word_ids=word_ids,
        words=words,
        cls_mask=np.array([i == tok.cls_token_id for i in ids]) & special,
        sep_mask=np.array([i == tok.sep_token_id for i in ids]) & special,
        special_mask=special,
        truncated=truncated,
        n_tokens_full=n_full,
    )


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


def _qk_linears(encoder: torch.nn.Module) -> tuple[list[torch.nn.Module], list[torch.nn.Module]]:
    """The query and key projections of every attention layer, in module order."""
    queries, keys = [], []
    for name, module in encoder.named_modules():
        last = name.rsplit(".", 1)[-1]
        if isinstance(module, torch.nn.Linear) and "attention" in name:
            if last in QUERY_NAMES:
                queries.append(module)
            elif last in KEY_NAMES:
                keys.append(module)
    return queries, keys


def _suffix_modules(encoder: torch.nn.Module, suffixes: Sequence[str], kind: type) -> list[torch.nn.Module]:
    """Modules of this kind whose qualified name ends with one of the suffixes, in module order."""
    return [
        m
        for name, m in encoder.named_modules()
        if isinstance(m, kind) and any(name == s or name.endswith("." + s) for s in suffixes)
    ]


NormModules = tuple[list[torch.nn.Module], list[torch.nn.Module], list[torch.nn.Module]]
_NORM_MODULES: weakref.WeakKeyDictionary[torch.nn.Module, NormModules] = weakref.WeakKeyDictionary()


def norm_modules(encoder: torch.nn.Module) -> NormModules:
    """Per layer: the value projection, the attention output projection and the LayerNorm after attention (found
    once per model)."""
    if encoder not in _NORM_MODULES:
        _NORM_MODULES[encoder] = _find_norm_modules(encoder)
    return _NORM_MODULES[encoder]


def _find_norm_modules(encoder: torch.nn.Module) -> NormModules:
    """norm_modules, found by name."""
    values = [
        m
        for name, m in encoder.named_modules()
        if isinstance(m, torch.nn.Linear) and "attention" in name and name.rsplit(".", 1)[-1] in VALUE_NAMES
    ]
    dense = _suffix_modules(encoder, OUT_DENSE_SUFFIXES, torch.nn.Linear)
    norms = _suffix_modules(encoder, ATTENTION_NORM_SUFFIXES, torch.nn.LayerNorm)
    if not values or not len(values) == len(dense) == len(norms):
        raise ValueError(
            "Cannot find each layer's value projection, attention output projection and LayerNorm "
            "(BERT, RoBERTa and DistilBERT layouts are supported)."
        )
    return values, dense, norms


_NORM_WEIGHTS: weakref.WeakKeyDictionary[torch.nn.Module, NormWeights] = weakref.WeakKeyDictionary()


def norm_weights(encoder: torch.nn.Module, n_heads: int) -> NormWeights:
    """The output projections (split per head) and LayerNorm parameters of every layer, as float32 numpy arrays
    (read once per model: the weights do not change)."""
    if encoder not in _NORM_WEIGHTS:
        _NORM_WEIGHTS[encoder] = _read_norm_weights(encoder, n_heads)
    return _NORM_WEIGHTS[encoder]


def _read_norm_weights(encoder: torch.nn.Module, n_heads: int) -> NormWeights:
    """norm_weights, read from the modules."""
    _, dense, norms = norm_modules(encoder)

    def numpy(t: torch.Tensor | None, like: torch.Tensor, fill: float) -> np.ndarray:
        t = torch.full_like(like, fill) if t is None else t
        return t.detach().float().cpu().numpy()

    hidden = dense[0].out_features
    out_weight = np.stack([numpy(m.weight, m.weight, 0).T.reshape(n_heads, -1, hidden) for m in dense])
    zeros = torch.zeros(hidden)
    return NormWeights(
        out_weight=np.ascontiguousarray(out_weight),
        out_bias=np.stack([numpy(m.bias, zeros, 0.0) for m in dense]),
        gamma=np.stack([numpy(m.weight, zeros, 1.0) for m in norms]),
        beta=np.stack([numpy(m.bias, zeros, 0.0) for m in norms]),
        eps=np.array([m.eps for m in norms], np.float32),
    )


def this_thread_only(hook: Callable) -> Callable:
    """A module hook that fires only for forward passes of the thread that made it.

    The app shares one model between its visitors' threads: without this, a hook registered for one visitor's
    run would also record the forward passes that other visitors make at the same time."""
    owner = threading.get_ident()

    def hook_in_owner_thread(*args, **kwargs):
        return hook(*args, **kwargs) if threading.get_ident() == owner else None

    return hook_in_owner_thread


@dataclass
class _Captured:
    """What one forward pass recorded beyond the attentions (empty lists where not asked)."""

    queries: list[torch.Tensor] = field(default_factory=list)  # per layer [batch, n, hidden]
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    block_inputs: list[torch.Tensor] = field(
        default_factory=list
    )  # per layer [batch, n, hidden]: u, the first LN's input
    hidden_states: tuple = ()  # the encoder's hidden_states: [batch, n, hidden] per layer input, and the last output


def _forward(lm: LoadedModel, batch: dict, capture_qk: bool, capture_norms: bool = False):
    """One forward pass returning attentions and what was asked: query/key projections, values and layer inputs."""
    captured = _Captured()
    q_out, k_out, v_out, hooks = captured.queries, captured.keys, captured.values, []
    if capture_qk:
        qs, ks = _qk_linears(lm.encoder)
        hooks = [
            m.register_forward_hook(this_thread_only(lambda _m, _i, o: q_out.append(o.detach())))
            for m in dict.fromkeys(qs)
        ]
        hooks += [
            m.register_forward_hook(this_thread_only(lambda _m, _i, o: k_out.append(o.detach())))
            for m in dict.fromkeys(ks)
        ]
    try:
        if capture_norms:
            value_modules, _, layer_norms = norm_modules(lm.encoder)
            hooks += [
                m.register_forward_hook(this_thread_only(lambda _m, _i, o: v_out.append(o.detach())))
                for m in value_modules
            ]
            hooks += [
                m.register_forward_pre_hook(this_thread_only(lambda _m, i: captured.block_inputs.append(i[0].detach())))
                for m in layer_norms
            ]
        with torch.inference_mode():
            out = lm.encoder(**batch, output_attentions=True, output_hidden_states=capture_norms)
    finally:
        for h in hooks:
            h.remove()
    if not out.attentions:
        raise RuntimeError("The model returned no attention weights; it must run with eager attention.")
    if capture_norms:
        captured.hidden_states = out.hidden_states
    return out.attentions, captured


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


def _heads_split(x: torch.Tensor, n_heads: int) -> np.ndarray:
    """[n, hidden] projection to [heads, n, head_dim] float32."""
    n, hidden = x.shape
    return x.reshape(n, n_heads, hidden // n_heads).permute(1, 0, 2).float().cpu().numpy()


def run_encoded(
    lm: LoadedModel,
    encoded: Sequence[Encoded],
    capture_qk: bool = False,
    capture_norms: bool = False,
    norm_maps: bool = False,
) -> list[RunResult]:
    """Run a padded batch and cut each input's maps (and captures) back to its own length.

    capture_norms adds each layer's input, value vectors and the model's NormWeights (METHODS §11-12); norm_maps
    (which implies it) also every §11-13 map, computed for the whole batch at once."""
    capture_norms = capture_norms or norm_maps
    attentions, captured = _forward(lm, model_inputs(lm, encoded), capture_qk, capture_norms)
    stacked_maps = torch.stack(attentions, dim=1).float().cpu()  # [batch, layers, heads, n_max, n_max]
    stacked = stacked_maps.numpy()
    h = lm.facts.n_heads
    if capture_norms:
        weights = norm_weights(lm.encoder, h)
        stacked_inputs = torch.stack(captured.hidden_states[:-1], dim=1).float().cpu()  # [batch, layers, n_max, hidden]
        inputs = stacked_inputs.numpy()
        values = torch.stack(captured.values, dim=1).float().cpu()  # [batch, layers, n_max, hidden]
        b_, l_, n_, hidden = values.shape
        by_head = values.reshape(b_, l_, n_, h, hidden // h).permute(0, 1, 3, 2, 4)  # [batch, layers, heads, n_max, d]
        values_np = by_head.numpy()
        # s_i = sqrt(var(u_i) + eps) of the LayerNorm's input u, centred by hand: torch's var is 5x slower here
        variances = [(u - u.mean(-1, keepdim=True)).square_().mean(-1) for u in captured.block_inputs]
        scales = torch.stack(variances, dim=1).float().cpu().add_(torch.from_numpy(weights.eps)[:, None]).sqrt_()
        if norm_maps:
            padded = padded_norm_maps(stacked_maps, values, stacked_inputs, scales, weights)
            value_norms = padded.value_norm.numpy()  # the maps' head Gram diagonals: not computed a second time
        else:
            out_gram = torch.from_numpy(weights.out_gram)
            value_norms = torch.matmul(by_head, out_gram).mul_(by_head).sum(-1).clamp_(min=0).sqrt_().numpy()
    results = []
    for b, e in enumerate(encoded):
        r = RunResult(**vars(e), attentions=np.ascontiguousarray(stacked[b, :, :, : e.n, : e.n]))
        if capture_qk:
            r.queries = np.stack([_heads_split(q[b, : e.n], h) for q in captured.queries])
            r.keys = np.stack([_heads_split(k[b, : e.n], h) for k in captured.keys])
        if capture_norms:
            r.layer_inputs = np.ascontiguousarray(inputs[b, :, : e.n])
            r.values = np.ascontiguousarray(values_np[b, :, :, : e.n])
            r.value_norm = np.ascontiguousarray(value_norms[b, :, :, : e.n])
            r.block_scale = np.ascontiguousarray(scales[b, :, : e.n].numpy())
            r.norm_weights = weights
        if norm_maps:
            r.maps = padded.input_maps(b, list(e.tokens))
        results.append(r)
    return results


def _check_tokens(encoded: Encoded, has_b: bool) -> None:
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
    """Run one sentence or pair; attentions are float32 [layers, heads, n, n], queries and keys [layers, heads, n, d]."""
    encoded = encode(lm, text_a, text_b)
    if isinstance(text_a, str):  # typed text; corpus word lists keep their words without pieces (deps handles them)
        _check_tokens(encoded, text_b is not None)
    return run_encoded(lm, [encoded], capture_qk=capture_qk, capture_norms=capture_norms)[0]


def run_batches(
    lm: LoadedModel,
    inputs: Iterable[tuple[TextOrWords, TextOrWords | None]],
    batch_size: int = 32,
    window: int = 512,
    capture_norms: bool = False,
    norm_maps: bool = False,
) -> Iterator[RunResult]:
    """Run many inputs in padded batches of similar length, yielding results in input order (run_encoded's
    capture_norms and norm_maps for each)."""
    buffer: list[Encoded] = []
    for text_a, text_b in inputs:
        buffer.append(encode(lm, text_a, text_b))
        if len(buffer) == window:
            yield from _run_window(lm, buffer, batch_size, capture_norms, norm_maps)
            buffer = []
    if buffer:
        yield from _run_window(lm, buffer, batch_size, capture_norms, norm_maps)


def _run_window(
    lm: LoadedModel, encoded: list[Encoded], batch_size: int, capture_norms: bool = False, norm_maps: bool = False
) -> Iterator[RunResult]:
    """Sort a window of inputs by length so batches carry little padding, then restore the order."""
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].n)
    out: list[RunResult | None] = [None] * len(encoded)
    for idx in _batches(order, [e.n for e in encoded], batch_size):
        for i, r in zip(
            idx, run_encoded(lm, [encoded[i] for i in idx], capture_norms=capture_norms, norm_maps=norm_maps)
        ):
            out[i] = r
    yield from out  # type: ignore[misc]


BATCH_CELLS = 32 * 48 * 48  # a batch's padded attention cells per head: batch_size inputs up to 48 tokens, fewer above


def _batches(order: list[int], lengths: list[int], batch_size: int) -> Iterator[list[int]]:
    """Consecutive runs of order (sorted by length) of at most batch_size inputs and BATCH_CELLS padded cells, so
    a batch's transient memory (every layer's [batch, heads, n, n] maps, twice) does not depend on where the longest
    inputs fall: peak memory stays flat in corpus size."""
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) == batch_size or (len(batch) + 1) * lengths[i] ** 2 > BATCH_CELLS):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
