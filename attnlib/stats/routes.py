"""Contributions, the information-flow graph, routes and heads on routes (METHODS §21; Ferrando & Voita 2024), as plain
functions of one layer's parts (attnlib.core.residual.LayerParts' tensors) and of arrays.

A whole y and parts p_k: `c_k = max(||y||_1 - ||y - p_k||_1, 1e-5) / sum_k (same)`. The attention node (l, i) has as
parts every head h's `A[h, i, j] f_h(x_j)` for each key j that row i can attend, and the residual x_i; the feed-forward
node the block's output F_i and the carried state. The L1 distances `||y_i - A[h, i, j] f_h(x_j)||_1` are reduced
QUERY_BLOCK queries at a time against every key they attend: by a kernel that torch.compile fuses into one pass (the
parts are never materialised; compiled once for every shape), where it can run, or by the same arithmetic in plain
torch over small blocks of queries and keys; `distance_kernel()` says which ran. Two modes apply the threshold tau: "renormalise"
(parts with c <= tau set to 0, the rest divided by their sum) and "cut" (unchanged; edges with weight <= tau not
followed). The graph keeps the edges whose weight is above tau (the only ones a route follows, in either mode), each
attention edge with every head's share.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

Mode = Literal["renormalise", "cut"]
MODES: tuple[Mode, ...] = ("renormalise", "cut")
DEFAULT_THRESHOLD = 0.04
FLOOR = 1e-5  # the smallest contribution of a part (the LLM Transparency Tool's)
QUERY_BLOCK = 16  # queries reduced at once against every key they can attend (fused: the parts are never held)
PLAIN_QUERY_BLOCK, KEY_BLOCK = 4, 128  # the plain kernel's parts held at once: heads x 4 queries x 128 keys x d
COMPILE_FROM = 50_000_000  # L1 terms (heads x query-key pairs x d, all layers, all inputs) from which compiling pays
Kernel = Literal["auto", "compiled", "plain"]


def contributions(whole: torch.Tensor, parts: torch.Tensor) -> torch.Tensor:
    """c [..., K] of parts [..., K, d] of a whole [..., d], normalised over K (the definition, for small inputs)."""
    total = whole.abs().sum(-1, keepdim=True)
    raw = (total - (whole.unsqueeze(-2) - parts).abs().sum(-1)).clamp(min=FLOOR)
    return raw / raw.sum(-1, keepdim=True)


def apply_mode(c: torch.Tensor, threshold: float, mode: Mode, dims: tuple[int, ...]) -> torch.Tensor:
    """Contributions as the mode leaves them: "renormalise" zeroes those <= threshold and divides the rest by their sum
    over `dims` (one node's parts); "cut" leaves them as they are."""
    if mode == "cut":
        return c
    kept = torch.where(c > threshold, c, torch.zeros_like(c))
    return kept / kept.sum(dims, keepdim=True).clamp(min=torch.finfo(c.dtype).tiny)


# ------------------------------------------------------------------------------------------------- the L1 kernel


def _l1_distances(y: torch.Tensor, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """||y_i - a[h, i, j] v[h, j]||_1 [H, B, K] of y [B, d], a [H, B, K], v [H, K, d]."""
    return (y[None, :, None, :] - a[..., None] * v[:, None, :, :]).abs().sum(-1)


@functools.cache
def _compiled() -> object | None:
    """_l1_distances compiled once for every block shape (dynamic shapes), or None where torch.compile cannot run here
    (no C++ compiler for inductor's CPU code) or where its kernel disagrees with plain torch on a test block."""
    if shutil.which("c++") is None and shutil.which("g++") is None and shutil.which("clang++") is None:
        return None
    try:
        compiled = torch.compile(_l1_distances, dynamic=True, fullgraph=True)
        return compiled if _agrees(compiled) else None
    except Exception:  # any failure to set up compilation means the plain path
        return None


def _agrees(kernel) -> bool:
    """Whether a kernel gives _l1_distances on a block of odd sizes within float32 rounding: sums of d terms in two
    orders, within 2 d eps of the sum of their magnitudes. (Inductor's cache has handed back a kernel built for
    another vector width, whose distances were off by tens, when ATEN_CPU_CAPABILITY was changed between runs.)"""
    g = torch.Generator().manual_seed(0)
    d = 37
    y, a, v = torch.randn(5, d, generator=g), torch.rand(3, 5, 23, generator=g), torch.randn(3, 23, d, generator=g)
    magnitude = y.abs().sum(-1)[None, :, None] + (a[..., None] * v[:, None]).abs().sum(-1)
    error = (kernel(y, a, v) - _l1_distances(y, a, v)).abs()
    return bool(torch.all(error <= 2 * d * torch.finfo(torch.float32).eps * magnitude))


_RAN: dict[str, str] = {}


def distance_kernel() -> str | None:
    """The L1 kernel of the last contributions computed: "compiled" or "plain" (None before any)."""
    return _RAN.get("kernel")


def choose_kernel(kernel: Kernel, work: float) -> str:
    """ "compiled" or "plain" for this many L1 terms: auto compiles from COMPILE_FROM where torch.compile can run."""
    if kernel == "plain" or (kernel == "auto" and work < COMPILE_FROM):
        return "plain"
    return "compiled" if _compiled() is not None and "failed" not in _RAN else "plain"


def _block_distances(y: torch.Tensor, a: torch.Tensor, v: torch.Tensor, kernel: str) -> torch.Tensor:
    """_l1_distances of one block of queries against its keys: compiled in one fused pass, else in plain torch over
    PLAIN_QUERY_BLOCK queries and KEY_BLOCK keys at a time."""
    if kernel == "compiled":
        compiled = _compiled()
        try:
            out = compiled(y, a, v)  # type: ignore[operator]
            _RAN["kernel"] = "compiled"
            return out
        except Exception:  # a compilation that fails at run time: the same arithmetic in plain torch
            _RAN["failed"] = "compiled"
    _RAN["kernel"] = "plain"
    return torch.cat(
        [torch.cat([_l1_distances(y[s : s + PLAIN_QUERY_BLOCK], a[:, s : s + PLAIN_QUERY_BLOCK, k : k + KEY_BLOCK],
                                  v[:, k : k + KEY_BLOCK]) for k in range(0, v.shape[1], KEY_BLOCK)], dim=2)
         for s in range(0, y.shape[0], PLAIN_QUERY_BLOCK)], dim=1,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- one layer's nodes


@dataclass
class AttentionEdges:
    """One layer's attention edges with weight above tau: target query i, source key j, weight, each head's share."""

    target: np.ndarray  # [E] int
    source: np.ndarray  # [E] int
    weight: np.ndarray  # [E] float32: sum over heads, after the mode
    heads: np.ndarray  # [E, H] float32: each head's contribution c(p[h, j]) after the mode

    @classmethod
    def empty(cls, n_heads: int) -> AttentionEdges:
        return cls(
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros((0, n_heads), np.float32)
        )


def attendable(queries: torch.Tensor, keys: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
    """[B, K] bool: which keys each query's row can attend (causal: j <= i; a local window: |i - j| <= w)."""
    i, j = queries[:, None], keys[None, :]
    mask = torch.ones(len(queries), len(keys), dtype=torch.bool, device=queries.device)
    if causal:
        mask &= j <= i
    if window is not None:
        mask &= (i - j).abs() <= window
    return mask


def attention_blocks(
    x: torch.Tensor,
    mid: torch.Tensor,
    weights: torch.Tensor,
    values: torch.Tensor,
    causal: bool,
    window: int | None = None,
    kernel: str = "plain",
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """The attention nodes' normalised contributions, QUERY_BLOCK queries at a time: (first query, heads [H, B, m]
    (0 where row i cannot attend key j), residual [B]); x (the residual part), mid (the whole) [n, d], weights
    [H, n, m], values [H, m, d] as LayerParts.attention_parts gives them (a cross-attention's keys: the m source
    positions)."""
    n, m = x.shape[0], values.shape[1]
    n_heads = weights.shape[0]
    for start in range(0, n, QUERY_BLOCK):
        stop = min(start + QUERY_BLOCK, n)
        y = mid[start:stop]
        total = y.abs().sum(-1)  # [B]
        lo = 0 if window is None else max(0, start - window)
        hi = stop if causal else (m if window is None else min(m, stop + window))
        raw = torch.zeros(n_heads, stop - start, m, device=x.device)
        d = _block_distances(y, weights[:, start:stop, lo:hi], values[:, lo:hi], kernel)
        allowed = attendable(torch.arange(start, stop, device=x.device), torch.arange(lo, hi, device=x.device), causal,
                             window)  # fmt: skip
        raw[:, :, lo:hi] = (total[None, :, None] - d).clamp(min=FLOOR) * allowed
        residual = (total - (y - x[start:stop]).abs().sum(-1)).clamp(min=FLOOR)
        norm = raw.sum((0, 2)) + residual
        yield start, raw / norm[None, :, None], residual / norm


@dataclass
class LayerContributions:
    """One layer's graph: its attention edges above tau, and per position the residual edge into the attention node
    c(x_i), the feed-forward edge c(F_i) and the carried edge c(m_i) (after the mode). An encoder-decoder's decoder
    layer: `attention` and `residual` go into its self-attention node S, `cross` (source position j -> target i) and
    `cross_residual` (S_i -> A_i) into its cross-attention node A."""

    attention: AttentionEdges
    residual: np.ndarray  # [n]
    ffn: np.ndarray  # [n]
    carried: np.ndarray  # [n]
    cross: AttentionEdges | None = None
    cross_residual: np.ndarray | None = None  # [n]


def layer_contributions(
    x: torch.Tensor,
    mid: torch.Tensor,
    weights: torch.Tensor,
    values: torch.Tensor,
    ffn: torch.Tensor,
    carried: torch.Tensor,
    threshold: float,
    mode: Mode,
    causal: bool,
    window: int | None = None,
    kernel: str = "plain",
) -> LayerContributions:
    """One layer's contributions as a graph (module docstring), streamed over query blocks."""
    blocks = attention_blocks(x, mid, weights, values, causal, window, kernel)
    return layer_graph(blocks, contributions(ffn + carried, torch.stack([ffn, carried], 1)), threshold, mode)


def layer_graph(
    blocks: Iterable[tuple[int, torch.Tensor, torch.Tensor]], ffn: torch.Tensor, threshold: float, mode: Mode
) -> LayerContributions:
    """One layer's graph from its attention nodes' normalised contributions (attention_blocks: first query, heads
    [H, B, n], residual [B]) and its feed-forward nodes' ([n, 2]: F, carried), the mode applied per node."""
    edges, residual = node_edges(blocks, ffn.shape[0], threshold, mode)
    ffn_c = apply_mode(ffn, threshold, mode, (1,))
    return LayerContributions(edges, residual, ffn_c[:, 0].cpu().numpy(), ffn_c[:, 1].cpu().numpy())


def node_edges(
    blocks: Iterable[tuple[int, torch.Tensor, torch.Tensor]], n: int, threshold: float, mode: Mode
) -> tuple[AttentionEdges, np.ndarray]:
    """The attention edges above tau into n attention nodes, and each node's residual edge [n], from their normalised
    contributions (attention_blocks), the mode applied per node."""
    targets, sources, edge_weights, shares = [], [], [], []
    residual = np.zeros(n, np.float32)
    n_heads = 0
    for start, heads, res in blocks:
        n_heads, b = heads.shape[0], res.shape[0]
        joined = apply_mode(torch.cat([heads.permute(1, 0, 2).reshape(b, -1), res[:, None]], 1), threshold, mode, (1,))
        kept = joined[:, :-1].reshape(b, n_heads, -1)  # [B, H, keys]
        residual[start : start + b] = joined[:, -1].cpu().numpy()
        weight = kept.sum(1)  # [B, keys]
        i, j = torch.nonzero(weight > threshold, as_tuple=True)
        targets.append((i + start).cpu().numpy())
        sources.append(j.cpu().numpy())
        edge_weights.append(weight[i, j].cpu().numpy())
        shares.append(kept[i, :, j].cpu().numpy())
    edges = (
        AttentionEdges(np.concatenate(targets), np.concatenate(sources), np.concatenate(edge_weights),
                       np.concatenate(shares).reshape(-1, n_heads))
        if targets else AttentionEdges.empty(n_heads)
    )  # fmt: skip
    return edges, residual


# --------------------------------------------------------------------------------------------------- routes


@dataclass
class Graph:
    """Every layer's LayerContributions of one input of n positions, with the threshold and mode applied; an
    encoder-decoder's decoder graph has its encoder's as `source` (its cross edges come from the encoder's last
    states, read through the encoder's final norm)."""

    layers: list[LayerContributions]
    n: int
    n_heads: int
    threshold: float
    mode: Mode
    source: Graph | None = None


@dataclass
class Reached:
    """What the routes to the predictions at positions T reach: per layer, which attention nodes and which of their
    incoming edges (bool [T, n] and [T, E]), and which residual, feed-forward and carried edges ([T, n] each); an
    encoder-decoder's decoder (its attention nodes: the self-attention's, S) also its cross edges ([T, E]) and cross
    residual edges ([T, n]) per layer, and the encoder's part (`source`)."""

    attention_nodes: list[np.ndarray]
    attention_edges: list[np.ndarray]
    residual: list[np.ndarray]
    ffn: list[np.ndarray]
    carried: list[np.ndarray]
    embeddings: np.ndarray  # [T, n]: the E nodes reached
    cross_edges: list[np.ndarray] = field(default_factory=list)
    cross_residual: list[np.ndarray] = field(default_factory=list)
    source: Reached | None = None


def _sources_reached(reach: np.ndarray, edges: AttentionEdges, n_sources: int) -> np.ndarray:
    """[T, n_sources]: the sources of the edges (above tau by construction) into the reached targets [T, n]."""
    found = np.zeros((reach.shape[0], n_sources), bool)
    if len(edges.target):
        np.logical_or.at(found.T, edges.source, reach[:, edges.target].T)
    return found


def routes(graph: Graph, positions: np.ndarray) -> Reached:
    """The routes to the predictions at these positions: every edge reached from R^(L-1)_t by following edges backwards
    whose weight is above the threshold (all positions at once, as boolean reach matrices), into the encoder through
    the cross edges of an encoder-decoder's decoder."""
    start = np.zeros((len(positions), graph.n), bool)
    start[np.arange(len(positions)), positions] = True
    return reach_back(graph, start)


def reach_back(graph: Graph, reach_r: np.ndarray) -> Reached:
    """The routes from the last layer's states reached ([T, n]) back to the embeddings (routes)."""
    tau = graph.threshold
    reached = Reached([], [], [], [], [], reach_r)
    sources = np.zeros((reach_r.shape[0], graph.source.n), bool) if graph.source is not None else None
    for layer in reversed(graph.layers):
        ffn_on = reach_r & (layer.ffn > tau)
        carried_on = reach_r & (layer.carried > tau)
        reach_a = ffn_on | carried_on
        if layer.cross is not None and layer.cross_residual is not None and sources is not None:
            sources |= _sources_reached(reach_a, layer.cross, sources.shape[1])
            reached.cross_edges.insert(0, reach_a[:, layer.cross.target])
            reach_a = reach_a & (layer.cross_residual > tau)  # the self-attention node S, through the cross residual
            reached.cross_residual.insert(0, reach_a)
        residual_on = reach_a & (layer.residual > tau)
        reached.attention_nodes.insert(0, reach_a)
        reached.attention_edges.insert(0, reach_a[:, layer.attention.target])
        for found, value in ((reached.residual, residual_on), (reached.ffn, ffn_on), (reached.carried, carried_on)):
            found.insert(0, value)
        reach_r = residual_on | _sources_reached(reach_a, layer.attention, graph.n)
    reached.embeddings = reach_r
    if graph.source is not None and sources is not None:
        reached.source = reach_back(graph.source, sources)
    return reached


def _heads_on(edges_on: list[np.ndarray], edges: list[AttentionEdges], threshold: float) -> np.ndarray:
    """[T, L, H] bool: which heads give one of the reached edges (per layer [T, E]) a share above tau."""
    per_layer = []
    for on, layer_edges in zip(edges_on, edges):
        above = (layer_edges.heads > threshold).astype(np.float32)  # [E, H]
        per_layer.append(on.astype(np.float32) @ above > 0)
    return np.stack(per_layer, 1)


def heads_on_routes(graph: Graph, reached: Reached) -> np.ndarray:
    """[T, L, H] bool: head (l, h) is on route t when one of the route's attention edges gives it a share above tau
    (an encoder-decoder's decoder: its self-attention heads)."""
    return _heads_on(reached.attention_edges, [layer.attention for layer in graph.layers], graph.threshold)


def cross_heads_on_routes(graph: Graph, reached: Reached) -> np.ndarray:
    """[T, L, H] bool: an encoder-decoder's cross-attention head (l, h) is on route t (as heads_on_routes)."""
    edges = [layer.cross for layer in graph.layers if layer.cross is not None]
    return _heads_on(reached.cross_edges, edges, graph.threshold)


@dataclass
class RouteFrequencyStats:
    """Heads on routes over a corpus (mergeable): for each head, the routes it is on, and the routes counted; an
    encoder-decoder's decoder routes (`encoder`: the encoder's layers and heads) also count its cross-attention heads
    and its encoder's heads."""

    n_layers: int
    n_heads: int
    threshold: float
    mode: Mode
    encoder: tuple[int, int] | None = None
    on_routes: np.ndarray = field(init=False)
    cross_on_routes: np.ndarray | None = field(init=False)
    encoder_on_routes: np.ndarray | None = field(init=False)
    routes: int = 0

    def __post_init__(self) -> None:
        self.on_routes = np.zeros((self.n_layers, self.n_heads), np.int64)
        self.cross_on_routes = None if self.encoder is None else np.zeros_like(self.on_routes)
        self.encoder_on_routes = None if self.encoder is None else np.zeros(self.encoder, np.int64)

    def add_graph(self, graph: Graph) -> None:
        """Every position's route of one input's graph (t predicts t + 1 in a decoder; every position of an encoder)."""
        positions = np.arange(graph.n)
        reached = routes(graph, positions)
        self.on_routes += heads_on_routes(graph, reached).sum(0)
        if self.cross_on_routes is not None and self.encoder_on_routes is not None:
            assert graph.source is not None and reached.source is not None
            self.cross_on_routes += cross_heads_on_routes(graph, reached).sum(0)
            self.encoder_on_routes += heads_on_routes(graph.source, reached.source).sum(0)
        self.routes += graph.n

    def merge(self, other: RouteFrequencyStats) -> RouteFrequencyStats:
        self.on_routes += other.on_routes
        if self.cross_on_routes is not None and self.encoder_on_routes is not None:
            self.cross_on_routes += other.cross_on_routes
            self.encoder_on_routes += other.encoder_on_routes
        self.routes += other.routes
        return self

    def frequency(self, counts: np.ndarray | None = None) -> np.ndarray:
        """[L, H]: the share of routes each head is on (of `counts`, default on_routes; NaN before any route)."""
        counts = self.on_routes if counts is None else counts
        return counts / self.routes if self.routes else np.full(counts.shape, np.nan)
