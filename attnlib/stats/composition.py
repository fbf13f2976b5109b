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


def _factor(gram: torch.Tensor) -> torch.Tensor:
    """L with L L^T = gram for Gram matrices [..., m, m]: Cholesky, or where one is singular the symmetric root
    (eigenvalues clipped at 0)."""
    factor, info = torch.linalg.cholesky_ex(gram)
    singular = info != 0
    if bool(singular.any()):
        values, vectors = torch.linalg.eigh(gram[singular])
        factor[singular] = (vectors * values.clamp(min=0).sqrt()[..., None, :]) @ vectors.transpose(-1, -2)
    return factor


@dataclass(frozen=True)
class Composition:
    """Q, K and V composition [layers, heads, layers, heads] (sender, receiver): 0 where the receiver's layer is not
    later than the sender's."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray


def composition_scores(weights: HeadWeights) -> Composition:
    """§22's scores ||W_OV^h1 W^h2||_F / (||W_OV^h1||_F ||W^h2||_F), W^h2 = W_QK (Q), W_QK^T (K) or W_OV (V), of every
    sender h1 and later receiver h2: the products in float32, the d_h x d_h Gram matrices' factors in float64."""
    q, k, v, o = (torch.as_tensor(x, dtype=torch.float32) for x in (weights.queries, weights.keys, weights.values,
                                                                      weights.outputs))  # fmt: skip
    L, H, d, dh = q.shape

    def factor(x: torch.Tensor) -> torch.Tensor:  # of x^T x, for x [.., d, d_h]
        return _factor((x.transpose(-1, -2) @ x).double()).float()

    # ||V1 O1 Y||_F = ||L_V1^T O1 Y||_F and ||Z X Y^T||_F = ||Z X L_Y||_F, L L^T the Gram matrices' factors
    senders = factor(v).transpose(-1, -2) @ o  # [L, H, d_h, d]
    receivers = torch.stack([q @ factor(k), k @ factor(q), v @ factor(o.transpose(-1, -2))])  # [3, L, H, d, d_h]
    sender_norm = torch.linalg.vector_norm(senders, dim=(-1, -2)).double()  # ||W_OV^h1||_F [L, H]
    receiver_norm = torch.linalg.vector_norm(receivers, dim=(-1, -2)).double()  # ||W_QK^h2||_F, ||W_OV^h2||_F
    # every receiver of the three kinds side by side: [d, (layer, kind, head, d_h)]
    right = receivers.permute(3, 1, 0, 2, 4).reshape(d, L * len(KINDS) * H * dh)
    table = torch.zeros(len(KINDS), L, H, L, H, dtype=torch.float64)
    width = len(KINDS) * H * dh
    for l1 in range(L - 1):
        product = (senders[l1].reshape(H * dh, d) @ right[:, (l1 + 1) * width :]).view(H, dh, -1, len(KINDS), H, dh)
        table[:, l1, :, l1 + 1 :] = torch.linalg.vector_norm(product, dim=(1, 5)).permute(2, 0, 1, 3).double()
    denominator = sender_norm[None, :, :, None, None] * receiver_norm[:, None, None]
    scores = (table / torch.where(denominator > 0, denominator, 1)).numpy()
    return Composition(scores[0], scores[1], scores[2])
