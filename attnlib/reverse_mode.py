"""Plain reverse-mode autograd graphs of every head's output: the reference that exact attribution is compared with.

Independent of attnlib.attribution: the encoder runs as transformers wrote it, with hooks that make the
differentiated tensors leaves (the embedding output e0, and each self-attention module's input) and record o(l).
Used by tests/test_attribution.py and benchmarks/bench_hta.py (so it lives here: tests do not import benchmarks).
"""

from __future__ import annotations

import torch


def head_output_modules(encoder):
    """Per layer: the module whose output (BERT) or whose input (DistilBERT out_lin) holds the heads' outputs."""
    if hasattr(encoder, "transformer"):
        return [(layer.attention.out_lin, "input") for layer in encoder.transformer.layer]
    return [(layer.attention.self, "output") for layer in encoder.encoder.layer]


def self_attention_modules(encoder):
    """Per layer: the self-attention module whose input is the layer's input e(l-1)."""
    if hasattr(encoder, "transformer"):
        return [layer.attention for layer in encoder.transformer.layer]
    return [layer.attention.self for layer in encoder.encoder.layer]


def record(module, where, store):
    """A hook that appends the heads' outputs o(l) [1, n, hidden] to store."""
    if where == "input":
        return module.register_forward_pre_hook(lambda _m, args: store.append(args[0]))
    return module.register_forward_hook(lambda _m, _a, out: store.append(out[0]))


def reverse_graphs(lm, enc):
    """One forward pass with graph for each contribution: (per-layer head outputs, the tensor to differentiate by)."""
    encoder = lm.encoder
    batch = {"input_ids": torch.tensor([enc.input_ids]), "attention_mask": torch.ones(1, enc.n, dtype=torch.long)}
    if enc.token_type_ids is not None:
        batch["token_type_ids"] = torch.tensor([enc.token_type_ids])
    leaf = {}

    def swap(_m, _a, out):
        leaf["e0"] = out.detach().requires_grad_(True)
        return leaf["e0"]

    outs: list[torch.Tensor] = []
    hooks = [encoder.embeddings.register_forward_hook(swap)]
    hooks += [record(m, w, outs) for m, w in head_output_modules(encoder)]
    try:
        encoder(**batch)
    finally:
        for h in hooks:
            h.remove()
    leaves: list[torch.Tensor] = []
    outs_prev: list[torch.Tensor] = []

    def make_leaf(_m, args, kwargs):
        x = (args[0] if args else kwargs["hidden_states"]).detach().requires_grad_(True)
        leaves.append(x)
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    hooks = [m.register_forward_pre_hook(make_leaf, with_kwargs=True) for m in self_attention_modules(encoder)]
    hooks += [record(m, w, outs_prev) for m, w in head_output_modules(encoder)]
    encoder(**batch)
    for h in hooks:
        h.remove()
    return (outs, [leaf["e0"]] * len(outs)), (outs_prev, leaves)
