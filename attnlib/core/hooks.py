"""Named hook sites: what a forward pass captures, and the one place where attnlib hooks a module.

After TransformerLens's `hooks()` and `run_with_cache(names_filter=...)`:

- `with hooks(lm, capture={"attn", "qk"}) as cache: lm.encoder(**batch)`: every forward pass of the block records
  what the named captures ask for into `cache`, per layer application in call order (`Capture` names them; each is
  one hook site in `SITES`, so a new capture is one new site).
- `with hooked(site_modules(layout, "output"), hook): ...`: the lower level, one hook on each module of a named site
  (or on any modules), before or after their forward; replay, attribution, ablation and reverse mode go through it.
- `with attentions_returned([module]): ...`: each call of the modules is asked for its attention weights (as if
  called with output_attentions=True); `hooks(..., graph=True)` keeps them in autograd's graph (gradient importance).
- `with served_once(module, serve): ...`: the module's forward replaced, so that one call returns a known tensor
  instead of running (a replay skips work whose result it knows).
- `with switched_attention(encoder, name): ...`: the model's attention kernel switched to a function registered with
  transformers (block-wise attention, METHODS §19).

This is the one module that touches a model's modules: every hook fires only in the thread that made it (the app
shares one model between visitors' threads), and every hook, replaced forward and switched kernel is removed or
restored in `finally`, whatever happens in the block.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast, get_args

import torch

from attnlib.core.families import HeadsCall, Layout, Part, bound_arguments, layout, unsupported_reason
from attnlib.core.model import LoadedModel

Capture = Literal["attn", "qk", "values", "layer_inputs", "norm_inputs"]
"""attn: the model's attention maps; qk: queries and keys as q.k sees them (with the scale and the logits' extra
terms; none for a family attnlib does not know); values: value vectors (and value norms); layer_inputs: each layer's
input x (the residual); norm_inputs: the input u of the LayerNorm after attention (post-LN families; Gemma 2 and 3: of
the RMSNorm of the attention output). Every METHODS §11-13 map of a batch at once is a statistic made from values,
layer_inputs and norm_inputs (runner.run_encoded's batch_maps), not a capture."""

CAPTURES: tuple[Capture, ...] = get_args(Capture)
ATTENTION: frozenset[Capture] = frozenset({"attn"})
NORMS: frozenset[Capture] = frozenset({"values", "layer_inputs", "norm_inputs"})  # what METHODS §11-12 read

Site = Literal[
    "layer", "block", "heads", "output", "norm", "attention_norm"
]  # a layer application's modules (families.LayerSite)


class Capturing(Protocol):
    """Something a forward pass is run for (an accumulator, a report part), which says what that pass captures."""

    @property
    def captures(self) -> frozenset[Capture]: ...


def capture_set(names: Iterable[str]) -> frozenset[Capture]:
    """The named captures; ValueError naming an unknown one."""
    wanted = tuple(names)
    for name in wanted:
        if name not in CAPTURES:
            raise ValueError(f"unknown capture {name!r}: one of {', '.join(CAPTURES)}")
    return cast(frozenset[Capture], frozenset(wanted))


def captures_of(parts: Iterable[Capturing]) -> frozenset[Capture]:
    """What a pass run for all these parts captures: the union of theirs."""
    return capture_set(name for part in parts for name in part.captures)


# ---------------------------------------------------------------------------------------------- the lower level


def this_thread_only(hook: Callable) -> Callable:
    """A module hook that fires only for forward passes of the thread that made it.

    The app shares one model between its visitors' threads: without this, a hook registered for one visitor's
    run would also record the forward passes that other visitors make at the same time."""
    owner = threading.get_ident()

    def hook_in_owner_thread(*args, **kwargs):
        return hook(*args, **kwargs) if threading.get_ident() == owner else None

    return hook_in_owner_thread


def site_modules(lay: Layout, site: Site, layers: Iterable[int] | None = None) -> list[torch.nn.Module]:
    """The modules at a named site of these layer applications (default every one), each once, in order (ALBERT's
    applications share one module)."""
    indices = range(len(lay.sites)) if layers is None else layers
    return list(dict.fromkeys(getattr(lay.sites[i], site) for i in indices))


@contextlib.contextmanager
def hooked(
    modules: Iterable[torch.nn.Module], hook: Callable, *, after: bool = False, with_kwargs: bool = False
) -> Iterator[None]:
    """Within the context, `hook` runs before (or `after`) every forward of each module (once per module however
    often it is listed), in this thread only, as torch's forward (pre-)hooks do: a hook before may return new
    arguments ((args, kwargs) with_kwargs), one after a new output. Every hook is removed in `finally`."""
    handles = []
    in_this_thread = this_thread_only(hook)
    try:
        for module in dict.fromkeys(modules):
            if after:
                handles.append(module.register_forward_hook(in_this_thread, with_kwargs=with_kwargs))
            else:
                handles.append(module.register_forward_pre_hook(in_this_thread, with_kwargs=with_kwargs))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def attentions_returned(modules: Iterable[torch.nn.Module]) -> Iterator[None]:
    """Within the context, every call of these modules in this thread is asked for its attention weights, as a call
    with output_attentions=True is (transformers returns them only when asked, and only with eager attention)."""

    def ask(module, args, kwargs):  # the flag by keyword, or in its place where the caller passes it by position
        names = list(inspect.signature(module.forward).parameters)
        place = names.index("output_attentions") if "output_attentions" in names else None
        if place is not None and place < len(args):
            return (*args[:place], True, *args[place + 1 :]), kwargs
        return args, {**kwargs, "output_attentions": True}

    with hooked(modules, ask, with_kwargs=True):
        yield


class _ServedModule:
    """A module's forward that, in a thread with something to serve, returns it once instead of running."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.own_forward = module.__dict__.get("forward")  # an instance's own forward (accelerate's), kept
        self.run = module.forward
        self.serving: dict[int, Callable[[torch.Tensor], torch.Tensor | None]] = {}
        self.contexts = 0

    def __call__(self, x: torch.Tensor, *args, **kwargs):
        thread = threading.get_ident()
        serve = self.serving.get(thread)
        out = None if serve is None else serve(x)
        if out is None:
            return self.run(x, *args, **kwargs)
        del self.serving[thread]
        return out


_SERVED: dict[torch.nn.Module, _ServedModule] = {}
_SERVED_LOCK = threading.Lock()


@contextlib.contextmanager
def served_once(module: torch.nn.Module, serve: Callable[[torch.Tensor], torch.Tensor | None]) -> Iterator[None]:
    """Within the context, the first call of `module` in this thread for which serve(its input) gives a tensor
    returns that tensor without running the module (a replay skips work whose result it knows); every other call,
    and every call of another thread, runs as usual. The module's forward is restored in `finally`."""
    thread = threading.get_ident()
    with _SERVED_LOCK:
        served = _SERVED.get(module)
        if served is None:
            served = _SERVED[module] = _ServedModule(module)
            module.forward = served
        served.serving[thread] = serve
        served.contexts += 1
    try:
        yield
    finally:
        with _SERVED_LOCK:
            served.serving.pop(thread, None)
            served.contexts -= 1
            if served.contexts == 0:
                del _SERVED[module]
                if served.own_forward is None:
                    del module.forward
                else:
                    module.forward = served.own_forward


def attention_configs(encoder: torch.nn.Module) -> list:
    """Every distinct config the model's modules read their attention implementation from."""
    found = {
        id(m.config): m.config for m in encoder.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")
    }
    return list(found.values())


_SWITCH_LOCK = threading.Lock()
_SWITCHED: dict[int, list] = {}  # id(config) -> [config, its implementation before the first switch, blocks using it]


@contextlib.contextmanager
def switched_attention(encoder: torch.nn.Module, name: str) -> Iterator[None]:
    """Within the context, the model's configs name the attention function `name` (registered with transformers'
    AttentionInterface) until the last context on them ends, when each is restored (threads of the app share a model:
    the function must compute eager attention for other threads' passes meanwhile). The internal attribute is set, not
    the property, which would also overwrite sub-configs restored before their parent."""
    configs = attention_configs(encoder)
    with _SWITCH_LOCK:
        for c in configs:
            entry = _SWITCHED.setdefault(id(c), [c, c._attn_implementation_internal, 0])
            entry[2] += 1
        for c in configs:
            c._attn_implementation_internal = name
    try:
        yield
    finally:
        with _SWITCH_LOCK:
            for c in configs:
                entry = _SWITCHED[id(c)]
                entry[2] -= 1
                if entry[2] == 0:
                    c._attn_implementation_internal = entry[1]
                    del _SWITCHED[id(c)]


# ------------------------------------------------------------------------------------------- the named captures


@dataclass
class HeadTensors:
    """Per layer application: queries, keys and values [batch, heads, n, d] as q.k and the weights see them, the
    scale of q.k and the logits' extra terms [batch, heads, n, n] (or None); queries, keys, scales and biases stay
    empty when only the values were captured."""

    queries: list[torch.Tensor] = field(default_factory=list)
    keys: list[torch.Tensor] = field(default_factory=list)
    values: list[torch.Tensor] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    caps: list[float | None] = field(default_factory=list)  # c of soft-capped logits c tanh(s / c) (Gemma 2), or None
    biases: list[torch.Tensor | None] = field(default_factory=list)


@dataclass
class Cache:
    """What the forward passes of a `hooks` block recorded, per layer application in call order (empty where not
    captured). `captured`: the captures hooked (qk left out for a family attnlib does not know); `layers`: the
    applications whose projections are kept (None: every one), in order in `projections` and `heads()`."""

    captured: frozenset[Capture]
    layout: Layout | None  # None when only attention was asked for (or qk of an unknown family)
    part: Part = "encoder"  # an encoder-decoder's attention hooked: its encoder's, decoder's or cross-attention
    layers: frozenset[int] | None = None
    graph: bool = False  # attn kept in autograd's graph (not detached), for gradients with respect to the maps
    attn: list[torch.Tensor] = field(default_factory=list)  # [batch, heads, n, n]: the model's own attentions
    heads_calls: list[HeadsCall] = field(default_factory=list)  # the heads module's calls (positions, masks); of
    # an application left out by `layers`, the module alone (no arguments kept)
    projections: list[list[torch.Tensor]] = field(default_factory=list)  # per projection: outputs [batch, n, width]
    layer_inputs: list[torch.Tensor] = field(default_factory=list)  # [batch, n, hidden]: x, the residual
    norm_inputs: list[torch.Tensor] = field(default_factory=list)  # [batch, n, hidden]: u, the first LN's input
    heads_input: torch.Tensor | None = None  # the heads module's input in the call now running
    keys_input: torch.Tensor | None = None  # what that call projects to keys and values (cross: the encoder's output)

    def keeps(self, application: int) -> bool:
        """Whether the projections of this layer application (0-based, in call order) are kept."""
        return self.layers is None or application in self.layers

    def heads(self) -> HeadTensors:
        """Queries, keys, values, scales and biases of every application kept from its projections' outputs."""
        assert self.layout is not None, "no heads were captured: capture qk or values"
        lay, values_only = self.layout, "qk" not in self.captured
        found = HeadTensors()
        kept = [(l, site) for l, site in enumerate(lay.sites) if self.keeps(l)]
        with torch.inference_mode():
            for k, (l, site) in enumerate(kept):
                outputs = [p[k] if p else None for p in self.projections]
                if values_only and outputs[0] is None:
                    outputs = [outputs[2]] * 3  # only v was hooked; split's q and k are unused copies of it
                qkv = lay.qkv(site, outputs, self.heads_calls[l])
                found.values.append(qkv[2])
                if not values_only:
                    scale = lay.scale(site)
                    found.queries.append(qkv[0])
                    found.keys.append(qkv[1])
                    found.scales.append(scale)
                    found.caps.append(lay.family.score_cap(site.heads))
                    found.biases.append(lay.bias(self.heads_calls[l], qkv, scale))
        return found


def _attention_site(encoder: torch.nn.Module, cache: Cache) -> Sequence[contextlib.AbstractContextManager]:
    """attn: the stack asked for its attentions (output_attentions=True), and each pass's kept (a decoder stack's
    cross-attentions for the cross part; in autograd's graph with cache.graph)."""

    def keep(_module, _args, out):
        maps = out.cross_attentions if cache.part == "cross" else out.attentions
        cache.attn.extend(a if cache.graph else a.detach() for a in (maps or ()))

    return [attentions_returned([encoder]), hooked([encoder], keep, after=True)]


def _heads_site(_encoder: torch.nn.Module, cache: Cache) -> Sequence[contextlib.AbstractContextManager]:
    """qk and values: the heads modules' calls and their projections' outputs (only calls on the heads' own input:
    DeBERTa also projects its relative embeddings; cross-attention's k and v: on the call's keys_from argument, the
    encoder's output); values alone hook v only, unless q, k and v are one fused projection or rotary positions need
    the call."""
    lay = cache.layout
    assert lay is not None
    projections = lay.sites[0].projections
    fused_or_rotary = len(projections) == 1 or lay.family.positions is not None
    wanted = range(len(projections)) if "qk" in cache.captured or fused_or_rotary else [2]
    cache.projections = [[] for _ in projections]
    keys_from = lay.family.keys_from

    def on_heads(module, args, kwargs):
        if not cache.keeps(len(cache.heads_calls)):
            cache.heads_calls.append(HeadsCall(module, {}))
            cache.heads_input = cache.keys_input = None  # nothing of this application is kept
            return
        call = HeadsCall(module, bound_arguments(module, args, kwargs))
        cache.heads_calls.append(call)
        cache.heads_input = args[0] if args else kwargs["hidden_states"]
        cache.keys_input = call.arguments[keys_from] if keys_from else cache.heads_input

    def keep_projection(p: int):
        reads_keys = len(projections) > 1 and p > 0  # k and v of separate projections

        def keep(_module, args, out):
            wanted = cache.keys_input if reads_keys else cache.heads_input
            if wanted is not None and args[0] is wanted:
                cache.projections[p].append(out.detach())

        return keep

    return [hooked(site_modules(lay, "heads"), on_heads, with_kwargs=True)] + [
        hooked(dict.fromkeys(s.projections[p] for s in lay.sites), keep_projection(p), after=True) for p in wanted
    ]


def _layer_inputs_site(_encoder: torch.nn.Module, cache: Cache) -> Sequence[contextlib.AbstractContextManager]:
    """layer_inputs: each layer application's hidden-state input."""
    assert cache.layout is not None

    def keep(_module, args, kwargs):
        cache.layer_inputs.append((args[0] if args else kwargs["hidden_states"]).detach())

    return [hooked(site_modules(cache.layout, "layer"), keep, with_kwargs=True)]


def _norm_inputs_site(_encoder: torch.nn.Module, cache: Cache) -> Sequence[contextlib.AbstractContextManager]:
    """norm_inputs: the input of the norm that divides the block's output: the LayerNorm after attention (post-LN
    families) or the RMSNorm of the attention output (Gemma 2 and 3); other pre-LN blocks have none."""
    assert cache.layout is not None
    family = cache.layout.family
    site: Site | None = "norm" if family.post_layer_norm else "attention_norm" if family.attention_norm else None
    if site is None:
        return []

    def keep(_module, args):
        cache.norm_inputs.append(args[0].detach())

    return [hooked(site_modules(cache.layout, site), keep)]


SiteHooks = Callable[[torch.nn.Module, Cache], Sequence[contextlib.AbstractContextManager]]
SITES: dict[Capture, SiteHooks] = {
    "attn": _attention_site,
    "qk": _heads_site,
    "values": _heads_site,
    "layer_inputs": _layer_inputs_site,
    "norm_inputs": _norm_inputs_site,
}


def _layout_for(encoder: torch.nn.Module, wanted: frozenset[Capture], part: Part) -> Layout | None:
    """The stack's layout (of this part) when anything beyond attention is captured; None for queries and keys of a
    family attnlib does not know (the neuron view says why); the norms of such a family raise UnsupportedModelError."""
    if wanted & NORMS:
        return layout(encoder, "norms", part)
    if "qk" in wanted and unsupported_reason(encoder.config, "queries_keys", part) is None:
        return layout(encoder, "queries_keys", part)
    return None


def hooked_stack(lm: LoadedModel, part: Part) -> torch.nn.Module:
    """The stack whose forward passes a part's hooks record: lm.encoder, or an encoder-decoder's decoder stack (its
    decoder and cross attentions); ValueError for a decoder part of a model that has none."""
    if part == "encoder":
        return lm.encoder
    if lm.seq2seq is None:
        raise ValueError(f"the {part} attention is an encoder-decoder's; '{lm.facts.name}' is not one")
    return lm.seq2seq.get_decoder()


@contextlib.contextmanager
def hooks(
    lm: LoadedModel,
    capture: Iterable[Capture],
    part: Part = "encoder",
    layers: Iterable[int] | None = None,
    graph: bool = False,
) -> Iterator[Cache]:
    """Within the block, every forward pass of lm.encoder (of an encoder-decoder's decoder stack for the decoder or
    cross `part`, run by the whole model, as lm.mlm runs lm.encoder) records the named captures into the yielded
    Cache; attn also makes the stack return its attentions (kept in autograd's graph with `graph`: gradients with
    respect to them); qk and values keep only the `layers` given (0-based layer applications of one pass; None: every
    one). Hooks are removed in `finally`."""
    wanted = capture_set(capture)
    hooked_module = hooked_stack(lm, part)
    lay = _layout_for(hooked_module, wanted, part)
    kept = None if layers is None else frozenset(layers)
    cache = Cache(wanted if lay is not None else wanted - {"qk"}, lay, part, kept, graph)
    sites = dict.fromkeys(SITES[name] for name in CAPTURES if name in cache.captured and name in SITES)
    with contextlib.ExitStack() as stack:
        for site in sites:
            for hook in site(hooked_module, cache):
                stack.enter_context(hook)
        yield cache
