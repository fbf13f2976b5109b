"""Tokenize inputs, run the encoder, and return attention maps with their tokens, segments and words."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .model import LoadedModel

TextOrWords = str | Sequence[str]
QUERY_NAMES = ("query", "q_lin", "q_proj", "query_proj")
KEY_NAMES = ("key", "k_lin", "k_proj", "key_proj")


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


def this_thread_only(hook: Callable) -> Callable:
    """A module hook that fires only for forward passes of the thread that made it.

    The app shares one model between its visitors' threads: without this, a hook registered for one visitor's
    run would also record the forward passes that other visitors make at the same time."""
    owner = threading.get_ident()

    def hook_in_owner_thread(*args, **kwargs):
        return hook(*args, **kwargs) if threading.get_ident() == owner else None

    return hook_in_owner_thread


def _forward(lm: LoadedModel, batch: dict, capture_qk: bool):
    """One forward pass returning attentions (and per-call query/key projections when asked)."""
    q_out, k_out, hooks = [], [], []
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
        with torch.inference_mode():
            out = lm.encoder(**batch, output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    if not out.attentions:
        raise RuntimeError("The model returned no attention weights; it must run with eager attention.")
    return out.attentions, q_out, k_out


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


def run_encoded(lm: LoadedModel, encoded: Sequence[Encoded], capture_qk: bool = False) -> list[RunResult]:
    """Run a padded batch and cut each input's maps back to its own length."""
    attentions, q_out, k_out = _forward(lm, model_inputs(lm, encoded), capture_qk)
    stacked = torch.stack(attentions, dim=1).float().cpu().numpy()  # [batch, layers, heads, n_max, n_max]
    results = []
    for b, e in enumerate(encoded):
        r = RunResult(**vars(e), attentions=np.ascontiguousarray(stacked[b, :, :, : e.n, : e.n]))
        if capture_qk:
            h = lm.facts.n_heads
            r.queries = np.stack([_heads_split(q[b, : e.n], h) for q in q_out])
            r.keys = np.stack([_heads_split(k[b, : e.n], h) for k in k_out])
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


def run(lm: LoadedModel, text_a: TextOrWords, text_b: TextOrWords | None = None, capture_qk: bool = True) -> RunResult:
    """Run one sentence or pair; attentions are float32 [layers, heads, n, n], queries and keys [layers, heads, n, d]."""
    encoded = encode(lm, text_a, text_b)
    if isinstance(text_a, str):  # typed text; corpus word lists keep their words without pieces (deps handles them)
        _check_tokens(encoded, text_b is not None)
    return run_encoded(lm, [encoded], capture_qk=capture_qk)[0]


def run_batches(
    lm: LoadedModel,
    inputs: Iterable[tuple[TextOrWords, TextOrWords | None]],
    batch_size: int = 32,
    window: int = 512,
) -> Iterator[RunResult]:
    """Run many inputs in padded batches of similar length, yielding results in input order."""
    buffer: list[Encoded] = []
    for text_a, text_b in inputs:
        buffer.append(encode(lm, text_a, text_b))
        if len(buffer) == window:
            yield from _run_window(lm, buffer, batch_size)
            buffer = []
    if buffer:
        yield from _run_window(lm, buffer, batch_size)


def _run_window(lm: LoadedModel, encoded: list[Encoded], batch_size: int) -> Iterator[RunResult]:
    """Sort a window of inputs by length so batches carry little padding, then restore the order."""
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].n)
    out: list[RunResult | None] = [None] * len(encoded)
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        for i, r in zip(idx, run_encoded(lm, [encoded[i] for i in idx])):
            out[i] = r
    yield from out  # type: ignore[misc]
