"""Gradient importance of attention (METHODS §5, Clark Fig. 3): |dLoss/dA| to [SEP] keys against all keys, per layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlib.core.batches import MADE_IN_POST_INIT
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import corpus_index
from attnlib.core.families import UnsupportedModelError
from attnlib.core.hooks import ATTENTION, hooks
from attnlib.core.model import LoadedModel
from attnlib.core.runner import Encoded, encode, model_inputs, returned_weights

MASK_RATE = 0.15
DEFAULT_SEED = 0


class GradientImportanceUnavailable(UnsupportedModelError):
    """The model cannot give gradient importance (no trained masked-LM head); the message says why."""


def unavailable_reason(lm: LoadedModel) -> str | None:
    """Why gradient importance cannot be computed for this model, or None when it can."""
    if lm.mlm is None:
        what = {
            "decoder": "is a decoder: it predicts the next token and has no masked-language-model head",
            "encoder-decoder": "is an encoder-decoder: its encoder has no masked-language-model head",
        }.get(lm.facts.kind, "has no trained masked-language-model head")
        return (
            f"{lm.facts.name} {what}, so there is no masked-LM loss to take gradients of (METHODS §5). "
            "Choose an encoder with its masked-LM head, such as bert-base-uncased."
        )
    if getattr(lm.tokenizer, "mask_token_id", None) is None:
        return f"The tokenizer of {lm.facts.name} has no mask token."
    return None


def masked_positions(special_mask: np.ndarray, seed: int, index: int, rate: float = MASK_RATE) -> np.ndarray:
    """Positions to mask: round(rate * non-special tokens), at least one, drawn with a generator fixed by (seed, index)."""
    candidates = np.flatnonzero(~np.asarray(special_mask, bool))
    k = min(len(candidates), max(1, round(rate * len(candidates))))
    rng = np.random.default_rng([seed, index])
    return np.sort(rng.choice(candidates, size=k, replace=False))


@dataclass
class GradientImportanceResult:
    """Mean |dLoss/dA| per head [layers, heads] over rows and SEP keys (sep) or all keys (all), averaged over inputs."""

    n_inputs: int
    sep: np.ndarray
    all: np.ndarray

    @property
    def layers(self) -> dict[str, np.ndarray]:
        """Per layer: the mean over heads (every head has the same rows and keys)."""
        return {"sep": self.sep.mean(axis=1), "all": self.all.mean(axis=1)}

    def to_json(self) -> dict:
        layers = self.layers
        return {
            "n_inputs": self.n_inputs,
            "layers": [{"sep": float(s), "all": float(a)} for s, a in zip(layers["sep"], layers["all"])],
            "heads": {"sep": self.sep, "all": self.all},
        }


@dataclass
class GradientImportanceSums:
    """Mergeable sums of per-input mean gradient magnitudes."""

    n_layers: int
    n_heads: int
    sep: np.ndarray = MADE_IN_POST_INIT  # [layers]
    all: np.ndarray = MADE_IN_POST_INIT
    n_inputs: int = 0

    def __post_init__(self) -> None:
        shape = (self.n_layers, self.n_heads)
        self.sep = np.zeros(shape) if self.sep is None else self.sep
        self.all = np.zeros(shape) if self.all is None else self.all

    def add_input(self, grad: np.ndarray, sep_mask: np.ndarray) -> None:
        """Add one input's gradient [layers, heads, n, n] (no padding): mean |g| over rows and SEP keys, and over all keys."""
        magnitude = np.abs(grad)
        self.sep += magnitude[..., np.asarray(sep_mask, bool)].mean(axis=(-2, -1))
        self.all += magnitude.mean(axis=(-2, -1))
        self.n_inputs += 1

    def merge(self, other: GradientImportanceSums) -> GradientImportanceSums:
        """The sums over both input sets; neither operand changes."""
        return GradientImportanceSums(
            self.n_layers, self.n_heads, self.sep + other.sep, self.all + other.all, self.n_inputs + other.n_inputs
        )

    def result(self) -> GradientImportanceResult:
        n = max(self.n_inputs, 1)
        return GradientImportanceResult(self.n_inputs, self.sep / n, self.all / n)


def _masked_batch(lm: LoadedModel, encoded: Sequence[Encoded], indices: Sequence[int], seed: int, rate: float):
    """Model inputs with masked tokens (each input's drawn by its corpus index), and labels (-100 where not masked)."""
    batch = model_inputs(lm, encoded)
    labels = torch.full_like(batch["input_ids"], -100)
    for b, (e, index) in enumerate(zip(encoded, indices)):
        pos = torch.as_tensor(masked_positions(e.special_mask, seed, index, rate), device=labels.device)
        labels[b, pos] = batch["input_ids"][b, pos]
        batch["input_ids"][b, pos] = lm.tokenizer.mask_token_id
    return batch, labels


def batch_attention_gradients(
    lm: LoadedModel,
    encoded: Sequence[Encoded],
    indices: Sequence[int] | None = None,
    seed: int = DEFAULT_SEED,
    rate: float = MASK_RATE,
) -> list[np.ndarray]:
    """dLoss/dA [layers, heads, n, n] of each input, where each input's loss is its own mean masked-LM loss; the
    masks are drawn by the inputs' corpus indices (0, 1, ... when not given)."""
    reason = unavailable_reason(lm)
    if reason is not None or lm.mlm is None:
        raise GradientImportanceUnavailable(reason)
    batch, labels = _masked_batch(lm, encoded, range(len(encoded)) if indices is None else indices, seed, rate)
    with torch.enable_grad(), hooks(lm, ATTENTION, graph=True) as cache:
        out = lm.mlm(**batch)
        token_loss = torch.nn.functional.cross_entropy(
            out.logits.transpose(1, 2).float(), labels, ignore_index=-100, reduction="none"
        )  # [batch, n]
        per_input = token_loss.sum(dim=1) / (labels != -100).sum(dim=1)
        # Summing independent per-input losses gives each input's own gradient, whatever the batch.
        grads = torch.autograd.grad(per_input.sum(), list(returned_weights(cache.attn)))
    stacked = torch.stack(grads, dim=1).float().cpu().numpy()  # [batch, layers, heads, n_max, n_max]
    return [stacked[b, :, :, : e.n, : e.n] for b, e in enumerate(encoded)]


def add_gradients(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    sums: GradientImportanceSums,
    batch_size: int = 8,
    seed: int = DEFAULT_SEED,
    rate: float = MASK_RATE,
    progress: Callable[[int, int], None] | None = None,
) -> GradientImportanceSums:
    """Add each input's gradient magnitudes to the sums, a forward and backward pass per batch; each input masked by
    its corpus index (a Ray shard's inputs carry theirs), so every engine draws the same masks."""
    for start in range(0, len(inputs), batch_size):
        chunk = inputs[start : start + batch_size]
        encoded = [encode(lm, item.text_a, item.text_b) for item in chunk]
        indices = [corpus_index(item, start + b) for b, item in enumerate(chunk)]
        for e, grad in zip(encoded, batch_attention_gradients(lm, encoded, indices, seed, rate)):
            sums.add_input(grad, e.sep_mask)
        if progress is not None:
            progress(start + len(chunk), len(inputs))
    return sums


def gradient_importance(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    batch_size: int = 8,
    seed: int = DEFAULT_SEED,
    rate: float = MASK_RATE,
    progress: Callable[[int, int], None] | None = None,
) -> GradientImportanceResult:
    """METHODS §5 over a corpus; raises GradientImportanceUnavailable for a model without a trained masked-LM head."""
    reason = unavailable_reason(lm)
    if reason:
        raise GradientImportanceUnavailable(reason)
    sums = GradientImportanceSums(lm.facts.n_layers, lm.facts.n_heads)
    return add_gradients(lm, inputs, sums, batch_size, seed, rate, progress).result()
