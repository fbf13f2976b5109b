"""The weights of every head's OV circuit (METHODS §20's copying score): the input embedding W_E, each head's value
projection W_V^h (its key-value group's; rows scaled by the gamma of the norm before the layer's attention), its slice
W_O^h of the output projection and the unembedding W_U (rows scaled by the final norm's gamma); LayerNorm models
centred as TransformerLens's weight processing does; biases left out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnlib.core.families import (
    LayerSite,
    Layout,
    UnsupportedModelError,
    layer_norm_parameters,
    layout,
    linear_weight,
    rms_norm_gamma,
)
from attnlib.core.model import LoadedModel


@dataclass(frozen=True)
class OVWeights:
    """W_U W_E [d, d] and every head's W_V^h [layers, heads, d, d_h] and W_O^h [layers, heads, d_h, d] (float64)."""

    circuit: np.ndarray  # W_U W_E: the d x d middle of W_O^h W_U W_E W_V^h
    values: np.ndarray
    outputs: np.ndarray


def copying_reason(lm: LoadedModel) -> str | None:
    """Why the copying score is not defined for this model, in words; None when it is."""
    if lm.facts.kind == "encoder-decoder":
        return (
            "The copying score (METHODS §20) reads the unembedding that follows a decoder's last norm; this "
            "encoder-decoder's encoder, whose heads are scored, has no linear unembedding after its last norm."
        )
    if not lm.facts.causal:
        return (
            "The copying score (METHODS §20) reads the unembedding that follows a decoder's last norm; an encoder's "
            "masked-LM head puts a dense layer and a LayerNorm between its last layer and the vocabulary, so it has no "
            "linear unembedding after its last norm."
        )
    if lm.causal_lm is None or lm.causal_lm.get_output_embeddings() is None:
        return (
            "The copying score (METHODS §20) reads the decoder's language-model head, and this checkpoint has no "
            "trained one (a fine-tuned classifier, or a base model saved without its head)."
        )
    try:
        lay = layout(lm.encoder, "ablation")
    except UnsupportedModelError as exc:
        return f"The copying score (METHODS §20) needs the model's value and output projections: {exc}"
    if lay.final_norm is None:
        return "The copying score (METHODS §20) needs the decoder's final norm, which attnlib does not know for it."
    return None


def _is_layer_norm(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.LayerNorm)


def _gamma(module: torch.nn.Module, hidden: int) -> torch.Tensor:
    """The per-coordinate weight of a LayerNorm or RMSNorm (Gemma's 1 + w read off its own output)."""
    gamma, _, eps = layer_norm_parameters(module, hidden)
    return gamma.float() if _is_layer_norm(module) else rms_norm_gamma(module, hidden, eps)


def _value_projection(lay: Layout, site: LayerSite, hidden: int) -> torch.Tensor:
    """W_V^h of every query head [heads, d, d_h]: the identity pushed through the projection(s), less their output at
    zero (the bias), split by the family's own split (a grouped-query head reads its key-value group's)."""
    weight = linear_weight(site.output)
    x = torch.eye(hidden, dtype=weight.dtype, device=weight.device)[None]  # [1, d, d]: one row per input dimension
    zero = torch.zeros(1, 1, hidden, dtype=weight.dtype, device=weight.device)
    with torch.no_grad():
        outputs = [p(x) - p(zero) for p in site.projections]
        _, _, v = lay.family.split(site.heads, outputs, lay.head_dim)  # [1, heads, d, d_h]
    return v[0].double()


def _embedding(lm: LoadedModel) -> torch.Tensor:
    """W_E [V, d] as the first layer reads it (OPT's projection into the model's width applied where it has one)."""
    weight = lm.encoder.get_input_embeddings().weight.detach()
    project_in = getattr(getattr(lm.encoder, "decoder", None), "project_in", None)
    with torch.no_grad():
        return (weight if project_in is None else project_in(weight)).double()


def _unembedding(lm: LoadedModel) -> torch.Tensor:
    """W_U [d, V] as the LM head reads the final norm's output (OPT's projection out of the model's width applied)."""
    assert lm.causal_lm is not None
    weight = lm.causal_lm.get_output_embeddings().weight.detach().double()  # [V, d_out]
    project_out = getattr(getattr(lm.encoder, "decoder", None), "project_out", None)
    if project_out is not None:  # logits = W (P h): W_U = (W P)^T
        weight = weight @ linear_weight(project_out).detach().double()
    return weight.T


def ov_weights(lm: LoadedModel) -> OVWeights:
    """Every head's OV-circuit weights (§20); UnsupportedModelError saying why where the copying score is undefined."""
    reason = copying_reason(lm)
    if reason is not None:
        raise UnsupportedModelError(reason)
    lay = layout(lm.encoder, "ablation")
    assert lay.final_norm is not None
    embed, unembed = _embedding(lm), _unembedding(lm)
    hidden = embed.shape[1]
    centred = _is_layer_norm(lay.final_norm)
    if centred:  # TransformerLens: W_E and W_O write mean-free vectors, W_U reads logits mean-free over the vocabulary
        embed = embed - embed.mean(1, keepdim=True)
        unembed = unembed - unembed.mean(1, keepdim=True)
    unembed = _gamma(lay.final_norm, hidden).double()[:, None] * unembed
    circuit = unembed @ embed  # [d, d]
    values, outputs = [], []
    for site in lay.sites:
        v = _value_projection(lay, site, hidden) * _gamma(site.norm, hidden).double()[None, :, None]
        o = linear_weight(site.output).detach().double().T.reshape(lay.n_heads, lay.head_dim, -1)  # [heads, d_h, d]
        if centred:
            o = o - o.mean(-1, keepdim=True)
        values.append(v)
        outputs.append(o)
    return OVWeights(circuit.cpu().numpy(), torch.stack(values).cpu().numpy(), torch.stack(outputs).cpu().numpy())
