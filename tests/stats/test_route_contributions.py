"""Contributions and routes (attnlib.stats.routes, METHODS §21): the attention nodes' contributions against the
definition computed directly from the model's own modules (its attention weights, value and output projections read by
path, the whole after attention captured with hooks) for GPT-2, Llama, Gemma 2, GPT-NeoX, GPT-J and BERT; the streamed
blocks against the dense definition; the compiled kernel against the plain one; and the routes and heads on routes of
a hand-built graph whose routes are worked out by hand in both modes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.core.residual import decompose
from attnlib.stats import routes as stats_routes
from attnlib.stats.routes import (
    FLOOR,
    Graph,
    RouteFrequencyStats,
    attention_blocks,
    contributions,
    heads_on_routes,
    layer_graph,
    routes,
)
from support.residual import direct_values, model_pass
from support.tolerances import EPS32, FORWARD_RTOL

KINDS = ("gpt2", "llama", "gemma2", "gpt-neox", "gptj", "bert")


def definition(whole: np.ndarray, parts: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """c_k = max(||y||_1 - ||y - p_k||_1, 1e-5) over the allowed parts, divided by their sum (float64, by the book)."""
    raw = np.maximum(np.abs(whole).sum() - np.abs(whole - parts).sum(-1), FLOOR) * allowed
    return raw / raw.sum()


@pytest.fixture(scope="module", params=KINDS)
def measured(request, tmp_path_factory):
    kind = request.param
    seen = model_pass(kind, tmp_path_factory.mktemp(f"routes-{kind}"))
    return seen | {"residual": decompose(seen["lm"], seen["batch"])}


def _direct_layer(measured: dict, l: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x [n, d], whole after attention [n, d], parts [n, H, n, d], whether row i attends key j [n, n]) of layer l from
    the model's own modules (float64)."""
    kind, lm, own, seen = measured["kind"], measured["lm"], measured["own"], measured["seen"]
    added, after_attention, _ = measured["named"]
    layer = lm.encoder.get_submodule(measured["layers"])[l]
    x = own.hidden_states[l][0]
    weights = own.attentions[l][0].double()  # [H, n, n]
    values = direct_values(kind, lm, layer, x).double()  # [H, n, d]
    parts = torch.einsum("hij,hjd->ihjd", weights, values)
    if kind == "gemma2":  # its RMSNorm of the attention output, fixed at the run's r_i: gamma * part / r_i
        norm = layer.post_attention_layernorm
        o = seen[(l, "post_attention_layernorm")][0][0].double()
        r = (o.square().mean(-1) + norm.eps).sqrt()
        parts = parts * (1 + norm.weight.detach().double()) / r[:, None, None, None]
    whole = x + seen[(l, added)][1][0] if after_attention is None else seen[(l, after_attention)][0][0]
    n = x.shape[0]
    allowed = np.ones((n, n), bool) if kind == "bert" else np.tril(np.ones((n, n), bool))
    return x.double().numpy(), whole.double().numpy(), parts.numpy(), allowed


def test_attention_contributions_are_the_definition_on_the_models_own_parts(measured):
    residual = measured["residual"]
    for parts in residual.layers:
        x, whole, direct, allowed = _direct_layer(measured, parts.layer)
        weights, values = parts.attention_parts()
        causal = measured["kind"] != "bert"
        blocks = list(attention_blocks(parts.x, parts.mid, weights, values, causal))
        heads = torch.cat([h for _, h, _ in blocks], 1).numpy()  # [H, n, n]
        res = torch.cat([r for _, _, r in blocks]).numpy()
        n, n_heads, d = whole.shape[0], direct.shape[1], whole.shape[1]
        for i in range(n):
            candidates = np.concatenate([direct[i].reshape(-1, d), x[i][None]])
            mask = np.concatenate([np.broadcast_to(allowed[i], (n_heads, n)).reshape(-1), [True]])
            expected = definition(whole[i], candidates, mask)
            raw_total = np.maximum(np.abs(whole[i]).sum() - np.abs(whole[i] - candidates).sum(-1), FLOOR)[mask].sum()
            # float32 L1 norms of d terms (rounding d eps each) of wholes that agree to the forward pass's error
            tolerance = (2 * d * EPS32 + 8 * FORWARD_RTOL) * 2 * np.abs(whole[i]).sum() / raw_total
            got = np.concatenate([heads[:, i].reshape(-1), [res[i]]])
            assert np.abs(got - expected).max() <= tolerance, (parts.layer, i)
            assert np.all(heads[:, i][:, ~allowed[i]] == 0)


def test_feed_forward_contributions_are_the_definition(measured):
    for parts in measured["residual"].layers:
        got = contributions(parts.ffn_whole, torch.stack([parts.ffn, parts.carried], 1)).double().numpy()
        whole = parts.ffn_whole.double().numpy()
        for i in range(whole.shape[0]):
            pair = np.stack([parts.ffn[i].double().numpy(), parts.carried[i].double().numpy()])
            assert np.allclose(got[i], definition(whole[i], pair, np.ones(2, bool)), atol=1e-5)


def _dense(y: torch.Tensor, x: torch.Tensor, weights: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor):
    """Every node's contributions from the materialised parts (heads [H, n, n], residual [n])."""
    n, n_heads = y.shape[0], weights.shape[0]
    parts = torch.einsum("hij,hjd->ihjd", weights, values).reshape(n, n_heads * n, -1)
    everything = torch.cat([parts, x[:, None]], 1)
    total = y.abs().sum(-1, keepdim=True)
    raw = (total - (y[:, None] - everything).abs().sum(-1)).clamp(min=FLOOR)
    raw = raw * torch.cat(
        [allowed[:, None].expand(n, n_heads, n).reshape(n, -1), torch.ones(n, 1, dtype=torch.bool)], 1
    )
    c = raw / raw.sum(-1, keepdim=True)
    return c[:, :-1].reshape(n, n_heads, n).permute(1, 0, 2), c[:, -1]


@pytest.mark.parametrize(("causal", "window"), [(True, None), (False, None), (True, 3), (False, 2)])
def test_blocks_of_queries_and_keys_equal_the_dense_definition(causal, window, monkeypatch):
    """Blocks smaller than the input (3 queries x 5 keys of 13), so that query and key blocks and windows are crossed."""
    monkeypatch.setattr(stats_routes, "QUERY_BLOCK", 3)
    monkeypatch.setattr(stats_routes, "KEY_BLOCK", 5)
    g = torch.Generator().manual_seed(0)
    n, n_heads, d = 13, 3, 8
    x, y = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    weights = torch.rand(n_heads, n, n, generator=g)
    values = torch.randn(n_heads, n, d, generator=g)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    allowed = (j <= i if causal else torch.ones(n, n, dtype=torch.bool)) & (
        (i - j).abs() <= window if window is not None else True
    )
    heads, res = _dense(y, x, weights, values, allowed)
    blocks = list(attention_blocks(x, y, weights, values, causal, window))
    assert [start for start, _, _ in blocks] == list(range(0, n, 3))
    assert torch.allclose(torch.cat([h for _, h, _ in blocks], 1), heads, atol=1e-6)
    assert torch.allclose(torch.cat([r for _, _, r in blocks]), res, atol=1e-6)


@pytest.mark.slow
def test_compiled_kernel_equals_the_plain_one():
    """The L1 distances of a block, compiled (padded to the fixed block shape) and plain: sums of d terms in two
    orders, within 2 d eps of the sum of their magnitudes."""
    if stats_routes._compiled() is None:
        pytest.skip("torch.compile cannot run here (no C++ compiler)")
    g = torch.Generator().manual_seed(1)
    n, n_heads, d = 20, 2, 16
    y, weights, values = (
        torch.randn(n, d, generator=g),
        torch.rand(n_heads, n, n, generator=g),
        torch.randn(n_heads, n, d, generator=g),
    )
    plain = stats_routes._block_distances(y[:7], weights[:, :7], values, "plain")
    compiled = stats_routes._block_distances(y[:7], weights[:, :7], values, "compiled")
    assert stats_routes.distance_kernel() == "compiled"
    magnitude = y[:7].abs().sum(-1)[None, :, None] + weights[:, :7, :, None].mul(values[:, None]).abs().sum(-1)
    assert torch.all((plain - compiled).abs() <= 2 * d * EPS32 * magnitude)


# ---------------------------------------------------------------------------------- a hand-built graph, tau = 0.1
TAU = 0.1
# two layers, three positions, two heads: each attention node's contributions heads[h, i, j] and residual[i] (rows sum
# to 1), each feed-forward node's (F, carried)
LAYER0 = dict(
    heads=[[[0, 0, 0], [0.3, 0.2, 0], [0.5, 0.06, 0.05]], [[0, 0, 0], [0.05, 0.05, 0], [0.08, 0.06, 0.05]]],
    residual=[1.0, 0.4, 0.2],
    ffn=[[0.5, 0.5], [0.5, 0.5], [0.7, 0.3]],
)
LAYER1 = dict(
    heads=[[[0, 0, 0], [0, 0, 0], [0.02, 0.85, 0.0]], [[0, 0, 0], [0, 0, 0], [0.02, 0.05, 0.0]]],
    residual=[1.0, 1.0, 0.06],
    ffn=[[0.5, 0.5], [0.5, 0.5], [0.05, 0.95]],
)


def _graph(mode) -> Graph:
    layers = []
    for spec in (LAYER0, LAYER1):
        heads = torch.tensor(spec["heads"])
        blocks = [(0, heads, torch.tensor(spec["residual"]))]
        layers.append(layer_graph(blocks, torch.tensor(spec["ffn"]), TAU, mode))
    return Graph(layers, 3, 2, TAU, mode)


def _reached_sources(graph: Graph, layer: int, reached) -> set[tuple[int, int]]:
    edges = graph.layers[layer].attention
    on = reached.attention_edges[layer][0]
    return {(int(edges.source[e]), int(edges.target[e])) for e in np.nonzero(on)[0]}


def test_route_of_a_hand_built_graph_in_cut_mode():
    """Cut: R1_2 <- A1_2 (carried 0.95; F 0.05 not followed) <- R0_1 (0.85 + 0.05 = 0.90; the residual 0.06 and the
    edge from R0_0, 0.04, not followed) <- A0_1 (F and carried 0.5) <- E_0 (0.35), E_1 (0.25) and the residual E_1 (0.4).
    Heads: 1-0 (0.85), 0-0 (0.3, 0.2); head 0-1's shares (0.05) and 1-1's (0.05) are at most tau."""
    graph = _graph("cut")
    reached = routes(graph, np.array([2]))
    assert reached.carried[1][0].tolist() == [False, False, True] and not reached.ffn[1][0].any()
    assert _reached_sources(graph, 1, reached) == {(1, 2)}
    assert not reached.residual[1][0].any()
    assert reached.attention_nodes[0][0].tolist() == [False, True, False]
    assert _reached_sources(graph, 0, reached) == {(0, 1), (1, 1)}
    assert reached.residual[0][0].tolist() == [False, True, False]
    assert reached.embeddings[0].tolist() == [True, True, False]
    assert heads_on_routes(graph, reached)[0].tolist() == [[True, False], [True, False]]


def test_route_of_a_hand_built_graph_in_renormalise_mode():
    """Renormalise: A1_2 keeps only head 1-0's 0.85 from R0_1 and the carried 0.95 (its F, 0.05, is set to 0); A0_1
    keeps 0.3 and 0.2 of head 0-0 and its residual 0.4 (head 0-1's 0.05 each set to 0), rescaled by 1 / 0.9."""
    graph = _graph("renormalise")
    layer0, layer1 = graph.layers
    assert np.allclose(layer1.attention.weight, [1.0]) and np.allclose(layer1.attention.heads, [[1.0, 0.0]])
    assert np.allclose(layer1.carried, [0.5, 0.5, 1.0]) and np.allclose(layer1.ffn, [0.5, 0.5, 0.0])
    into_1 = layer0.attention.target == 1
    assert np.allclose(sorted(layer0.attention.weight[into_1]), [0.2 / 0.9, 0.3 / 0.9])
    assert np.allclose(layer0.residual[1], 0.4 / 0.9)
    reached = routes(graph, np.array([2]))
    assert _reached_sources(graph, 1, reached) == {(1, 2)}
    assert _reached_sources(graph, 0, reached) == {(0, 1), (1, 1)}
    assert reached.embeddings[0].tolist() == [True, True, False]
    assert heads_on_routes(graph, reached)[0].tolist() == [[True, False], [True, False]]


def test_cut_mode_follows_an_edge_that_no_single_head_carries():
    """A0_2 in cut mode: the edge from E_1 sums heads' 0.06 + 0.06 = 0.12 > tau, followed, though each head's share is
    at most tau (so neither head is on the route through it); renormalise sets both parts to 0."""
    for mode, followed in (("cut", True), ("renormalise", False)):
        graph = _graph(mode)
        reached = routes(graph, np.array([2]))
        reached_a0 = reached.attention_nodes[0][0]
        assert reached_a0.tolist() == [False, True, False]  # A0_2 is not on the route to 2 (R0_2 is not reached)
        single = Graph(graph.layers[:1], 3, 2, TAU, mode)
        into = _reached_sources(single, 0, routes(single, np.array([2])))
        assert ((1, 2) in into) is followed
        assert (0, 2) in into  # 0.5 + 0.08 in cut mode; 0.5 / 0.7 renormalised


def test_frequency_counts_every_position_and_merges():
    graph = _graph("cut")
    one, two = RouteFrequencyStats(2, 2, TAU, "cut"), RouteFrequencyStats(2, 2, TAU, "cut")
    one.add_graph(graph)
    two.add_graph(graph)
    two.add_graph(graph)
    expected = heads_on_routes(graph, routes(graph, np.arange(3))).sum(0)
    merged = one.merge(two)
    assert merged.routes == 9
    assert np.array_equal(merged.on_routes, 3 * expected)
    assert np.allclose(merged.frequency(), expected / 3)
