"""The logit lens and direct logit attribution (METHODS §21) as plain functions of float32 tensors: the LM head as
the model applies it (`Unembedding`: the final norm N_f, the unembedding W_U and b_U, the model's logit scale and
final soft-capping), found in a model and checked against its own logits (`unembedding_of`); every node's reading with
its top and bottom tokens and their rank change; each component's direct effect on a token's logit; each head's
readout (its promoted and suppressed tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from attnlib.core.families import UnsupportedModelError, family_for, layer_norm_parameters, rms_norm_gamma
from attnlib.core.model import LoadedModel
from attnlib.core.ov_circuit import _unembedding_rows

Mode = Literal["normalise", "raw"]
NormKind = Literal["layer", "rms", "none"]
MODES: tuple[Mode, ...] = ("normalise", "raw")
DEFAULT_TOP = 10
HEAD_CHECK = 1e-4  # the head as read here against the model's own logits, relative to their largest magnitude


@dataclass(frozen=True)
class Unembedding:
    """N_f and the linear unembedding after the last layer, in float32: `z(r) = cap(N_f(r) rows^T + bias)`, the
    model's logit scale (Cohere) and T5's d_model**-0.5 (tied embeddings) folded into `rows` and `bias`; `cap` the
    final soft-capping c tanh(z / c) (Gemma 2) where `softcap` is set."""

    norm: NormKind
    gamma: torch.Tensor  # [d] the norm's weight as applied (Gemma: 1 + weight)
    beta: torch.Tensor | None  # [d] a LayerNorm's bias
    eps: float
    rows: torch.Tensor  # W_U^T [V, d]
    bias: torch.Tensor | None  # b_U [V]
    softcap: float | None = None

    @property
    def vocabulary(self) -> int:
        return self.rows.shape[0]

    def centred(self, x: torch.Tensor) -> torch.Tensor:
        """x - mean(x) over the hidden dimension for a LayerNorm; x itself for an RMSNorm or none."""
        return x - x.mean(-1, keepdim=True) if self.norm == "layer" else x

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """s of each state [..., 1]: sqrt(var + eps) (LayerNorm), sqrt(mean(x^2) + eps) (RMSNorm), 1 without a norm."""
        if self.norm == "none":
            return torch.ones_like(x[..., :1])
        return torch.sqrt(self.centred(x).pow(2).mean(-1, keepdim=True) + self.eps)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """N_f(x) [..., d]."""
        y = self.gamma * self.centred(x) / self.scale(x)
        return y if self.beta is None else y + self.beta

    def uncapped(self, x: torch.Tensor, mode: Mode = "normalise") -> torch.Tensor:
        """The logits before soft-capping [..., V]: N_f(x) W_U + b_U, or x W_U (raw)."""
        if mode == "raw":
            return x @ self.rows.T
        z = self.normed(x) @ self.rows.T
        return z if self.bias is None else z + self.bias

    def cap(self, z: torch.Tensor) -> torch.Tensor:
        """The model's final soft-capping of logits (Gemma 2), or z itself."""
        return z if not self.softcap else torch.tanh(z / self.softcap) * self.softcap

    def logits(self, x: torch.Tensor, mode: Mode = "normalise") -> torch.Tensor:
        """z(x) as the model's head gives it (soft-capped where the model caps)."""
        return self.cap(self.uncapped(x, mode))

    def constant(self) -> torch.Tensor:
        """beta W_U + b_U [V]: what no component adds (zero where the model has neither)."""
        z = torch.zeros(self.vocabulary, dtype=self.rows.dtype, device=self.rows.device)
        if self.beta is not None:
            z = z + self.rows @ self.beta
        return z if self.bias is None else z + self.bias

    def direct(self, components: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """Each component's direct effect on every logit [K, V], the norm's scale fixed from the last state [d]:
        (g (c - mean c) / s_t) . W_U[:, w]."""
        return (self.gamma * self.centred(components) / self.scale(last)) @ self.rows.T


# ------------------------------------------------------------------------------------ finding the head in a model


def norm_of(module: torch.nn.Module | None, hidden: int) -> tuple[NormKind, torch.Tensor, torch.Tensor | None, float]:
    """(kind, gamma, beta, eps) of a final norm module, its kind read off its own output: a LayerNorm (mean
    subtracted: N(1) = N(0)) or an RMSNorm (Gemma's 1 + weight read off its output); none for None."""
    if module is None:
        return "none", torch.ones(hidden), None, 0.0
    weight = next(module.parameters(), None)
    device = weight.device if weight is not None else "cpu"
    with torch.no_grad():
        ones, zeros = torch.ones(1, hidden, device=device), torch.zeros(1, hidden, device=device)
        centring = torch.allclose(module(ones).float(), module(zeros).float(), atol=1e-6)
    gamma, beta, eps = layer_norm_parameters(module, hidden)
    if centring:
        has_bias = getattr(module, "bias", None) is not None
        return "layer", gamma.float(), beta.float() if has_bias else None, eps
    return "rms", rms_norm_gamma(module, hidden, eps), None, eps


def _output_bias(projection: torch.nn.Module) -> torch.Tensor | None:
    bias = getattr(projection, "bias", None)
    return None if bias is None else bias.detach().float()


def head_reason(lm: LoadedModel) -> str | None:
    """Why the logit lens (METHODS §21) cannot read this model, in words; None when it can."""
    if lm.facts.kind == "encoder" and lm.mlm is None:
        return (
            f"{lm.facts.name} has no language-model head (it is an encoder without a trained masked-LM head), so the "
            "logit lens and logit attribution (METHODS §21), which read states through that head, are not defined for "
            "it. A decoder such as the trained tiny-llama-induction has one."
        )
    if lm.facts.causal and lm.causal_lm is None:
        return (
            f"{lm.facts.name} has no trained language-model head (it is not a causal-LM checkpoint), so the logit lens "
            "and logit attribution (METHODS §21) are not defined for it."
        )
    return None


def dla_reason(lm: LoadedModel) -> str | None:
    """Why direct logit attribution is not defined for this model (a masked-LM head that is not linear after its
    norm), in words; None when it is (or when the lens itself is refused: head_reason)."""
    if lm.facts.kind == "encoder" and lm.mlm is not None:
        return (
            f"Direct logit attribution (METHODS §21) splits a prediction into what each component adds through a linear "
            f"unembedding after the final norm; the masked-LM head of {lm.facts.name} puts a dense layer, an activation "
            "and a LayerNorm before its decoder, so it is not linear in the components and is not split. The logit lens "
            "reads its states through the whole head."
        )
    return None


def unembedding_of(lm: LoadedModel) -> Unembedding:
    """The final norm and unembedding of a decoder (of an encoder-decoder's decoder), as the model applies them after
    its last layer; UnsupportedModelError saying why where the model has none or attnlib does not know where it is."""
    reason = head_reason(lm) or dla_reason(lm)
    if reason is not None:
        raise UnsupportedModelError(reason)
    whole = lm.seq2seq if lm.seq2seq is not None else lm.causal_lm
    assert whole is not None
    config = whole.config
    if lm.seq2seq is not None:
        stack = lm.seq2seq.get_decoder()
        final = next((getattr(stack, n) for n in ("final_layer_norm", "layer_norm") if hasattr(stack, n)), None)
        out = lm.seq2seq.get_output_embeddings()
        rows = out.weight.detach().float()
        bias = _output_bias(out)
        extra = getattr(lm.seq2seq, "final_logits_bias", None)  # BART, Marian: added after the head
        if extra is not None:
            extra = extra.detach().float().reshape(-1)
            bias = extra if bias is None else bias + extra
        if getattr(config, "scale_decoder_outputs", False):  # T5 with tied embeddings: d_model**-0.5 before the head
            rows = rows * config.d_model**-0.5
    else:
        family = family_for(lm.encoder.config)
        if family is None or family.final_norm is None:
            raise UnsupportedModelError(
                f"attnlib does not know where the final norm of '{lm.facts.model_type}' models is, which the logit lens "
                "and logit attribution (METHODS §21) read."
            )
        final = lm.encoder.get_submodule(family.final_norm)
        rows = _unembedding_rows(lm)
        bias = _output_bias(whole.get_output_embeddings())
    hidden = rows.shape[1]
    kind, gamma, beta, eps = norm_of(final, hidden)
    scale = float(getattr(whole, "logit_scale", None) or 1.0)  # Cohere: logits times logit_scale
    if scale != 1.0:
        rows = rows * scale
        bias = None if bias is None else bias * scale
    device = rows.device
    return Unembedding(
        kind,
        gamma.to(device),
        None if beta is None else beta.to(device),
        eps,
        rows,
        bias,
        getattr(config, "final_logit_softcapping", None) or None,
    )


def head_error(read: torch.Tensor, own: torch.Tensor) -> float:
    """The largest difference of the logits read here from the model's own, relative to their largest magnitude."""
    return float((read - own).abs().max() / own.abs().max().clamp(min=1e-30))


def check_head(read: torch.Tensor, own: torch.Tensor, name: str) -> None:
    """UnsupportedModelError where the head as read here does not give the model's own logits."""
    if read.shape != own.shape or head_error(read, own) > HEAD_CHECK:
        raise UnsupportedModelError(
            f"The language-model head of {name}, read as a final norm and a linear unembedding, does not reproduce the "
            "model's own logits, so the logit lens and logit attribution (METHODS §21) are not computed for it."
        )


# ------------------------------------------------------------------------------------ the lens


@dataclass(frozen=True)
class Tokens:
    """A node's top or bottom k tokens: ids, their logits and their rank change from the previous node (None: none)."""

    ids: list[int]
    logits: list[float]
    rank_change: list[int] | None


def ranks(reading: torch.Tensor, ids: torch.Tensor, ascending: torch.Tensor | None = None) -> torch.Tensor:
    """Each id's 0-based rank in a reading [V] (0: the largest logit; ties share the better rank): the number of
    logits above its own, counted in the reading sorted ascending (given, or sorted here)."""
    ordered = reading.sort().values if ascending is None else ascending
    return reading.shape[-1] - torch.searchsorted(ordered, reading[ids].contiguous(), right=True)


def lens_tokens(readings: torch.Tensor, k: int = DEFAULT_TOP) -> list[tuple[Tokens, Tokens]]:
    """Each node's (top, bottom) k tokens from its reading [nodes, V] (nodes in order, each read after the one before
    it), with rank_change = rank in the previous node's reading - rank in its own (positive: moved up)."""
    k = min(k, readings.shape[-1])
    ordered = readings.sort(-1).values
    found = []
    for index, reading in enumerate(readings):
        pairs = []
        for largest in (True, False):
            values, ids = reading.topk(k, largest=largest)
            change = None
            if index > 0:
                before = ranks(readings[index - 1], ids, ordered[index - 1])
                change = (before - ranks(reading, ids, ordered[index])).tolist()
            pairs.append(Tokens(ids.tolist(), values.tolist(), change))
        found.append((pairs[0], pairs[1]))
    return found


def extremes(values: torch.Tensor, k: int) -> tuple[tuple[list, list], tuple[list, list]]:
    """The k largest and k smallest of each row's values [..., V]: ((ids, values), (ids, values)) as (nested) lists."""
    k = min(k, values.shape[-1])
    top, bottom = values.topk(k, -1), values.topk(k, -1, largest=False)
    return (top.indices.tolist(), top.values.tolist()), (bottom.indices.tolist(), bottom.values.tolist())


def probabilities(logits: torch.Tensor, k: int) -> tuple[list[int], list[float]]:
    """The k likeliest ids of one position's logits [V] and their probabilities (softmax in float64)."""
    probs = torch.softmax(logits.double(), -1)
    best = probs.topk(min(k, probs.shape[-1]))
    return best.indices.tolist(), best.values.tolist()


def token_logit_gap(direct: torch.Tensor, token: int, versus: int | None) -> torch.Tensor:
    """Each component's DLA for a token [K] from its direct effects [K, V], or for the pair token - versus."""
    return direct[:, token] if versus is None else direct[:, token] - direct[:, versus]
