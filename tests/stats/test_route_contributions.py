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
    cross_heads_on_routes,
    heads_on_routes,
    layer_graph,
    node_edges,
    routes,
)
from support.residual import direct_values, model_pass, seq2seq_pass
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


@pytest.mark.parametrize("kind", ["t5", "bart"])
def test_cross_attention_contributions_are_the_definition_on_the_models_own_parts(kind, tmp_path):
    """An encoder-decoder's cross-attention node A^l_i (pre-norm T5, post-norm BART): its parts are the model's own
    cross-attention weights times the value and output projections of the encoder's own output, and the state before
    it, its whole the state after it, both read off the model's own modules by path; attnlib's contributions (from its
    decoder_parts) are the definition's over every source position."""
    from attnlib.core.residual import decoder_parts
    from attnlib.core.seq2seq import source_inputs

    seen = seq2seq_pass(kind, tmp_path / kind)
    lm, own, got = seen["lm"], seen["own"], seen["seen"]
    layers, _, _ = decoder_parts(lm, source_inputs(lm, seen["source"]), seen["target"].input_ids)
    for parts in layers:
        l, cross = parts.layer, parts.cross
        assert cross is not None
        weights = own.cross_attentions[l][0].double()  # [H, n, m]
        n_heads = weights.shape[0]
        v = got[(l, "cross_v")][1].double()
        out = seen["layers"][l].get_submodule(seen["paths"]["cross_out"]).weight.detach().double()
        values = torch.einsum(
            "mhk,dhk->hmd", v.reshape(v.shape[0], n_heads, -1), out.reshape(out.shape[0], n_heads, -1)
        )
        direct = torch.einsum("hij,hjd->ihjd", weights, values).numpy()  # [n, H, m, d]
        if "self_norm" in seen["paths"]:
            before, whole = got[(l, "self_norm")][1].double(), got[(l, "cross_norm")][0].double()
        else:
            before = own.decoder_hidden_states[l][0].double() + got[(l, "self_out")][1].double()
            whole = before + got[(l, "cross_out")][1].double()
        before, whole = before.numpy(), whole.numpy()
        blocks = list(attention_blocks(cross.before, cross.whole, cross.weights, cross.values, False))
        heads = torch.cat([h for _, h, _ in blocks], 1).numpy()  # [H, n, m]
        res = torch.cat([r for _, _, r in blocks]).numpy()
        n, m, d = whole.shape[0], direct.shape[2], whole.shape[1]
        for i in range(n):
            candidates = np.concatenate([direct[i].reshape(-1, d), before[i][None]])
            expected = definition(whole[i], candidates, np.ones(n_heads * m + 1, bool))
            raw_total = np.maximum(np.abs(whole[i]).sum() - np.abs(whole[i] - candidates).sum(-1), FLOOR).sum()
            tolerance = (2 * d * EPS32 + 8 * FORWARD_RTOL) * 2 * np.abs(whole[i]).sum() / raw_total
            found = np.concatenate([heads[:, i].reshape(-1), [res[i]]])
            assert np.abs(found - expected).max() <= tolerance, (l, i)


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
        pytest.skip("torch.compile cannot run here (no C++ compiler), or its kernel disagreed with plain torch")
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


def test_a_compiled_kernel_that_disagrees_with_plain_torch_is_not_used(monkeypatch):
    """A kernel whose distances are off (as one from inductor's cache built for another vector width was) is checked
    on a test block and left: the plain kernel runs."""
    stats_routes._compiled.cache_clear()
    monkeypatch.setattr(torch, "compile", lambda fn, **_: lambda y, a, v: fn(y, a, v) + 1.0)
    try:
        assert stats_routes._compiled() is None
        assert stats_routes.choose_kernel("compiled", 1e12) == "plain"
        assert stats_routes._agrees(stats_routes._l1_distances)
    finally:
        stats_routes._compiled.cache_clear()


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


# an encoder-decoder: one decoder layer of two target positions over the encoder above (_graph: three source positions);
# its self-attention node S, its cross-attention node A (keys: the encoder's last states) and its feed-forward node
DECODER0 = dict(
    heads=[[[0, 0], [0.3, 0]], [[0, 0], [0, 0]]],
    residual=[1.0, 0.7],
    cross=[[[0, 0, 0], [0, 0.6, 0.05]], [[0, 0, 0], [0, 0, 0.05]]],
    cross_residual=[1.0, 0.3],
    ffn=[[0.5, 0.5], [0.2, 0.8]],
)


def _target_graph(mode) -> Graph:
    spec = DECODER0
    layer = layer_graph([(0, torch.tensor(spec["heads"]), torch.tensor(spec["residual"]))], torch.tensor(spec["ffn"]),
                        TAU, mode)  # fmt: skip
    cross = [(0, torch.tensor(spec["cross"]), torch.tensor(spec["cross_residual"]))]
    layer.cross, layer.cross_residual = node_edges(cross, 2, TAU, mode)
    return Graph([layer], 2, 2, TAU, mode, source=_graph(mode))


@pytest.mark.parametrize("mode", ["cut", "renormalise"])
def test_route_of_a_hand_built_encoder_decoder_runs_through_the_cross_edge_into_the_encoder(mode):
    """From the decoder's R0_1: F (0.2) and the carried state (0.8) reach A0_1; its cross edge from the encoder's last
    state at source 1 (head 0, 0.6) is followed, the one from source 2 (0.05 + 0.05 = 0.1, not above tau) is not; the
    cross residual (0.3) reaches S0_1, whose self-attention edge from dE_0 (0.3) and residual from dE_1 (0.7) reach both
    embeddings. The encoder's part is the encoder's own route from position 1. Renormalise: A0_1 keeps 0.6 and 0.3,
    rescaled by 1 / 0.9."""
    graph = _target_graph(mode)
    layer = graph.layers[0]
    reached = routes(graph, np.array([1]))
    assert layer.cross is not None and layer.cross_residual is not None
    followed = {
        (int(layer.cross.source[e]), int(layer.cross.target[e])) for e in np.nonzero(reached.cross_edges[0][0])[0]
    }
    assert followed == {(1, 1)}
    if mode == "renormalise":
        assert np.allclose(layer.cross.weight, [0.6 / 0.9]) and np.allclose(layer.cross_residual[1], 0.3 / 0.9)
    assert reached.cross_residual[0][0].tolist() == [False, True]
    assert _reached_sources(graph, 0, reached) == {(0, 1)} and reached.residual[0][0].tolist() == [False, True]
    assert reached.embeddings[0].tolist() == [True, True]
    assert cross_heads_on_routes(graph, reached)[0].tolist() == [[True, False]]
    assert heads_on_routes(graph, reached)[0].tolist() == [[True, False]]
    assert graph.source is not None and reached.source is not None
    alone = routes(graph.source, np.array([1]))
    assert np.array_equal(reached.source.embeddings, alone.embeddings)
    assert all(np.array_equal(a, b) for a, b in zip(reached.source.attention_edges, alone.attention_edges))


def test_encoder_decoder_frequency_counts_the_three_attentions_and_merges():
    graph = _target_graph("cut")
    one, two = (RouteFrequencyStats(1, 2, TAU, "cut", encoder=(2, 2)) for _ in range(2))
    one.add_graph(graph)
    two.add_graph(graph)
    merged = one.merge(two)
    reached = routes(graph, np.arange(2))
    assert merged.routes == 4
    assert np.array_equal(merged.on_routes, 2 * heads_on_routes(graph, reached).sum(0))
    assert np.array_equal(merged.cross_on_routes, 2 * cross_heads_on_routes(graph, reached).sum(0))
    assert graph.source is not None and reached.source is not None
    assert np.array_equal(merged.encoder_on_routes, 2 * heads_on_routes(graph.source, reached.source).sum(0))
    assert merged.encoder_on_routes.sum() > 0 and merged.cross_on_routes.sum() == 2
