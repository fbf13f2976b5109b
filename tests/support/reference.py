"""Independent computations the library is checked against: plain reverse-mode autograd (attribution) and value-weighted
norms from hooks on a model's own modules."""

from __future__ import annotations

import numpy as np
import torch

from attnlib.core.families import layout
from attnlib.stats.reverse_mode import reverse_graphs


def _normalised_norms(grads: np.ndarray) -> np.ndarray:
    """grads [j, head_dim, i, hidden] of one head -> ||d o_j / d e_i||_F / sum over i, as [j, i]."""
    norms = np.sqrt((grads.astype(np.float64) ** 2).sum(axis=(1, 3)))
    return norms / norms.sum(-1, keepdims=True)


def reverse_mode_reference(lm, enc, heads):
    """Plain reverse mode, one backward pass per output coordinate o(l,h)_j[c], for the given (layer, head) pairs.


    Returns (input, previous), each [len(heads), query j, input token i].
    """
    d = lm.facts.head_dim
    (outputs, e0), (outputs_prev, leaves) = reverse_graphs(lm, enc)

    def contributions(outs, wrt):
        result = []
        for layer, head in heads:
            grads = np.zeros((enc.n, d, enc.n, lm.facts.hidden_size), np.float32)
            for j in range(enc.n):
                for c in range(d):
                    (g,) = torch.autograd.grad(outs[layer][0, j, head * d + c], wrt[layer], retain_graph=True)
                    grads[j, c] = g[0].numpy()
            result.append(_normalised_norms(grads))
        return np.stack(result)

    return contributions(outputs, e0), contributions(outputs_prev, leaves)


def independent_norms(lm, text_a: str, text_b: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(attentions, value norms [L, H, n], rows of ||A_ij f_h(x_j)|| normalised to sum 1) of a BERT/RoBERTa model,
    from hooks on its value projections and the output projection's weight, norms taken of the full vectors."""
    import torch

    named = dict(lm.encoder.named_modules())
    values = [m for name, m in named.items() if name.endswith("attention.self.value")]
    dense = [m for name, m in named.items() if name.endswith("attention.output.dense")]
    captured: dict[int, np.ndarray] = {}
    hooks = [
        m.register_forward_hook(lambda _m, _i, out, l=l: captured.__setitem__(l, out[0].double().numpy()))
        for l, m in enumerate(values)
    ]
    try:
        with torch.no_grad():
            out = lm.encoder(**lm.tokenizer(text_a, text_b, return_tensors="pt"), output_attentions=True)
    finally:
        for h in hooks:
            h.remove()
    attn = torch.stack(out.attentions)[:, 0].double().numpy()  # [L, H, n, n]
    n_layers, n_heads, n, _ = attn.shape
    d = captured[0].shape[-1] // n_heads
    vnorm = np.zeros((n_layers, n_heads, n))
    weighted = np.zeros_like(attn)
    for l in range(n_layers):
        w_out = dense[l].weight.detach().double().numpy()  # [hidden_out, hidden_in]: y = x @ W.T
        for h in range(n_heads):
            f = captured[l][:, h * d : (h + 1) * d] @ w_out[:, h * d : (h + 1) * d].T  # f_h(x_j): [n, hidden]
            vnorm[l, h] = np.linalg.norm(f, axis=-1)
            weighted[l, h] = np.linalg.norm(attn[l, h][:, :, None] * f[None], axis=-1)  # ||A_ij f_h(x_j)||
    return attn, vnorm, weighted / weighted.sum(-1, keepdims=True)


def _reference_vectors(lm, result) -> np.ndarray:
    """f_h(x_j) [layers, heads, n, hidden] recomputed with plain torch from the model's value and output weights."""
    sites = layout(lm.encoder).sites
    x = torch.tensor(result.layer_inputs)
    h = lm.facts.n_heads
    out = []
    for l, (v, o) in enumerate((s.projections[2], s.output) for s in sites):
        v_all = x[l] @ v.weight.T + v.bias  # [n, hidden]
        d = v_all.shape[-1] // h
        out.append(torch.stack([v_all[:, k * d : (k + 1) * d] @ o.weight[:, k * d : (k + 1) * d].T for k in range(h)]))
    return torch.stack(out).detach().numpy()
