"""Contributions, the information-flow graph, routes and heads on routes (METHODS §21; Ferrando & Voita 2024), as plain
functions of one layer's parts (attnlib.core.residual.LayerParts' tensors) and of arrays.

A whole y and parts p_k: `c_k = max(||y||_1 - ||y - p_k||_1, 1e-5) / sum_k (same)`. The attention node (l, i) has as
parts every head h's `A[h, i, j] f_h(x_j)` for each key j that row i can attend, and the residual x_i; the feed-forward
node the block's output F_i and the carried state. The L1 distances `||y_i - A[h, i, j] f_h(x_j)||_1` are reduced
block by block (QUERY_BLOCK queries x KEY_BLOCK keys x every head) without materialising more than one block's parts:
by a kernel that torch.compile fuses into one pass (never materialising the parts), where it is available, or by the
same arithmetic in plain torch; `distance_kernel()` says which ran. Two modes apply the threshold tau: "renormalise"
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
QUERY_BLOCK, KEY_BLOCK = 16, 32  # the compiled kernel's one block shape (short inputs pad little)
PLAIN_QUERY_BLOCK = 4  # the plain kernel's parts held at once: heads x 4 queries x KEY_BLOCK keys x d
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
    """_l1_distances compiled for fixed block shapes (one graph serves every block), or None where torch.compile
    cannot run here (no C++ compiler for inductor's CPU code)."""
    if shutil.which("c++") is None and shutil.which("g++") is None and shutil.which("clang++") is None:
        return None
    try:
        return torch.compile(_l1_distances, dynamic=False, fullgraph=True)
    except Exception:  # any failure to set up compilation means the plain path
        return None


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
    """_l1_distances of one block: compiled on shapes padded to (QUERY_BLOCK, KEY_BLOCK), else in plain torch over
    PLAIN_QUERY_BLOCK queries at a time."""
    b, k = y.shape[0], v.shape[1]
    if kernel == "compiled":
        compiled = _compiled()
        try:
            y_p = torch.nn.functional.pad(y, (0, 0, 0, QUERY_BLOCK - b))
            a_p = torch.nn.functional.pad(a, (0, KEY_BLOCK - k, 0, QUERY_BLOCK - b))
            v_p = torch.nn.functional.pad(v, (0, 0, 0, KEY_BLOCK - k))
            out = compiled(y_p, a_p, v_p)[:, :b, :k]  # type: ignore[operator]
            _RAN["kernel"] = "compiled"
            return out
        except Exception:  # a compilation that fails at run time: the same arithmetic in plain torch
            _RAN["failed"] = "compiled"
    _RAN["kernel"] = "plain"
    return torch.cat(
        [_l1_distances(y[s : s + PLAIN_QUERY_BLOCK], a[:, s : s + PLAIN_QUERY_BLOCK], v)
         for s in range(0, b, PLAIN_QUERY_BLOCK)], dim=1,
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
    mask = torch.ones(len(queries), len(keys), dtype=torch.bool)
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
    """The attention nodes' normalised contributions, QUERY_BLOCK queries at a time: (first query, heads [H, B, n]
    (0 where row i cannot attend key j), residual [B]); x, mid [n, d], weights [H, n, n], values [H, n, d] as
    LayerParts.attention_parts gives them."""
    n = x.shape[0]
    n_heads = weights.shape[0]
    for start in range(0, n, QUERY_BLOCK):
        stop = min(start + QUERY_BLOCK, n)
        y = mid[start:stop]
        total = y.abs().sum(-1)  # [B]
        keys_to = stop if causal else n
        raw = torch.zeros(n_heads, stop - start, n)
        queries = torch.arange(start, stop)
        for k0 in range(0, keys_to, KEY_BLOCK):
            k1 = min(k0 + KEY_BLOCK, keys_to)
            if window is not None and (k0 > stop - 1 + window or k1 - 1 < start - window):
                continue
            d = _block_distances(y, weights[:, start:stop, k0:k1], values[:, k0:k1], kernel)
            c = (total[None, :, None] - d).clamp(min=FLOOR)
            raw[:, :, k0:k1] = c * attendable(queries, torch.arange(k0, k1), causal, window)
        residual = (total - (y - x[start:stop]).abs().sum(-1)).clamp(min=FLOOR)
        norm = raw.sum((0, 2)) + residual
        yield start, raw / norm[None, :, None], residual / norm


@dataclass
class LayerContributions:
    """One layer's graph: its attention edges above tau, and per position the residual edge into the attention node
    c(x_i), the feed-forward edge c(F_i) and the carried edge c(m_i) (after the mode)."""

    attention: AttentionEdges
    residual: np.ndarray  # [n]
    ffn: np.ndarray  # [n]
    carried: np.ndarray  # [n]


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
    targets, sources, edge_weights, shares = [], [], [], []
    n = ffn.shape[0]
    residual = torch.zeros(n)
    n_heads = 0
    for start, heads, res in blocks:
        n_heads, b = heads.shape[0], res.shape[0]
        joined = apply_mode(torch.cat([heads.permute(1, 0, 2).reshape(b, -1), res[:, None]], 1), threshold, mode, (1,))
        kept = joined[:, :-1].reshape(b, n_heads, -1)  # [B, H, n]
        residual[start : start + b] = joined[:, -1]
        weight = kept.sum(1)  # [B, n]
        i, j = torch.nonzero(weight > threshold, as_tuple=True)
        targets.append((i + start).numpy())
        sources.append(j.numpy())
        edge_weights.append(weight[i, j].numpy())
        shares.append(kept[i, :, j].numpy())
    ffn_c = apply_mode(ffn, threshold, mode, (1,))
    edges = (
        AttentionEdges(np.concatenate(targets), np.concatenate(sources), np.concatenate(edge_weights),
                       np.concatenate(shares).reshape(-1, n_heads))
        if targets else AttentionEdges.empty(n_heads)
    )  # fmt: skip
    return LayerContributions(edges, residual.numpy(), ffn_c[:, 0].numpy(), ffn_c[:, 1].numpy())


# --------------------------------------------------------------------------------------------------- routes


@dataclass
class Graph:
    """Every layer's LayerContributions of one input of n positions, with the threshold and mode applied."""

    layers: list[LayerContributions]
    n: int
    n_heads: int
    threshold: float
    mode: Mode


@dataclass
class Reached:
    """What the routes to the predictions at positions T reach: per layer, which attention nodes and which of their
    incoming edges (bool [T, n] and [T, E]), and which residual, feed-forward and carried edges ([T, n] each)."""

    attention_nodes: list[np.ndarray]
    attention_edges: list[np.ndarray]
    residual: list[np.ndarray]
    ffn: list[np.ndarray]
    carried: list[np.ndarray]
    embeddings: np.ndarray  # [T, n]: the E nodes reached


def routes(graph: Graph, positions: np.ndarray) -> Reached:
    """The routes to the predictions at these positions: every edge reached from R^(L-1)_t by following edges backwards
    whose weight is above the threshold (all positions at once, as boolean reach matrices)."""
    tau, n = graph.threshold, graph.n
    reach_r = np.zeros((len(positions), n), bool)
    reach_r[np.arange(len(positions)), positions] = True
    found: dict[str, list[np.ndarray]] = {k: [] for k in ("nodes", "edges", "residual", "ffn", "carried")}
    for layer in reversed(graph.layers):
        ffn_on = reach_r & (layer.ffn > tau)
        carried_on = reach_r & (layer.carried > tau)
        reach_a = ffn_on | carried_on
        residual_on = reach_a & (layer.residual > tau)
        edges = layer.attention
        edges_on = reach_a[:, edges.target]  # [T, E]: weights above tau by construction
        below = residual_on.copy()
        if edges_on.size:
            np.logical_or.at(below.T, edges.source, edges_on.T)  # R^(l-1)_j reached through an edge into A^l_i
        for key, value in zip(found, (reach_a, edges_on, residual_on, ffn_on, carried_on)):
            found[key].insert(0, value)
        reach_r = below
    return Reached(found["nodes"], found["edges"], found["residual"], found["ffn"], found["carried"], reach_r)


def heads_on_routes(graph: Graph, reached: Reached) -> np.ndarray:
    """[T, L, H] bool: head (l, h) is on route t when one of the route's attention edges gives it a share above tau."""
    per_layer = []
    for layer, edges_on in zip(graph.layers, reached.attention_edges):
        above = (layer.attention.heads > graph.threshold).astype(np.float32)  # [E, H]
        per_layer.append(edges_on.astype(np.float32) @ above > 0)
    return np.stack(per_layer, 1)


@dataclass
class RouteFrequencyStats:
    """Heads on routes over a corpus (mergeable): for each head, the routes it is on, and the routes counted."""

    n_layers: int
    n_heads: int
    threshold: float
    mode: Mode
    on_routes: np.ndarray = field(init=False)
    routes: int = 0

    def __post_init__(self) -> None:
        self.on_routes = np.zeros((self.n_layers, self.n_heads), np.int64)

    def add_graph(self, graph: Graph) -> None:
        """Every position's route of one input's graph (t predicts t + 1 in a decoder; every position of an encoder)."""
        positions = np.arange(graph.n)
        self.on_routes += heads_on_routes(graph, routes(graph, positions)).sum(0)
        self.routes += graph.n

    def merge(self, other: RouteFrequencyStats) -> RouteFrequencyStats:
        self.on_routes += other.on_routes
        self.routes += other.routes
        return self

    def frequency(self) -> np.ndarray:
        """[L, H]: the share of routes each head is on (NaN before any route)."""
        return self.on_routes / self.routes if self.routes else np.full(self.on_routes.shape, np.nan)
