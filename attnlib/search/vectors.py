"""The vectors of METHODS §16 from the model: a layer's output (mode hidden) or the concatenated context vectors of a
set of heads (mode heads), normalised, in one padded batch (an index's rows) or one block-wise pass (a long query),
with the key each head attends to most and each position's class."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import torch

from attnlib.core.blockwise import BLOCKWISE_FROM, Block, run_blockwise, supports_blockwise
from attnlib.core.errors import SearchError
from attnlib.core.families import SUPPORTED_NAMES, UnsupportedModelError, family_for, layout
from attnlib.core.hooks import attentions_returned
from attnlib.core.memory import MemoryLimitError, check_memory, memory_limit, run_size
from attnlib.core.model import LoadedModel
from attnlib.core.replay import editing_contexts
from attnlib.core.runner import Encoded, InputError, encode, model_inputs, returned_weights
from attnlib.search.options import IndexOptions
from attnlib.stats.special import CLASS_KEYS, punct_mask


@dataclass
class BatchVectors:
    """One forward pass's vectors: [batch, n_max, dims] float32, normalised over the index's heads (or the hidden
    state), each head's part of that norm [batch, n_max, heads] (mode heads), and per head of the layer the key that
    each position attends to most [batch, heads, n_max] (none for the embedding output)."""

    vectors: torch.Tensor
    head_norms: torch.Tensor | None
    argmax: torch.Tensor | None


def heads_layout(lm: LoadedModel):
    """The layout that finds the heads' context vectors; SearchError naming what works instead."""
    if family_for(lm.encoder.config) is None:
        raise SearchError(
            f"search by heads is not available for '{lm.encoder.config.model_type}' models: attnlib finds the heads' "
            f"context vectors only for {SUPPORTED_NAMES}. Search by hidden state (no heads) works for this model."
        )
    try:
        return layout(lm.encoder, "norms")
    except UnsupportedModelError as exc:
        raise SearchError(f"search by heads is not available for this model: {exc}") from exc


def hidden_index(options: IndexOptions) -> int:
    """The index into transformers' `hidden_states` of mode hidden's vectors: 0 the embedding output, l + 1 layer l's
    output (the last after the final norm, where the model applies one)."""
    return 0 if options.embeddings else options.layer + 1


def head_columns(lay, contexts: torch.Tensor, heads: Sequence[int]) -> torch.Tensor:
    """The chosen heads' context vectors [batch, n, |heads| * d] float32, from a layer's [batch, n, heads * d]."""
    d = lay.head_dim
    columns = torch.cat([torch.arange(h * d, (h + 1) * d) for h in heads]).to(contexts.device)
    return contexts.index_select(-1, columns).float()


def normalised(x: torch.Tensor, heads: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Vectors [batch, n, dims] divided by their norms, and (mode heads) each head's part of that norm."""
    x = x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    return x, (x.unflatten(-1, (len(heads), -1)).norm(dim=-1) if heads else None)


def batch_vectors(lm: LoadedModel, encoded: Sequence[Encoded], options: IndexOptions) -> BatchVectors:
    """Run a padded batch once and return the §16 vectors of every position (options resolved for the model)."""
    layer = None if options.embeddings else options.layer
    heads = options.head_list(lm.facts.n_heads)
    contexts: list[torch.Tensor] = []
    with ExitStack() as stack:
        if heads:
            lay = heads_layout(lm)

            def keep(index: int, c: torch.Tensor) -> None:
                if index == layer:
                    contexts.append(c.detach())

            stack.enter_context(editing_contexts(lay, keep))
        if layer is not None:
            stack.enter_context(attentions_returned([lm.encoder]))
        with torch.inference_mode():
            out = lm.encoder(**model_inputs(lm, encoded), output_hidden_states=not heads)
    x = head_columns(lay, contexts[0], heads) if heads else out.hidden_states[hidden_index(options)].float()
    x, head_norms = normalised(x, heads)
    argmax = None
    if layer is not None:
        attentions = returned_weights(out.attentions)[layer]  # [batch, heads, n, n]
        if attentions.dim() != 4:
            raise SearchError(
                "the model's attention maps are not [batch, heads, n, n]; it must run with eager attention."
            )
        argmax = attentions.argmax(-1)  # ties: torch returns the first (lowest) index of the maximum
    return BatchVectors(x, head_norms, argmax)


def runs_blockwise(lm: LoadedModel, encoded: Encoded) -> bool:
    """Whether a query's input runs block-wise (METHODS §19): longer than BLOCKWISE_FROM, on a family that can."""
    return encoded.n > BLOCKWISE_FROM and supports_blockwise(lm.encoder)


def blockwise_vectors(lm: LoadedModel, encoded: Encoded, options: IndexOptions) -> BatchVectors:
    """batch_vectors of one long input from one block-wise pass (options resolved for the model), keeping only what
    the vectors are made of: the one hidden state of mode hidden, or the layer's context vectors of mode heads; no
    attention map is kept (a query needs no argmax)."""
    heads = options.head_list(lm.facts.n_heads)
    batch = model_inputs(lm, [encoded])

    def drop(_block: Block) -> None:
        """The blocks' probabilities: nothing of them is kept."""

    if not heads:
        x = run_blockwise(lm, batch, drop, hidden_state=hidden_index(options)).float()
        return BatchVectors(*normalised(x, heads), None)
    lay = heads_layout(lm)
    contexts: list[torch.Tensor] = []

    def keep(index: int, c: torch.Tensor) -> None:
        if index == options.layer:
            contexts.append(head_columns(lay, c.detach(), heads))

    with editing_contexts(lay, keep):
        run_blockwise(lm, batch, drop)
    return BatchVectors(*normalised(contexts[0], heads), None)


def token_classes(encoded: Encoded, all_punct: bool) -> np.ndarray:
    """[n] int8: the METHODS §1 class of each position, as an index into special.CLASS_KEYS."""
    punct = punct_mask(encoded.tokens, encoded.special_mask, all_punct)
    classes = np.full(encoded.n, CLASS_KEYS.index("other"), np.int8)
    classes[punct] = CLASS_KEYS.index("punct")
    classes[np.asarray(encoded.sep_mask, bool)] = CLASS_KEYS.index("sep")
    classes[np.asarray(encoded.cls_mask, bool)] = CLASS_KEYS.index("cls")
    return classes


@dataclass
class Query:
    """A typed text's token as search reads it: its vector (normalised as the index's rows) and its heads' norms."""

    text_a: str
    text_b: str | None
    position: int
    token: str
    tokens: list[str]
    vector: np.ndarray  # [dims] float32
    head_norms: np.ndarray | None  # [heads] float32 (mode heads)

    def describe(self) -> dict:
        return {"text": self.text_a, "pair": self.text_b, "token": self.position, "piece": self.token}


def query_of(lm: LoadedModel, text: str, pair: str | None, token: int, options: IndexOptions) -> Query:
    """The query vector of piece `token` (0-based, [CLS] = 0) of a typed sentence or pair; SearchError for a position
    outside it."""
    options = options.for_model(lm.facts)
    pair = (pair or "").strip() or None
    enc = encode(lm, text, pair)
    if not 0 <= token < enc.n:
        pieces = ", ".join(f"{i} {t}" for i, t in enumerate(enc.tokens[:40]))
        raise InputError(
            f"token {token} is not a position of the query: it has {enc.n} wordpieces (0-{enc.n - 1}, [CLS] = 0): "
            f"{pieces}{' ...' if enc.n > 40 else ''}."
        )
    if runs_blockwise(lm, enc):
        got = blockwise_vectors(lm, enc, options)
    else:
        try:
            check_memory(run_size(lm, enc.n), memory_limit(device=lm.device))
        except MemoryLimitError as exc:
            raise SearchError(
                f"'{lm.facts.model_type}' models cannot run block-wise, so a query runs with every layer's attention "
                f"maps: {exc}"
            ) from exc
        got = batch_vectors(lm, [enc], options)
    vector = got.vectors[0, token].cpu().numpy().astype(np.float32)
    head_norms = None if got.head_norms is None else got.head_norms[0, token].cpu().numpy().astype(np.float32)
    return Query(text, pair, token, enc.tokens[token], list(enc.tokens), vector, head_norms)
