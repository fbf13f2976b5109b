"""Plain reverse-mode autograd graphs of every head's output: the reference that exact attribution is compared with.

Independent of attnlib.stats.hta and attnlib.core.replay: the encoder runs as transformers wrote it, with
hooks (attnlib.core.hooks) that make the differentiated tensors leaves (the first layer's input e0 = hidden_states[0],
or each layer's input e(l-1)) and record o(l), the input of each layer application's attention output projection.
Only attnlib.core.families says where those modules are. Used by the tests and benchmarks/bench_hta.py (so it lives here: tests do not import benchmarks).
"""

from __future__ import annotations

import torch

from attnlib.core.families import layout
from attnlib.core.hooks import hooked, site_modules


def _as_leaf(args: tuple, kwargs: dict, store: list) -> tuple[tuple, dict]:
    """The call's arguments with its hidden-state input replaced by a detached leaf that requires grad (kept)."""
    x = (args[0] if args else kwargs["hidden_states"]).detach().requires_grad_(True)
    store.append(x)
    return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})


def _graph(lm, batch: dict, every_layer: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One forward pass with graph: (o(l) [1, n, hidden] per layer, the leaves: e0 once, or every layer's input)."""
    lay = layout(lm.encoder, "hta")
    leaves: list[torch.Tensor] = []
    outs: list[torch.Tensor] = []
    first_input: list[torch.Tensor] = []

    def make_leaf(_m, args, kwargs):
        if every_layer or not leaves:  # ALBERT calls its one layer module for every layer: only the first call's input
            first_input.append(args[0] if args else kwargs["hidden_states"])
            return _as_leaf(args, kwargs, leaves)
        return None

    def e0_for_the_convolution(_m, args):  # DeBERTa-v2's ConvLayer also reads the first layer's input
        return (leaves[0], *args[1:]) if args[0] is first_input[0] else None

    def keep_output_input(_m, args):
        outs.append(args[0])

    convolution = [] if lay.after_first_layer is None else [lay.after_first_layer]
    with (
        hooked(site_modules(lay, "layer"), make_leaf, with_kwargs=True),
        hooked(convolution, e0_for_the_convolution),
        hooked(site_modules(lay, "output"), keep_output_input),
        torch.enable_grad(),
    ):
        lm.encoder(**batch)
    return outs, leaves if every_layer else leaves * len(outs)


def reverse_graphs(lm, enc):
    """One forward pass with graph for each contribution: (per-layer head outputs, the tensor to differentiate by)."""
    batch = {"input_ids": torch.tensor([enc.input_ids]), "attention_mask": torch.ones(1, enc.n, dtype=torch.long)}
    if enc.token_type_ids is not None:
        batch["token_type_ids"] = torch.tensor([enc.token_type_ids])
    return _graph(lm, batch, every_layer=False), _graph(lm, batch, every_layer=True)
