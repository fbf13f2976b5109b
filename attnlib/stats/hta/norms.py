"""LayerNorm and RMSNorm linearised at this input: their Jacobians in diagonal-minus-low-rank form, applied to
tangents or multiplied into per-token matrices."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnlib.core.families import is_linear, layer_norm_parameters, rms_norm_gamma


def _is_layer_norm(module: torch.nn.Module) -> bool:
    """torch's LayerNorm or DeBERTa's own (the same arithmetic, eps inside the root)."""
    return isinstance(module, torch.nn.LayerNorm) or type(module).__name__ == "DebertaLayerNorm"


def _layer_norm_stats(module: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(gamma / sigma [n, hidden], x-hat [n, hidden]) of a LayerNorm at x [n, hidden]: its Jacobian is
    diag(gamma / sigma)(I - 1 1^T / hidden - x-hat x-hat^T / hidden)."""
    gamma, _, eps = layer_norm_parameters(module, x.shape[-1])
    sigma = (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt()
    return gamma / sigma, (x - x.mean(-1, keepdim=True)) / sigma


@dataclass
class NormAt:
    """A LayerNorm or RMSNorm at this input, per row: its Jacobian is diag(gamma / sigma)(I - 1 1^T / hidden
    - x-hat x-hat^T / hidden), without the 1 1^T term for an RMSNorm (sigma its root mean square, x-hat = x / sigma)."""

    scale: torch.Tensor  # gamma / sigma [n, hidden]
    hat: torch.Tensor  # x-hat [n, hidden]
    centred: bool  # a LayerNorm (centres its input); False: an RMSNorm

    def at(self, index) -> NormAt:
        """The rows picked by an index of the first dimension (broadcast to the tangents they multiply)."""
        return NormAt(self.scale[index], self.hat[index], self.centred)

    def tangent(self, tangent: torch.Tensor) -> torch.Tensor:
        """The Jacobian applied to tangents [..., hidden] of rows whose stats are broadcast to them."""
        centred = tangent - tangent.mean(-1, keepdim=True) if self.centred else tangent
        return self.scale * (centred - self.hat * ((self.hat * tangent).sum(-1, keepdim=True) / tangent.shape[-1]))


def norm_at(module: torch.nn.Module, x: torch.Tensor) -> NormAt | None:
    """The LayerNorm or RMSNorm module at x [n, hidden]; None for any other module (ModernBERT's Identity). An RMSNorm
    (Llama's, Gemma's, T5's LayerNorm, whatever its class is called) is recognised by its own output at x."""
    if _is_layer_norm(module):
        return NormAt(*_layer_norm_stats(module, x), centred=True)
    if getattr(module, "weight", None) is None:
        return None
    _, _, eps = layer_norm_parameters(module, x.shape[-1])
    sigma = (x.square().mean(-1, keepdim=True) + eps).sqrt()
    at = NormAt(rms_norm_gamma(module, x.shape[-1], eps) / sigma, x / sigma, centred=False)
    with torch.no_grad():
        own = module(x).to(x.dtype)
    # float32: gamma read back through one rsqrt, and one product per coordinate
    return at if torch.allclose(at.scale * x, own, rtol=1e-5, atol=1e-6 * float(own.abs().max())) else None


def times_norm(jacobian: torch.Tensor, norm: NormAt) -> torch.Tensor:
    """M J for per-token matrices M [n, out, hidden] (in place), J the LayerNorm's or RMSNorm's Jacobian per token:
    diag(gamma / sigma)(I - 1 1^T / hidden - x-hat x-hat^T / hidden), without the 1 1^T term for an RMSNorm."""
    jacobian.mul_(norm.scale[:, None, :])
    projected = (jacobian @ norm.hat[:, :, None]) * (norm.hat[:, None, :] / norm.hat.shape[-1])
    jacobian -= jacobian.mean(-1, keepdim=True) + projected if norm.centred else projected
    return jacobian


def norm_times(norm: NormAt, jacobian: torch.Tensor) -> torch.Tensor:
    """J M for per-token matrices M [n, hidden, in] (in place), J as in times_norm."""
    projected = norm.hat[:, :, None] * ((norm.hat[:, None, :] / norm.hat.shape[-1]) @ jacobian)
    jacobian -= jacobian.mean(1, keepdim=True) + projected if norm.centred else projected
    return jacobian.mul_(norm.scale[:, :, None])


def is_norm(module: torch.nn.Module) -> bool:
    """A LayerNorm, or a module that may be an RMSNorm (a weight of one dimension, not a linear map): norm_at
    tells by its output."""
    weight = getattr(module, "weight", None)
    return _is_layer_norm(module) or (isinstance(weight, torch.Tensor) and weight.dim() == 1 and not is_linear(module))
