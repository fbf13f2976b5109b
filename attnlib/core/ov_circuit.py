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
    is_linear,
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


def _projected_identity(projection: torch.nn.Module, hidden: int) -> torch.Tensor:
    """[1, d, out]: what the projection adds to each unit input vector (its weight read directly where it is a Linear
    or GPT-2's Conv1D; else the identity pushed through it, less its output at zero: the bias)."""
    if is_linear(projection):
        return linear_weight(projection).detach().T[None]
    weight = next(projection.parameters())
    x = torch.eye(hidden, dtype=weight.dtype, device=weight.device)[None]  # one row per input dimension
    return projection(x) - projection(torch.zeros_like(x[:, :1]))


def _head_projections(lay: Layout, site: LayerSite, hidden: int) -> tuple[torch.Tensor, ...]:
    """W_Q^h, W_K^h, W_V^h of every query head, each [heads, d, d_h]: the projection(s) applied to the identity without
    their bias, split by the family's own split (a grouped-query head reads its key-value group's); no rotary, no
    query/key norms."""
    with torch.no_grad():
        outputs = [_projected_identity(p, hidden) for p in site.projections]
        qkv = lay.family.split(site.heads, outputs, lay.head_dim)  # each [1, heads, d, d_h]
    return tuple(x[0].double() for x in qkv)


def _value_projection(lay: Layout, site: LayerSite, hidden: int) -> torch.Tensor:
    """W_V^h of every query head [heads, d, d_h] (its key-value group's)."""
    return _head_projections(lay, site, hidden)[2]


def _embedding(lm: LoadedModel) -> torch.Tensor:
    """W_E [V, d] as the first layer reads it (OPT's projection into the model's width applied where it has one)."""
    weight = lm.encoder.get_input_embeddings().weight.detach()
    project_in = getattr(getattr(lm.encoder, "decoder", None), "project_in", None)
    with torch.no_grad():
        return (weight if project_in is None else project_in(weight)).float()


def _unembedding_rows(lm: LoadedModel) -> torch.Tensor:
    """W_U^T [V, d]: the LM head's rows as it reads the final norm's output (OPT's projection out applied)."""
    assert lm.causal_lm is not None
    weight = lm.causal_lm.get_output_embeddings().weight.detach().float()  # [V, d_out]
    project_out = getattr(getattr(lm.encoder, "decoder", None), "project_out", None)
    if project_out is not None:  # logits = W (P h): W_U = (W P)^T
        weight = weight @ linear_weight(project_out).detach().float()
    return weight


def vocabulary_circuit(
    embed: torch.Tensor, unembed_rows: torch.Tensor, gamma: torch.Tensor, centred: bool
) -> np.ndarray:
    """diag(gamma) W_U W_E [d, d] (float64) from W_E [V, d] and W_U^T [V, d], with TransformerLens's centring for
    LayerNorm models (W_E's rows mean-free over d, W_U's rows mean-free over V) written as rank-one corrections of the
    one V-long product (computed in float32: the one product whose cost grows with the vocabulary)."""
    circuit = (unembed_rows.T @ embed).double()  # W_U W_E
    if centred:  # (W_U - m 1^T)(W_E P) = (W_U W_E - m (1^T W_E)) P, P = I - 1 1^T / d centring each row of W_E
        m, column_sums = unembed_rows.mean(0).double(), embed.sum(0).double()  # float32 reductions (pairwise)
        circuit = circuit - torch.outer(m, column_sums)
        circuit = circuit - circuit.mean(1, keepdim=True)
    return (gamma.double()[:, None] * circuit).cpu().numpy()


def ov_weights(lm: LoadedModel) -> OVWeights:
    """Every head's OV-circuit weights (§20); UnsupportedModelError saying why where the copying score is undefined."""
    reason = copying_reason(lm)
    if reason is not None:
        raise UnsupportedModelError(reason)
    lay = layout(lm.encoder, "ablation")
    assert lay.final_norm is not None
    embed = _embedding(lm)
    hidden = embed.shape[1]
    centred = _is_layer_norm(lay.final_norm)
    with torch.no_grad():
        circuit = vocabulary_circuit(embed, _unembedding_rows(lm), _gamma(lay.final_norm, hidden), centred)
    values, outputs = [], []
    for site in lay.sites:
        v = _value_projection(lay, site, hidden) * _gamma(site.norm, hidden).double()[None, :, None]
        o = linear_weight(site.output).detach().double().T.reshape(lay.n_heads, lay.head_dim, -1)  # [heads, d_h, d]
        if centred:  # W_O^h's rows mean-free over d
            o = o - o.mean(-1, keepdim=True)
        values.append(v)
        outputs.append(o)
    return OVWeights(circuit, torch.stack(values).cpu().numpy(), torch.stack(outputs).cpu().numpy())


@dataclass(frozen=True)
class HeadWeights:
    """Every head's W_Q^h, W_K^h, W_V^h [layers, heads, d, d_h] and W_O^h [layers, heads, d_h, d] (float32, processed
    in float64), as TransformerLens's from_pretrained processes them by default (METHODS §22)."""

    queries: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    outputs: np.ndarray


def head_weights_reason(lm: LoadedModel) -> str | None:
    """Why the heads' processed weights (composition, METHODS §22) are not defined for this model; None when they are."""
    try:
        lay = layout(lm.encoder, "ablation")
    except UnsupportedModelError as exc:
        return f"Composition scores (METHODS §22) need the model's query, key, value and output projections: {exc}"
    if lay.family.post_layer_norm:
        return (
            "Composition scores (METHODS §22) fold the weight of the norm before each attention into its projections, "
            f"as TransformerLens does for pre-norm models; {lm.facts.name} normalises after attention (post-LN), so "
            "there is no such norm to fold."
        )
    return None


def head_weights(lm: LoadedModel) -> HeadWeights:
    """Every head's weights of the main stack (an encoder-decoder's encoder) with the weight of the norm before
    attention folded into the rows of W_Q, W_K, W_V (Gemma: 1 + weight) and, for LayerNorm models, W_Q, W_K, W_V's
    columns and W_O's rows centred over d; biases left out. UnsupportedModelError where not defined."""
    reason = head_weights_reason(lm)
    if reason is not None:
        raise UnsupportedModelError(reason)
    lay = layout(lm.encoder, "ablation")
    hidden = lm.facts.hidden_size
    found: list[list[torch.Tensor]] = [[], [], [], []]
    for site in lay.sites:
        gamma = _gamma(site.norm, hidden).double()[None, :, None]
        q, k, v = (x * gamma for x in _head_projections(lay, site, hidden))
        o = linear_weight(site.output).detach().double().T.reshape(lay.n_heads, lay.head_dim, -1)  # [heads, d_h, d]
        if _is_layer_norm(site.norm):
            q, k, v = (x - x.mean(1, keepdim=True) for x in (q, k, v))
            o = o - o.mean(-1, keepdim=True)
        for kept, x in zip(found, (q, k, v, o)):
            kept.append(x)
    q, k, v, o = (torch.stack([layer.float() for layer in x]).cpu().numpy() for x in found)
    return HeadWeights(q, k, v, o)
