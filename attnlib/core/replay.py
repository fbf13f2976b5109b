"""Record every layer application's call in one clean forward pass, replay layers from any hidden state, and edit the
heads' context vectors where the attention output projection reads them; for every family of attnlib.core.families.

- `record(lm, batch)` runs the encoder once (no_grad) and keeps, per layer application, the layer's call, the
  attention block's call and the heads module's call (their arguments: masks, rotary tables, relative positions).
- `Recording.replay(hidden, start, stop)` runs layers start..stop-1 from a hidden state, with the recorded
  arguments; a batch of V variants of the recorded batch of B inputs is stacked along the batch dimension
  (variant v of input b at row v * B + b) and the recorded batch-shaped tensors are repeated to match.
- `editing_contexts(layout, edit)`: at the input of every layer application's output projection, the concatenated
  context vectors c[l, h, i] = sum_j A[l, h, i, j] v[l, h, j] ([batch, n, heads * head_dim], head h in columns
  h*d:(h+1)*d) go through edit(layer_index, c), which returns a replacement or None (unchanged).
Hooks go through attnlib.core.hooks: they fire only in the thread that made them (the app shares models between
visitors' threads) and are removed in `finally`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import torch

from attnlib.core.families import HeadsCall, Layout, Statistic, bound_arguments, layout
from attnlib.core.hooks import hooked, site_modules
from attnlib.core.hooks import served_once as served_once  # part of this module's API
from attnlib.core.hooks import this_thread_only as this_thread_only  # part of this module's API

Edit = Callable[[int, torch.Tensor], torch.Tensor | None]  # (layer index, c [batch, n, heads * d]) -> new c or None


def first_output(out):
    """A module's main output: the first element of a tuple, or the output itself."""
    return out[0] if isinstance(out, tuple) else out


@dataclass
class Call:
    """One module call of the clean pass: its arguments and its hidden-state input."""

    module: torch.nn.Module
    args: tuple
    kwargs: dict
    hidden: torch.Tensor  # [batch, n, hidden]

    @cached_property
    def _positional_names(self) -> list[str]:
        parameters = inspect.signature(self.module.forward).parameters.values()
        return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def with_hidden(
        self, x: torch.Tensor, unbatched: Sequence[str] = (), batch_heads: Sequence[str] = ()
    ) -> tuple[tuple, dict]:
        """The same arguments with the hidden input replaced by x [V * batch, n, hidden]; for V > 1 every other
        tensor whose first dimension is the recorded batch (and whose name is not in unbatched), and those named in
        batch_heads ([batch * heads, ...]: Bloom's ALiBi), repeated V times."""
        batch = self.hidden.shape[0]
        variants = x.shape[0] // batch
        if variants * batch != x.shape[0]:
            raise ValueError(f"a replayed batch must be a multiple of the recorded {batch} inputs, not {x.shape[0]}")

        def swap(value, name: str | None):
            if name in batch_heads and isinstance(value, torch.Tensor) and variants > 1:
                return value.repeat(variants, *([1] * (value.dim() - 1)))
            return _swapped(value, self.hidden, x, batch, 1 if name in unbatched else variants)

        names = self._positional_names
        args = tuple(swap(a, names[i] if i < len(names) else None) for i, a in enumerate(self.args))
        return args, {k: swap(v, k) for k, v in self.kwargs.items()}


def _swapped(value, hidden: torch.Tensor, x: torch.Tensor, batch: int, repeats: int):
    """x for the recorded hidden input; a batch-shaped tensor (or a tuple of them) repeated `repeats` times.

    A module-level function: a nested one that calls itself is a reference cycle, which kept every replayed layer's
    input alive until the garbage collector ran (25 MB per replay of a long batch)."""
    if value is hidden:
        return x
    if repeats > 1:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
            return value.repeat(repeats, *([1] * (value.dim() - 1)))
        if isinstance(value, tuple):
            return tuple(_swapped(v, hidden, x, batch, repeats) for v in value)
    return value


def _hidden_of(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@dataclass
class Recording:
    """Every layer application of one clean forward pass of a batch (B inputs, padded to n)."""

    layout: Layout
    encoder: torch.nn.Module
    input_mask: torch.Tensor  # [B, n]: the 2-D attention mask, 1 for a token, 0 for padding
    layers: list[Call] = field(default_factory=list)  # per application: the layer's call; .hidden = its input e(l)
    blocks: list[Call] = field(default_factory=list)  # per application: the attention block's call
    heads: list[HeadsCall] = field(default_factory=list)  # per application: the heads module's call, by name
    outputs: list[torch.Tensor] = field(default_factory=list)  # per application: the layer's own output
    last_hidden_state: torch.Tensor | None = None  # [B, n, hidden]: the encoder's output (after a final norm)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def batch_size(self) -> int:
        return self.input_mask.shape[0]

    def hidden_states(self) -> list[torch.Tensor]:
        """The input of every layer, then the last layer's output: n_layers + 1 tensors [B, n, hidden]."""
        return [c.hidden for c in self.layers] + [self._after_layer(self.n_layers - 1, self.outputs[-1])]

    def _after_layer(self, index: int, output: torch.Tensor, layer_input: torch.Tensor | None = None) -> torch.Tensor:
        """A layer's output as the next layer sees it (DeBERTa-v2's convolution follows its first layer)."""
        conv = self.layout.after_first_layer
        if index != 0 or conv is None:
            return output
        x = self.layers[0].hidden if layer_input is None else layer_input
        mask = self.input_mask.repeat(output.shape[0] // self.batch_size, 1)
        return conv(x, output, mask)

    def replay(self, hidden: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Run layers start..stop-1 (stop: every layer) from hidden [V * B, n, hidden] (the input of layer start) and
        return the output of layer stop-1 as the next layer sees it, [V * B, n, hidden]; no final norm."""
        stop = self.n_layers if stop is None else stop
        if not 0 <= start <= stop <= self.n_layers:
            raise ValueError(f"layers {start}..{stop} are not within 0..{self.n_layers}")
        h = hidden
        for index in range(start, stop):
            call = self.layers[index]
            args, kwargs = call.with_hidden(h, self.layout.family.unbatched, self.layout.family.batch_heads)
            h = self._after_layer(index, first_output(call.module(*args, **kwargs)), h)
        return h

    def replay_block(self, index: int, layer_input: torch.Tensor) -> torch.Tensor:
        """Layer `index`'s attention block alone from its layer input [V * B, n, hidden] (pre-LN families apply their
        LayerNorm first), returning the block module's main output; hook its output projection to see c."""
        site = self.layout.sites[index]
        x = layer_input if self.layout.family.post_layer_norm else site.norm(layer_input)
        family = self.layout.family
        args, kwargs = self.blocks[index].with_hidden(x, family.unbatched, family.batch_heads)
        return first_output(site.block(*args, **kwargs))

    def final(self, hidden: torch.Tensor) -> torch.Tensor:
        """The encoder's output from its last layer's output (ModernBERT's final LayerNorm; nothing elsewhere)."""
        norm = self.layout.final_norm
        return hidden if norm is None else norm(hidden)


def record(lm, batch: dict, statistic: Statistic = "hta") -> Recording:
    """One clean forward pass of the model inputs `batch` (no_grad), recording every layer application's calls.

    UnsupportedModelError (naming `statistic`) for a family whose layers attnlib does not know."""
    lay = layout(lm.encoder, statistic)
    mask = batch.get("attention_mask")
    ids = batch["input_ids"]
    rec = Recording(lay, lm.encoder, torch.ones_like(ids) if mask is None else mask)

    def on_layer(module, args, kwargs):
        rec.layers.append(Call(module, args, dict(kwargs), _hidden_of(args, kwargs)))

    def on_block(module, args, kwargs):
        rec.blocks.append(Call(module, args, dict(kwargs), _hidden_of(args, kwargs)))

    def on_heads(module, args, kwargs):
        rec.heads.append(HeadsCall(module, bound_arguments(module, args, kwargs)))

    def on_layer_output(_module, _args, out):
        rec.outputs.append(first_output(out))

    with (
        hooked(site_modules(lay, "layer"), on_layer, with_kwargs=True),
        hooked(site_modules(lay, "block"), on_block, with_kwargs=True),
        hooked(site_modules(lay, "heads"), on_heads, with_kwargs=True),
        hooked(site_modules(lay, "layer"), on_layer_output, after=True),
        torch.no_grad(),
    ):
        # a decoder's key-value cache would be passed to every layer and grow with each replay of it
        cache = {"use_cache": False} if lm.facts.causal else {}
        out = lm.encoder(**batch, **cache)
    rec.last_hidden_state = out.last_hidden_state
    if not len(rec.layers) == len(rec.blocks) == len(rec.heads) == len(lay.sites):
        raise RuntimeError(
            f"expected {len(lay.sites)} layer applications, recorded {len(rec.layers)} layers, "
            f"{len(rec.blocks)} attention blocks and {len(rec.heads)} heads modules"
        )
    return rec


@contextlib.contextmanager
def editing_contexts(lay: Layout, edit: Edit, layers: Sequence[int] | None = None) -> Iterator[None]:
    """Within the context, every layer application's context vectors c [batch, n, heads * head_dim] pass through
    edit(layer_index, c) at the input of its attention output projection (None keeps c).

    `layers`: the applications the forward passes run, in order (default all; a replay from layer `start` passes
    range(start, stop)). A module shared by several applications (ALBERT) maps its k-th call to the k-th of its
    applications in `layers`, cyclically, so one context can serve several passes over the same layers."""
    order = list(range(len(lay.sites))) if layers is None else list(layers)
    applications: dict[torch.nn.Module, list[int]] = {}
    for index in order:
        applications.setdefault(lay.sites[index].output, []).append(index)
    calls = dict.fromkeys(applications, 0)

    def hook(module, args):
        indices = applications[module]
        index = indices[calls[module] % len(indices)]
        calls[module] += 1
        new = edit(index, args[0])
        return None if new is None else (new, *args[1:])

    with hooked(applications, hook):
        yield


@contextlib.contextmanager
def captured_contexts(lay: Layout, layers: Sequence[int] | None = None) -> Iterator[list[tuple[int, torch.Tensor]]]:
    """Collect (layer index, c [batch, n, heads * head_dim]) of every application, in call order, unchanged."""
    seen: list[tuple[int, torch.Tensor]] = []

    def keep(index: int, c: torch.Tensor) -> None:
        seen.append((index, c))

    with editing_contexts(lay, keep, layers):
        yield seen
