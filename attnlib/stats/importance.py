"""Head ablation, the special-token knockouts and their effects (METHODS §15): the primitives of the `ablate` and
`importance` analyses.

A batch runs once (`prepare`): its recording (attnlib.core.replay), every layer's attention weights and its [CLS]/[SEP]
keys; for a model with a trained masked-LM head the same inputs with §15's masked positions ride along as a second
half of the batch. A change of heads in layer l cannot change the layers below l, so `variant_effects` replays only
layers l..L-1 from the recorded input of layer l, with the variants stacked along the batch (variant v of row r at
v * R + r) and the context vectors of the changed heads edited through replay.editing_contexts: every single-head
change of a model with L layers and H heads costs H (L + 1) / 2 forward passes, less the projections of the lowest
changed layer, which are served from the clean pass (its output projection as o(c) plus a d-column product per
changed head). `heads_off` switches a set of heads off in ordinary forward passes; `head_gradients` puts Michel's
multipliers on the context vectors through the same hook. Every hook is removed in `finally`.

Decoders (METHODS §18) take the same path: their own layers replayed with the recorded causal (and sliding-window)
masks and rotary tables; K is FIRST (and SEP), and the LM measure is the next-token loss of the causal-LM head on the
inputs' own rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attnlib.core.errors import OptionError
from attnlib.core.families import (
    STATISTICS,
    SUPPORTED_NAMES,
    UnsupportedModelError,
    family_for,
    found_for,
    layout,
    unsupported_reason,
)
from attnlib.core.hooks import ATTENTION, hooks, served_once
from attnlib.core.model import LoadedModel
from attnlib.core.replay import Recording, captured_contexts, editing_contexts, record
from attnlib.core.runner import Encoded, encode, model_inputs, returned_weights
from attnlib.stats.gradient import unavailable_reason as gradient_unavailable_reason

Head = tuple[int, int]  # (layer, head), 0-based
Change = Literal["ablate", "drop", "renormalise"]
Measure = Literal["embedding", "hidden", "mlm"]
CHANGES: tuple[Change, ...] = ("ablate", "drop", "renormalise")
KNOCKOUTS: tuple[Change, ...] = ("drop", "renormalise")
MEASURES: tuple[Measure, ...] = ("embedding", "hidden", "mlm")
MASK_RATE = 0.15
DEFAULT_SEED = 0
RENORMALISE_FLOOR = 1e-6  # a row with less non-special mass than this is renormalised to uniform
REPLAY_BYTES = 160 * 2**20  # one replay's activations stay near this (variants replayed in chunks): the model,
# the recording and the replay then stay under the classroom server's 1 GB
TOP_PREDICTIONS = 5


class AblationUnavailable(UnsupportedModelError):
    """Ablation, or one of its measures, is not defined for this model; the message says why."""


def unavailable_reason(lm: LoadedModel, measure: Measure | None = None) -> str | None:
    """Why heads of this model cannot be ablated (or this measure taken), in words; None when they can."""
    model_type = lm.encoder.config.model_type
    if family_for(lm.encoder.config) is None:
        return (
            f"Head ablation (METHODS §15) is not available for '{model_type}' models: attnlib knows where the heads' "
            f"context vectors enter the attention output projection only for {SUPPORTED_NAMES}."
        )
    replay = unsupported_reason(lm.encoder.config, "ablation")
    if replay is not None and found_for(lm.encoder.config) is not None:
        return replay.replace(STATISTICS["ablation"], "Head ablation and the knockouts (METHODS §15)", 1)
    if replay is not None:
        return f"Head ablation (METHODS §15) replays the model's layers as attribution does, which it cannot here. {replay}"
    return mlm_reason(lm) if measure == "mlm" else None


def mlm_reason(lm: LoadedModel) -> str | None:
    """Why the LM measures (the mlm effect: a decoder's next-token loss, §18; Michel's gradient importance) are not
    defined; None when they are."""
    if lm.facts.causal:
        if lm.causal_lm is not None:
            return None
        return (
            f"{lm.facts.name} has no trained language-model head (it is not a causal-LM checkpoint), so the LM "
            "measure, the next-token loss of METHODS §15 and §18, is not defined for it (its embedding and hidden "
            "measures are)."
        )
    if lm.facts.kind == "encoder-decoder":
        return (
            f"{lm.facts.name} is an encoder-decoder: its encoder, whose heads are ablated, has no masked-LM head, and "
            "its LM loss is the decoder's on a target, which the encoder's statistics (METHODS §18) do not read; so the "
            "mlm measure and the gradient importance of METHODS §15 are not defined for it (its embedding and hidden "
            "measures, on the encoder's last hidden states, are)."
        )
    if gradient_unavailable_reason(lm) is None:  # §5's condition: a trained head and a mask token
        return None
    if lm.mlm is None:
        return (
            f"{lm.facts.name} has no trained masked-language-model head, so the mlm measure and the gradient "
            "importance of METHODS §15 are not defined for it (its embedding and hidden measures are)."
        )
    return f"The tokenizer of {lm.facts.name} has no mask token, so nothing can be masked for the mlm measure."


def check_available(lm: LoadedModel, measure: Measure | None = None) -> None:
    """Raise AblationUnavailable with the reason when unavailable_reason gives one."""
    reason = unavailable_reason(lm, measure)
    if reason is not None:
        raise AblationUnavailable(reason)


# ---------------------------------------------------------------------------------------------------- which heads


def parse_heads(text: str, n_layers: int, n_heads: int) -> tuple[Head, ...]:
    """'1-2,3-0' (0-based layer-head pairs, as the command line and the JSON count) as sorted unique (layer, head);
    OptionError naming a pair that is malformed or outside the model."""
    heads = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        layer, dash, head = part.partition("-")
        if not dash or not layer.strip().isdigit() or not head.strip().isdigit():
            raise OptionError(f"heads: '{part}' is not a layer-head pair such as 3-0 (0-based, comma-separated).")
        pair = (int(layer), int(head))
        if pair[0] >= n_layers or pair[1] >= n_heads:
            raise OptionError(
                f"heads: {part} is outside this model's {n_layers} layers x {n_heads} heads "
                f"(0-based: layers 0-{n_layers - 1}, heads 0-{n_heads - 1})."
            )
        heads.add(pair)
    return tuple(sorted(heads))


def heads_text(heads: Iterable[Head]) -> str:
    """The 0-based 'layer-head,...' text of a set of heads (parse_heads' inverse)."""
    return ",".join(f"{l}-{h}" for l, h in sorted(heads))


@dataclass(frozen=True)
class Variant:
    """One change of the model: zero ablation of a set of heads, or a knockout of heads of one layer."""

    change: Change
    heads: tuple[Head, ...]

    @property
    def start(self) -> int:
        """The lowest layer it changes: layers below run as in the clean pass."""
        return min(l for l, _ in self.heads)

    def heads_in(self, layer: int) -> list[int]:
        return [h for l, h in self.heads if l == layer]


def check_variant(variant: Variant) -> None:
    """A knockout's special-token terms come from the clean pass, exact only in the lowest changed layer."""
    if variant.change != "ablate" and len({l for l, _ in variant.heads}) > 1:
        raise OptionError(
            f"a {variant.change} knockout changes heads of one layer at a time (METHODS §15 defines it per head); "
            f"these are in layers {', '.join(str(l) for l in sorted({l for l, _ in variant.heads}))}."
        )


# ----------------------------------------------------------------------------------------- masked positions, MLM head


def mlm_positions(maskable: np.ndarray, seed: int, index: int, rate: float = MASK_RATE) -> np.ndarray:
    """METHODS §15: max(1, round(rate m)) of the m maskable positions, the first of
    numpy.random.default_rng(seed + index).permutation(m); sorted. None when m = 0."""
    candidates = np.flatnonzero(np.asarray(maskable, bool))
    m = len(candidates)
    if m == 0:
        return candidates
    k = max(1, round(rate * m))
    return np.sort(candidates[np.random.default_rng(seed + index).permutation(m)[:k]])


def maskable_positions(lm: LoadedModel, encoded: Encoded) -> np.ndarray:
    """[n] bool: the non-special positions (a [MASK] typed in the text is not a word to predict)."""
    ids = np.asarray(encoded.input_ids)
    return ~np.asarray(encoded.special_mask, bool) & (ids != lm.tokenizer.mask_token_id)


MlmHead = Callable[[torch.Tensor], torch.Tensor]  # last hidden states [..., hidden] -> logits [..., vocab]
_HEADS: weakref.WeakKeyDictionary[torch.nn.Module, MlmHead] = weakref.WeakKeyDictionary()


def _head_of(mlm: torch.nn.Module) -> MlmHead:
    """The masked-LM head of a ForMaskedLM model as a function of the encoder's output (as its forward applies it)."""
    if hasattr(mlm, "vocab_projector"):  # DistilBERT
        return lambda h: mlm.vocab_projector(mlm.vocab_layer_norm(mlm.activation(mlm.vocab_transform(h))))
    if hasattr(mlm, "generator_lm_head"):  # ELECTRA's generator
        return lambda h: mlm.generator_lm_head(mlm.generator_predictions(h))
    if hasattr(mlm, "decoder") and hasattr(mlm, "head"):  # ModernBERT
        return lambda h: mlm.decoder(mlm.head(h))
    if not getattr(mlm, "legacy", True):  # DeBERTa (v2) with lm_predictions
        return lambda h: mlm.lm_predictions(h, mlm.base_model.embeddings.word_embeddings)
    for name in ("cls", "lm_head", "predictions"):  # BERT, ERNIE, RoFormer; RoBERTa, MPNet; ALBERT
        if hasattr(mlm, name):
            return getattr(mlm, name)
    raise AblationUnavailable(f"attnlib does not know the masked-LM head of {type(mlm).__name__}.")


def _causal_head(model: torch.nn.Module) -> MlmHead:
    """A ForCausalLM model's LM head as its forward applies it (Cohere's logit scale, then Gemma 2's final
    soft-capping)."""
    if not hasattr(model, "lm_head"):  # a BERT saved as a decoder (BertLMHeadModel): its masked-LM-style head
        return _head_of(model)
    project = model.lm_head
    scale = float(getattr(model, "logit_scale", None) or 1.0)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if scale == 1.0 and not cap:
        return project

    def head(h: torch.Tensor) -> torch.Tensor:
        logits = project(h) * scale
        return torch.tanh(logits / cap) * cap if cap else logits

    return head


def mlm_head(lm: LoadedModel) -> MlmHead:
    """The model's masked-LM head (a decoder's causal-LM head), checked once per model against its own forward pass;
    AblationUnavailable when the model has none or attnlib cannot apply it to replayed hidden states."""
    reason = mlm_reason(lm)
    model = lm.causal_lm if lm.facts.causal else lm.mlm
    if reason is not None or model is None:
        raise AblationUnavailable(reason)
    if model not in _HEADS:
        head = _causal_head(model) if lm.facts.causal else _head_of(model)
        batch = model_inputs(lm, [encode(lm, "The head is checked once.")])
        with torch.no_grad():
            own = model(**batch).logits
            ours = head(lm.encoder(**batch).last_hidden_state)
        if ours.shape != own.shape or not torch.allclose(ours, own, rtol=1e-4, atol=1e-4):
            what = "language-model" if lm.facts.causal else "masked-LM"
            raise AblationUnavailable(
                f"The {what} head of {type(model).__name__} does not reproduce the model's own predictions when "
                "applied to its encoder's output; the mlm measure cannot be computed for it."
            )
        _HEADS[model] = head
    return _HEADS[model]


def mlm_losses(head: MlmHead, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each row's mean cross-entropy at its masked positions (labels -100 elsewhere): hidden [R, n, D] -> [R]; the
    head runs on the masked positions only."""
    where = labels != -100
    logits = head(hidden[where]).double()  # [M, vocab]; the loss differences are small
    token_loss = torch.nn.functional.cross_entropy(logits, labels[where], reduction="none")
    rows = where.nonzero()[:, 0]
    sums = torch.zeros(hidden.shape[0], dtype=token_loss.dtype, device=hidden.device).index_add_(0, rows, token_loss)
    return sums / where.sum(dim=1).clamp(min=1)


# ------------------------------------------------------------------------------------------------ the measures


def unit_mean(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s/|s|, s the mean of h [..., B, n, D] over mask-1 positions (mask [B, n]; sentence-transformers' pooling):
    [..., B, D] float64."""
    weights = mask.to(torch.float64)[..., None]
    pooled = (h.to(torch.float64) * weights).sum(-2) / weights.sum(-2)
    return pooled / pooled.norm(dim=-1, keepdim=True)


def embedding_change(reference: torch.Tensor, changed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 - cos(s, s_M) per input: reference [B, n, D], changed [..., B, n, D] (variants in front), mask [B, n] ->
    [..., B] float64. Computed as |s/|s| - s_M/|s_M||^2 / 2, exact 0 for equal states."""
    return units_apart(unit_mean(reference, mask), unit_mean(changed, mask))


def units_apart(reference: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
    """|u - u_M|^2 / 2 = 1 - cos of unit vectors [..., D] -> [...]."""
    return (reference - changed).square().sum(-1) / 2


def hidden_change(reference: torch.Tensor, changed: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over mask-1 positions of ||h - h_M|| / ||h|| per input: reference [B, n, D], changed [..., B, n, D],
    mask [B, n] -> [..., B] float64."""
    ref = reference.to(torch.float64)
    ratio = (ref - changed.to(torch.float64)).norm(dim=-1) / ref.norm(dim=-1)
    weights = mask.to(torch.float64)
    return (ratio * weights).sum(-1) / weights.sum(-1)


# ------------------------------------------------------------------------------------------------ one batch, once


@dataclass
class Prepared:
    """A batch of B inputs run once. Rows 0..B-1 are the inputs; with a masked-LM head, rows B..2B-1 are the same
    inputs with §15's masked positions (the mlm measure), so R = B or 2B rows run in every replay. A decoder's LM
    measure reads the inputs' own rows (next-token targets), so its R is B; the LM rows are always the last B."""

    lm: LoadedModel
    batch: dict  # the R rows' model inputs
    rec: Recording
    attentions: tuple[torch.Tensor, ...]  # per layer application [R, H, n, n]
    special: torch.Tensor  # [R, n] bool: the CLS and SEP keys (K of §15)
    n_inputs: int  # B
    labels: torch.Tensor | None  # [B, n]: the LM rows' targets (masked or next tokens), -100 elsewhere
    clean_loss: torch.Tensor | None  # [B]: L(x) of the unchanged model
    head: MlmHead | None

    @property
    def rows(self) -> int:
        return self.rec.batch_size

    @property
    def mask(self) -> torch.Tensor:
        """[R, n] the attention mask (1 for a token, 0 for padding)."""
        return self.rec.input_mask

    @property
    def output(self) -> torch.Tensor:
        """[R, n, D] the unchanged model's last hidden states."""
        assert self.rec.last_hidden_state is not None
        return self.rec.last_hidden_state

    @functools.cached_property
    def reference(self) -> torch.Tensor:
        """[B, n, D] the unchanged model's last hidden states of the inputs, float64."""
        return self.output[: self.n_inputs].to(torch.float64)

    @functools.cached_property
    def reference_unit_mean(self) -> torch.Tensor:
        """[B, D] the unchanged model's pooled sentence embeddings, unit length (float64)."""
        return unit_mean(self.reference, self.mask[: self.n_inputs])

    def values(self, layer: int) -> torch.Tensor:
        """[R, H, n, d] the value vectors of a layer in the clean pass (as its weights multiply them)."""
        lay, call = self.rec.layout, self.rec.heads[layer]
        site = lay.sites[layer]
        with torch.no_grad():
            outputs = [p(call.hidden) for p in site.projections]
            return lay.qkv(site, outputs, call)[2]

    def row_bytes(self) -> int:
        """Bytes one replayed row adds to the process at its peak (float32 scores and weights of every head, hidden
        and feed-forward states, and what the allocator keeps), as measured on MiniLM: for chunking the variants."""
        n, facts = self.mask.shape[1], self.lm.facts
        return 4 * (8 * facts.n_heads * n * n + 30 * n * facts.hidden_size)

    def variants_per_replay(self) -> int:
        return max(1, REPLAY_BYTES // (self.rows * self.row_bytes()))

    @torch.no_grad()
    def effects(self, changed: torch.Tensor) -> dict[Measure, np.ndarray]:
        """Each measure of §15 for V changed outputs [V * R, n, D] of this batch: {measure: [V, B]} (mlm only with
        masked rows)."""
        B, R = self.n_inputs, self.rows
        n, D = changed.shape[1:]
        out = changed.reshape(-1, R, n, D)
        V = out.shape[0]
        clean, mask = out[:, :B].to(torch.float64), self.mask[:B]  # [V, B, n, D] (converted once for both), [B, n]
        found: dict[Measure, np.ndarray] = {
            "embedding": units_apart(self.reference_unit_mean, unit_mean(clean, mask)).cpu().numpy(),
            "hidden": hidden_change(self.reference, clean, mask).cpu().numpy(),
        }
        if self.labels is not None and self.head is not None and self.clean_loss is not None:
            masked = out[:, R - B :].reshape(V * B, n, D)
            losses = mlm_losses(self.head, masked, self.labels.repeat(V, 1)).reshape(V, B)
            found["mlm"] = (losses - self.clean_loss).to(torch.float64).cpu().numpy()
        return found


def masked_batch(
    lm: LoadedModel, encoded: Sequence[Encoded], indices: Sequence[int], seed: int
) -> tuple[dict, torch.Tensor]:
    """The inputs with §15's positions replaced by the mask token, and the targets there (-100 elsewhere)."""
    batch = model_inputs(lm, encoded)
    labels = torch.full_like(batch["input_ids"], -100)
    for b, (e, index) in enumerate(zip(encoded, indices)):
        pos = torch.as_tensor(mlm_positions(maskable_positions(lm, e), seed, index), device=labels.device)
        labels[b, pos] = batch["input_ids"][b, pos]
        batch["input_ids"][b, pos] = lm.tokenizer.mask_token_id
    return batch, labels


def next_token_labels(batch: dict) -> torch.Tensor:
    """METHODS §18: position i predicts token i + 1, for i = 0..n-2 of each input (-100 at its last and at padding)."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    labels = torch.full_like(ids, -100)
    labels[:, :-1] = torch.where(mask[:, 1:].bool(), ids[:, 1:], -100)
    return labels


def _recorded(lm: LoadedModel, batch: dict) -> tuple[Recording, tuple[torch.Tensor, ...]]:
    """record() of the batch, with the attention weights of its forward pass."""
    with hooks(lm, ATTENTION) as cache:
        rec = record(lm, batch, "ablation")
    if len(returned_weights(cache.attn)) != rec.n_layers:
        raise AblationUnavailable(f"{lm.facts.name} returned no attention weights per layer (eager attention needed).")
    return rec, tuple(cache.attn)


def prepare(
    lm: LoadedModel,
    encoded: Sequence[Encoded],
    indices: Sequence[int] | None = None,
    seed: int = DEFAULT_SEED,
    with_mlm: bool | None = None,
) -> Prepared:
    """Run a batch once (and its masked copy, with a masked-LM head unless with_mlm is False): what every change of
    its heads replays from. `indices` are the inputs' places in their corpus (the masks' seeds: seed + index)."""
    check_available(lm)
    indices = list(range(len(encoded))) if indices is None else list(indices)
    with_mlm = mlm_reason(lm) is None if with_mlm is None else with_mlm
    batch = model_inputs(lm, encoded)
    labels = head = None
    if with_mlm:
        head = mlm_head(lm)
        if lm.facts.causal:
            labels = next_token_labels(batch)
        else:
            masked, labels = masked_batch(lm, encoded, indices, seed)
            batch = {key: torch.cat([value, masked[key]]) for key, value in batch.items()}
    rec, attentions = _recorded(lm, batch)
    # K of §15: CLS and SEP; a decoder's FIRST (position 0) and SEP (§18)
    special = np.stack([np.pad(e.cls_mask | e.sep_mask, (0, rec.input_mask.shape[1] - e.n)) for e in encoded])
    special_keys = torch.as_tensor(special, device=rec.input_mask.device)
    special_keys = special_keys.repeat(rec.batch_size // len(encoded), 1)
    clean_loss = None
    if head is not None and labels is not None:
        with torch.no_grad():
            clean_loss = mlm_losses(head, rec.last_hidden_state[rec.batch_size - len(encoded) :], labels)  # type: ignore[index]
    return Prepared(lm, batch, rec, attentions, special_keys, len(encoded), labels, clean_loss, head)


# ------------------------------------------------------------------------------------------ the changed contexts


def knockout_terms(prep: Prepared, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every head of a layer: the special keys' term sum_{j in K} A[i, j] v[j] (what drop removes) and the
    renormalised context sum_j A'[i, j] v[j]; both [R, H, n, d]."""
    attn = prep.attentions[layer].to(torch.float32)  # [R, H, n, n]
    values = prep.values(layer).to(torch.float32)  # [R, H, n, d]
    keys = prep.special[:, None, None, :].to(attn.dtype)  # [R, 1, 1, n]
    special_term = torch.matmul(attn * keys, values)
    rest = attn * (1 - keys)
    mass = rest.sum(-1, keepdim=True)  # [R, H, n, 1]
    low = mass < RENORMALISE_FLOOR
    renormalised = rest / torch.where(low, torch.ones_like(mass), mass)
    if bool(low.any()):  # uniform over the keys the row may attend to, special ones left out
        n = attn.shape[-1]
        allowed = (prep.mask.bool() & ~prep.special)[:, None, None, :].expand(-1, 1, n, n)
        window = prep.lm.facts.window(layer)
        pos = torch.arange(n, device=attn.device)
        if window is not None:
            allowed = allowed & ((pos[:, None] - pos[None, :]).abs() <= window)
        if prep.lm.facts.causal:  # a decoder's row 0 has only FIRST: nothing is left, and its c' is 0
            allowed = allowed & (pos[None, :] <= pos[:, None])
        uniform = allowed.to(attn.dtype) / allowed.sum(-1, keepdim=True).clamp(min=1)
        renormalised = torch.where(low, uniform, renormalised)
    return special_term, torch.matmul(renormalised, values)


def _edit(
    prep: Prepared, variants: Sequence[Variant], terms: dict[int, tuple[torch.Tensor, torch.Tensor]], served: int
):
    """The edit of a replay of V variants (rows v * R + r): each variant's heads zeroed or knocked out, in every
    layer but `served` (whose output projection _served_start serves)."""
    H, d, R = prep.lm.facts.n_heads, prep.rec.layout.head_dim, prep.rows
    V = len(variants)

    def edit(index: int, c: torch.Tensor) -> torch.Tensor | None:
        if index == served or not any(v.heads_in(index) for v in variants):
            return None
        n = c.shape[1]
        out = c.clone(memory_format=torch.contiguous_format).view(V, R, n, H, d)
        for k, variant in enumerate(variants):
            for h in variant.heads_in(index):
                if variant.change == "ablate":
                    out[k, :, :, h] = 0
                elif variant.change == "drop":
                    out[k, :, :, h] -= terms[index][0][:, h].to(out.dtype)
                else:
                    out[k, :, :, h] = terms[index][1][:, h].to(out.dtype)
        return out.view(V * R, n, H * d)

    return edit


@dataclass
class _CleanStart:
    """The clean pass's attention block of the lowest layer a group of variants changes."""

    projections: list[torch.Tensor]  # each projection's output [R, n, width]
    contexts: torch.Tensor  # c [R, n, H * d]
    output: torch.Tensor  # the output projection of c [R, n, D]


@torch.no_grad()
def _clean_start(prep: Prepared, layer: int) -> _CleanStart:
    rec, site = prep.rec, prep.rec.layout.sites[layer]
    with captured_contexts(rec.layout, [layer]) as seen:
        rec.replay_block(layer, rec.layers[layer].hidden)
    contexts = seen[0][1]
    projections = [p(rec.heads[layer].hidden) for p in site.projections]
    return _CleanStart(projections, contexts, site.output(contexts))


@contextlib.contextmanager
def _served_start(
    prep: Prepared, clean: _CleanStart, variants: Sequence[Variant], terms: dict[int, tuple[torch.Tensor, torch.Tensor]]
) -> Iterator[None]:
    """In a replay of V variants from their lowest changed layer, that layer's projections and its output projection
    are not run: the input is the clean one, so the projections give the clean outputs, and the output projection of
    the changed c is o(c) + sum over changed heads of W_o[:, head] (c' - c)[head], a product with d columns per
    head instead of H d (the block between them still runs, and its result is not used)."""
    start, R, V = variants[0].start, prep.rows, len(variants)
    site, d = prep.rec.layout.sites[start], prep.rec.layout.head_dim
    n = clean.contexts.shape[1]

    def of_replay(value: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor | None]:
        return lambda x: value.repeat(V, 1, 1) if x.shape[:2] == (V * R, n) else None

    def changed_output(c: torch.Tensor) -> torch.Tensor | None:
        if c.shape[:2] != (V * R, n):
            return None
        out = clean.output.repeat(V, 1, 1).view(V, R, n, -1)
        for k, variant in enumerate(variants):
            for h in variant.heads_in(start):
                head = slice(h * d, (h + 1) * d)
                if variant.change == "ablate":
                    change = -clean.contexts[..., head]
                elif variant.change == "drop":
                    change = -terms[start][0][:, h].to(out.dtype)
                else:
                    change = terms[start][1][:, h].to(out.dtype) - clean.contexts[..., head]
                out[k] += change @ _reading(site.output, head)
        return out.view(V * R, n, -1)

    with contextlib.ExitStack() as stack:
        for projection, value in zip(site.projections, clean.projections):
            stack.enter_context(served_once(projection, of_replay(value)))
        stack.enter_context(served_once(site.output, changed_output))
        yield


def _reading(output: torch.nn.Module, head: slice) -> torch.Tensor:
    """The output projection's weights that read these input columns, [d, out] (GPT-2's Conv1D keeps W as [in, out])."""
    return output.weight[:, head].T if isinstance(output, torch.nn.Linear) else output.weight[head]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc
    except (OSError, AttributeError):
        return None


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
TRIM_SLACK_BYTES = 96 * 2**20  # freed memory glibc may keep before it is handed back
_after_trim = [0]  # the resident set right after the last trim


def _resident_bytes() -> int:
    """The process's resident set now (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0


def release_freed_memory() -> None:
    """Hand the memory of freed tensors back to the system once the resident set has grown TRIM_SLACK_BYTES past
    what it was after the last hand-back (glibc keeps it otherwise: replays of many shapes made a classroom run's RSS
    creep past 1 GB); nothing elsewhere. Not after every replay: the pages handed back are faulted in again by the
    next one, which cost 16% of every single-head ablation's time."""
    trim = _malloc_trim()
    if trim is None or _resident_bytes() - _after_trim[0] < TRIM_SLACK_BYTES:
        return
    trim(0)
    _after_trim[0] = _resident_bytes()


def changed_states(prep: Prepared, variants: Sequence[Variant]) -> Iterator[tuple[list[Variant], torch.Tensor]]:
    """The last hidden states of every variant, [V * R, n, D] per chunk of variants sharing their lowest changed
    layer: layers below it are not run again, and the variants of a chunk run as one batch."""
    for variant in variants:
        check_variant(variant)
    by_start: dict[int, list[Variant]] = {}
    for variant in variants:
        by_start.setdefault(variant.start, []).append(variant)
    size = prep.variants_per_replay()
    rec = prep.rec
    for start, group in sorted(by_start.items()):
        knocked = {start} if any(v.change != "ablate" for v in group) else set()
        terms = {layer: knockout_terms(prep, layer) for layer in knocked}
        clean = _clean_start(prep, start)
        for first in range(0, len(group), size):
            chunk = group[first : first + size]
            hidden = rec.layers[start].hidden.repeat(len(chunk), 1, 1)
            with (
                torch.no_grad(),
                _served_start(prep, clean, chunk, terms),
                editing_contexts(rec.layout, _edit(prep, chunk, terms, start), range(start, rec.n_layers)),
            ):
                states = rec.final(rec.replay(hidden, start))
            del hidden
            release_freed_memory()  # checked per replay: importance over EWT dev peaked at 1160 MB with a trim per layer group
            yield chunk, states  # outside the context: the consumer's own forward passes run unedited


def variant_effects(prep: Prepared, variants: Sequence[Variant]) -> dict[Measure, np.ndarray]:
    """{measure: [V, B]} of every variant on every input of the batch, in the order of `variants`."""
    place = {id(v): k for k, v in enumerate(variants)}
    found: dict[Measure, np.ndarray] = {}
    for chunk, states in changed_states(prep, variants):
        for measure, values in prep.effects(states).items():
            table = found.setdefault(measure, np.zeros((len(variants), prep.n_inputs)))
            table[[place[id(v)] for v in chunk]] = values
    return found


def single_head_variants(n_layers: int, n_heads: int, changes: Sequence[Change] = ("ablate",)) -> list[Variant]:
    """Every head alone under every change, layer by layer."""
    return [Variant(c, ((l, h),)) for l in range(n_layers) for c in changes for h in range(n_heads)]


# ------------------------------------------------------------------------------------ plain forward passes, gradients


def _layout(lm: LoadedModel):
    check_available(lm)
    return layout(lm.encoder, "ablation")


@contextlib.contextmanager
def heads_off(lm: LoadedModel, heads: Iterable[Head]) -> Iterator[None]:
    """Within the context, every forward pass of the model (its encoder, and its masked-LM model) runs with these
    heads' context vectors zero (Michel's xi = 0), in this thread; the hook is removed on exit."""
    lay = _layout(lm)
    off: dict[int, list[int]] = {}
    for l, h in heads:
        off.setdefault(l, []).append(h)
    d = lay.head_dim

    def edit(index: int, c: torch.Tensor) -> torch.Tensor | None:
        if index not in off:
            return None
        out = c.clone(memory_format=torch.contiguous_format)
        for h in off[index]:
            out[..., h * d : (h + 1) * d] = 0
        return out

    with editing_contexts(lay, edit):
        yield


def head_gradients(lm: LoadedModel, batch: dict, labels: torch.Tensor) -> torch.Tensor:
    """Michel's eq. 2 per input: dL(x)/dxi[l, h] at xi = 1, the multipliers on every head's context vector, each
    input with its own multipliers (so the gradient of the summed losses is each input's own): [B, L, H]."""
    lay, head = _layout(lm), mlm_head(lm)
    B = batch["input_ids"].shape[0]
    L, H, d = lm.facts.n_layers, lm.facts.n_heads, lay.head_dim
    dtype = next(lm.encoder.parameters()).dtype
    xi = torch.ones(B, L, H, dtype=dtype, device=batch["input_ids"].device, requires_grad=True)

    def scaled(index: int, c: torch.Tensor) -> torch.Tensor:
        b, n, _ = c.shape
        return (c.view(b, n, H, d) * xi[:, index, None, :, None].to(c.dtype)).view(b, n, H * d)

    with torch.enable_grad(), editing_contexts(lay, scaled):
        hidden = lm.encoder(**batch).last_hidden_state
        losses = mlm_losses(head, hidden, labels)
        (gradient,) = torch.autograd.grad(losses.sum(), xi)
    return gradient


def top_predictions(
    head: MlmHead, hidden: torch.Tensor, tokenizer, k: int = TOP_PREDICTIONS
) -> list[list[tuple[str, float]]]:
    """The k likeliest tokens and their probabilities at each of the positions [M, D] given."""
    with torch.no_grad():
        probs = torch.softmax(head(hidden).float(), dim=-1)
        best = probs.topk(k, dim=-1)
    return [
        [(tokenizer.convert_ids_to_tokens(int(i)), float(p)) for p, i in zip(values, ids)]
        for values, ids in zip(best.values, best.indices)
    ]


def ceil_tenths(n_heads: int) -> list[int]:
    """The pruning curve's sizes: ceil(t N / 10) for t = 1..10."""
    return [math.ceil(t * n_heads / 10) for t in range(1, 11)]
