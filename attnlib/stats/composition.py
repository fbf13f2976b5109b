"""Q-, K- and V-composition scores between every earlier and later head (METHODS §22; Elhage et al. 2021,
TransformerLens's `all_composition_scores`), from the heads' thin factors.

For W_A = V1 O1 (sender: d x d_h times d_h x d) and W_B = X Y^T (receiver), ||W_A W_B||_F^2 = ||R1 O1 X S||_F^2 with
R1 = (V1^T V1)^(1/2) and S = (Y^T Y)^(1/2), each d_h x d_h; so every pair's score is one d_h x d x d_h product, and the
products of a sender layer with every later receiver are one matrix product. No d x d matrix is formed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnlib.core.ov_circuit import HeadWeights

KINDS = ("q", "k", "v")


def _root(gram: torch.Tensor) -> torch.Tensor:
    """The symmetric square root of Gram matrices [..., m, m] (eigenvalues clipped at 0)."""
    values, vectors = torch.linalg.eigh(gram)
    return (vectors * values.clamp(min=0).sqrt()[..., None, :]) @ vectors.transpose(-1, -2)


@dataclass(frozen=True)
class Composition:
    """Q, K and V composition [layers, heads, layers, heads] (sender, receiver): 0 where the receiver's layer is not
    later than the sender's."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray


def composition_scores(weights: HeadWeights, dtype: torch.dtype = torch.float32) -> Composition:
    """§22's scores ||W_OV^h1 W^h2||_F / (||W_OV^h1||_F ||W^h2||_F), W^h2 = W_QK (Q), W_QK^T (K) or W_OV (V), of every
    sender h1 and later receiver h2; the big products in `dtype` (the roots and norms in float64)."""
    q, k, v, o = (torch.as_tensor(x, dtype=torch.float64) for x in (weights.queries, weights.keys, weights.values,
                                                                      weights.outputs))  # fmt: skip
    L, H, d, dh = q.shape
    gram = lambda x: x.transpose(-1, -2) @ x  # noqa: E731  [.., d, d_h] -> [.., d_h, d_h]
    senders = _root(gram(v)) @ o  # R1 O1: [L, H, d_h, d]
    receivers = {
        "q": q @ _root(gram(k)),  # Q2 (K2^T K2)^(1/2)
        "k": k @ _root(gram(q)),
        "v": v @ _root(o @ o.transpose(-1, -2)),  # V2 (O2 O2^T)^(1/2)
    }
    sender_norm = senders.square().sum((-1, -2)).sqrt()  # ||W_OV||_F [L, H]
    out = {}
    for kind, right in receivers.items():
        right_norm = right.square().sum((-1, -2)).sqrt()  # ||W_QK||_F (or ||W_OV||_F) [L, H]
        table = torch.zeros(L, H, L, H, dtype=torch.float64)
        flat_right = right.to(dtype).permute(2, 0, 1, 3).reshape(d, L * H * dh)  # [d, (layer, head, d_h)]
        for l1 in range(L - 1):
            left = senders[l1].to(dtype).reshape(H * dh, d)
            later = flat_right[:, (l1 + 1) * H * dh :]
            product = (left @ later).view(H, dh, L - l1 - 1, H, dh)
            table[l1, :, l1 + 1 :] = product.double().square().sum((1, 4)).sqrt()
        denominator = sender_norm[:, :, None, None] * right_norm[None, None]
        out[kind] = (table / torch.where(denominator > 0, denominator, 1)).numpy()
    return Composition(out["q"], out["k"], out["v"])
