"""The `routes` analysis (METHODS §21): the information-flow graph of one text and the route to the prediction at a
position, or, over a corpus, each head's route frequency (the share of every position's route that the head is on).

One input runs once through the model (attnlib.core.residual.walk); each layer's contributions are computed as that
layer finishes, over blocks of queries (attnlib.stats.routes), so only one layer's parts are held. The prediction at a
position t: a decoder's next token there (its own final norm and LM head, argmax); an encoder predicts nothing beyond
its positions: every position's route ends at that position's last state, and `prediction` names the token there
(id and token of the input, no model prediction). An encoder-decoder's routes (part decoder, the default) end at the
decoder's prediction at a target position: its decoder layers have a self-attention node S and a cross-attention node
A, whose cross edges come from the encoder's last states, and the graph holds the encoder's nodes and edges too (node
and edge `part`: encoder or decoder; decoder node ids start with "d"); part encoder gives the encoder's own graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Self

import numpy as np
import torch

from attnlib.analyses.attention import TARGET_HELP, check_one_attention, source_of
from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import Scale
from attnlib.core.families import layout
from attnlib.core.model import LoadedModel
from attnlib.core.residual import LayerParts, decoder_parts, walk
from attnlib.core.runner import Encoded, InputError, check_tokens, encode, model_inputs
from attnlib.core.seq2seq import Target, source_inputs, target_of
from attnlib.results.files import ResultFileError
from attnlib.stats.routes import (
    DEFAULT_THRESHOLD,
    Graph,
    Kernel,
    LayerContributions,
    Mode,
    Reached,
    RouteFrequencyStats,
    attention_blocks,
    choose_kernel,
    distance_kernel,
    layer_contributions,
    node_edges,
    routes,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RoutesOptions(Options):
    """The position whose route is drawn, the threshold and how it applies, and the L1 kernel."""

    position: int = option(-1, "t: the position whose prediction's route is drawn, 0-based (default the last, -1)",
                           view=True)  # fmt: skip
    threshold: float = option(DEFAULT_THRESHOLD, "tau: a part's contribution is kept / an edge followed above this, "
                              "between 0 and 1 (default %(default)s)", compare=True)  # fmt: skip
    mode: Mode = option("renormalise", "renormalise: parts at or below tau set to 0 and the rest rescaled (the "
                        "paper's); cut: contributions unchanged, edges at or below tau not followed", compare=True)  # fmt: skip
    kernel: Kernel = option("auto", "the L1 reduction: compiled (torch.compile, one fused pass), plain torch, or auto "
                            "(compiled for long inputs where it can run)", view=True)  # fmt: skip
    part: Literal["auto", "encoder", "decoder"] = option(
        "auto", "an encoder-decoder's routes: decoder (auto) to the decoder's prediction at a target position, through "
        "its cross-attention into the encoder; encoder: the encoder's own graph")  # fmt: skip
    target: str = option("", TARGET_HELP + " (a corpus: each input's greedy output)")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.threshold < 1:
            raise OptionError(f"threshold must be between 0 and 1 (both excluded), not {self.threshold!r}")


ENCODER_DECODER_KEYS = ("kind", "part", "source", "target", "target_from")  # an encoder-decoder's graph, first


def node_id(kind: str, layer: int | None, position: int, prefix: str = "") -> str:
    """A node's id: E_i, A3_i, F3_i, R3_i (R of layer -1 is E); an encoder-decoder's decoder nodes' start with "d"
    (dE_i, dS3_i, dA3_i, ...)."""
    if kind == "E" or (kind == "R" and layer == -1):
        return f"{prefix}E_{position}"
    return f"{prefix}{kind}{layer}_{position}"


class RoutesResult:
    """What `routes` gives: a RouteGraph on a text, a RouteFrequency on a corpus (RoutesResult.from_json tells them
    apart by their keys)."""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Any:
        """The RouteFrequency or RouteGraph this JSON holds; ResultFileError when it holds neither."""
        return RouteFrequency.read(data) if "frequency" in data else RouteGraph.read(data)

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        raise NotImplementedError


@dataclass
class RouteGraph(RoutesResult):
    """One text's graph (nodes, edges with each head's share), the route to the prediction at `position` and that
    prediction; `kernel`: which L1 kernel computed it (not in the JSON)."""

    tokens: list[str]
    threshold: float
    mode: str
    nodes: list[dict]
    edges: list[dict]
    route: dict
    prediction: dict
    kernel: str | None = None
    encoder_decoder: dict | None = None  # an encoder-decoder's kind, part, source tokens, target and target_from

    def to_json(self) -> dict[str, Any]:
        """The `routes` command's JSON on a text."""
        keys = ("tokens", "threshold", "mode", "nodes", "edges", "route", "prediction")
        return {**(self.encoder_decoder or {}), **{k: getattr(self, k) for k in keys}}

    @classmethod
    def read(cls, data: dict[str, Any]) -> Self:
        """The graph of a text's JSON; ResultFileError when a key is missing."""
        try:
            keys = ("tokens", "threshold", "mode", "nodes", "edges", "route", "prediction")
            about = {k: data[k] for k in ENCODER_DECODER_KEYS} if "part" in data else None
            return cls(**{k: data[k] for k in keys}, encoder_decoder=about)
        except KeyError as exc:
            raise ResultFileError(f"a routes result lacks {exc}.") from exc

    @property
    def crosses(self) -> bool:
        """Whether the graph is an encoder-decoder's whole graph (the decoder's, with its encoder's)."""
        return any(e["kind"] == "cross" for e in self.edges) or any(n.get("part") == "decoder" for n in self.nodes)

    def part_nodes(self, part: str | None) -> list[dict]:
        """The nodes of one stack (part "encoder" or "decoder" of an encoder-decoder's graph; None: every node)."""
        return [n for n in self.nodes if part is None or n.get("part") == part]

    def n_layers_of(self, part: str | None = None) -> int:
        """The layers of a stack (of the whole graph when part is None)."""
        return 1 + max((n["layer"] for n in self.part_nodes(part) if n["layer"] is not None), default=-1)

    @property
    def n_layers(self) -> int:
        return self.n_layers_of(self.route_part)

    @property
    def route_part(self) -> str | None:
        """The stack whose positions the route starts from: an encoder-decoder's decoder; None for one stack."""
        return "decoder" if self.crosses else None

    def tokens_of(self, node: dict) -> list[str]:
        """The tokens a node's position indexes: an encoder-decoder's encoder nodes the source's, else `tokens`."""
        if node.get("part") == "encoder" and self.encoder_decoder is not None and self.crosses:
            return list(self.encoder_decoder["source"])
        return self.tokens

    def route_heads(self, kind: str = "attention", part: str | None = None) -> np.ndarray:
        """[L, H]: each head's largest share on an edge of this kind ("attention", or an encoder-decoder's "cross") of
        the route, into the nodes of `part` (default: the stack the route starts from); 0 where it has none."""
        part = self.route_part if part is None else part
        by_id = {n["id"]: n for n in self.nodes}
        into = [e for e in self.edges if e["kind"] == kind and (part is None or by_id[e["target"]].get("part") == part)]
        n_heads = len(into[0]["heads"]) if into else 0
        best = np.zeros((self.n_layers_of(part), n_heads))
        for index in self.route["edges"]:
            edge = self.edges[index]
            target = by_id[edge["target"]]
            if edge["kind"] == kind and (part is None or target.get("part") == part):
                best[target["layer"]] = np.maximum(best[target["layer"]], edge["heads"])
        return best

    def head_shares(self) -> dict[str, np.ndarray]:
        """Each attention's heads' largest shares on the route by name: "heads" (one stack); an encoder-decoder's
        "decoder", "cross" and "encoder"."""
        if not self.crosses:
            return {"heads": self.route_heads()}
        return {
            "decoder": self.route_heads("attention", "decoder"),
            "cross": self.route_heads("cross", "decoder"),
            "encoder": self.route_heads("attention", "encoder"),
        }

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """The edges (source and target tokens, layer, kind, weight, whether on the route) and each head's shares."""
        import pandas as pd

        on_route = set(self.route["edges"])
        by_id = {n["id"]: n for n in self.nodes}
        rows = []
        for index, edge in enumerate(self.edges):
            source, target = by_id[edge["source"]], by_id[edge["target"]]
            rows.append(
                {
                    "model": model,
                    **({"part": target["part"]} if "part" in target else {}),
                    "layer": target["layer"] + 1,
                    "kind": edge["kind"],
                    "source": edge["source"],
                    "source_token": self.tokens_of(source)[source["position"]],
                    "target": edge["target"],
                    "target_token": self.tokens_of(target)[target["position"]],
                    "weight": edge["weight"],
                    "on_route": index in on_route,
                }
            )
        heads = [
            {"model": model, **({} if name == "heads" else {"attention": name}), "layer": l + 1, "head": h + 1,
             "route_share": float(v)}
            for name, shares in self.head_shares().items()
            for (l, h), v in np.ndenumerate(shares)
        ]  # fmt: skip
        columns = ["model", *(["part"] if self.crosses else []), "layer", "kind", "source", "source_token", "target",
                   "target_token", "weight", "on_route"]  # fmt: skip
        tables = {"Edges": pd.DataFrame(rows, columns=columns)}
        if heads:  # the heads are known from an attention edge above the threshold
            tables["Heads on the route"] = pd.DataFrame(heads)
        return tables


@dataclass
class RouteFrequency(RoutesResult):
    """Heads on routes over a corpus: `frequency` [layers][heads] is the share of the `routes` counted that each head is
    on."""

    frequency: list[list[float | None]]  # None before any route
    routes: int
    threshold: float
    mode: str
    # an encoder-decoder's decoder routes: `frequency` is its decoder's self-attention heads', these its cross-attention
    # heads' and its encoder's heads'
    cross_frequency: list[list[float | None]] | None = None
    encoder_frequency: list[list[float | None]] | None = None

    def to_json(self) -> dict[str, Any]:
        """The `routes` command's JSON on a corpus."""
        data = {"frequency": self.frequency, "routes": self.routes, "threshold": self.threshold, "mode": self.mode}
        if self.cross_frequency is not None:  # an encoder-decoder's decoder routes
            data |= {"part": "decoder", "cross_frequency": self.cross_frequency,
                     "encoder_frequency": self.encoder_frequency}  # fmt: skip
        return data

    @classmethod
    def read(cls, data: dict[str, Any]) -> Self:
        """The frequency of a corpus's JSON; ResultFileError when a key is missing."""
        try:
            return cls(data["frequency"], int(data["routes"]), data["threshold"], data["mode"],
                       data.get("cross_frequency"), data.get("encoder_frequency"))  # fmt: skip
        except KeyError as exc:
            raise ResultFileError(f"a routes result lacks {exc}.") from exc

    def frequencies(self) -> dict[str, list[list[float | None]]]:
        """Each attention's frequencies by name: "heads" (one stack); an encoder-decoder's "decoder", "cross" and
        "encoder"."""
        if self.cross_frequency is None or self.encoder_frequency is None:
            return {"heads": self.frequency}
        return {"decoder": self.frequency, "cross": self.cross_frequency, "encoder": self.encoder_frequency}

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Each head's route frequency (layers and heads from 1)."""
        import pandas as pd

        rows = [
            {"model": model, **({} if name == "heads" else {"attention": name}), "layer": l + 1, "head": h + 1,
             "route_frequency": value}
            for name, frequency in self.frequencies().items()
            for l, row in enumerate(frequency)
            for h, value in enumerate(row)
        ]  # fmt: skip
        return {"Route frequency per head": pd.DataFrame(rows)}


# ------------------------------------------------------------------------------------------------- one input


@dataclass
class InputGraph:
    """One input's graph, the last layer's output x^L [n, d] (the prediction reads it) and the kernel that ran."""

    graph: Graph
    last: torch.Tensor
    kernel: str | None


# L1 terms a second on one CPU thread (bench_predictions, GPT-2 small's shape: the 2,048-token graph's 2.3e11 terms in
# 61 s with the compiled kernel; 9.1e8 in 3.0 s with the plain one at 128 tokens)
TERMS_PER_SECOND = {"compiled": 3.5e9, "plain": 3.0e8}
SAY_COST_FROM = 5.0  # seconds from which a text's route graph says what it will cost before it starts


def route_cost(lm: LoadedModel, item: CorpusInput, options: RoutesOptions) -> str | None:
    """What a text's route graph will cost, in words, when it is long (about SAY_COST_FROM s or more); None else."""
    if not isinstance(item.text_a, str) or not item.text_a.strip():
        return None
    n = encode(lm, item.text_a).n
    work = route_work(lm, n)
    kernel = choose_kernel(options.kernel, work)
    seconds = work / TERMS_PER_SECOND[kernel]
    if seconds < SAY_COST_FROM:
        return None
    return (f"the route graph of {n:,} tokens: about {seconds:,.0f} s on one CPU thread ({kernel} kernel; less on "
            "several)")  # fmt: skip


def route_work(lm: LoadedModel, n: int, crossing: int | None = None) -> float:
    """The L1 terms of one n-token input's contributions: layers x heads x query-key pairs x hidden size (an
    encoder-decoder's decoder, `crossing` the source's length: its causal pairs and its n x source cross pairs)."""
    facts = lm.facts
    if crossing is not None:
        return facts.n_layers * facts.n_heads * (n * (n + 1) / 2 + n * crossing) * facts.hidden_size
    pairs = n * (n + 1) / 2 if facts.causal else n * n
    return facts.n_layers * facts.n_heads * pairs * facts.hidden_size


def input_graph(lm: LoadedModel, encoded: Encoded, threshold: float, mode: Mode, kernel: Kernel = "auto") -> InputGraph:
    """The graph of one encoded input: one pass through the model, each layer's contributions as it finishes."""
    facts = lm.facts
    n = encoded.n
    chosen = choose_kernel(kernel, route_work(lm, n))
    layers: list[LayerContributions] = []
    last: list[torch.Tensor] = []
    windows = list(facts.windows) if facts.windows else []

    def visit(parts: LayerParts) -> None:
        weights, values = parts.attention_parts()
        window = windows[parts.layer] if parts.layer < len(windows) else None
        contributed = layer_contributions(
            parts.x, parts.mid, weights, values, parts.ffn, parts.carried, threshold, mode, facts.causal, window, chosen
        )
        layers.append(contributed)
        last[:] = [parts.out]

    walk(lm, model_inputs(lm, [encoded]), visit)
    n_heads = layers[0].attention.heads.shape[1]
    return InputGraph(Graph(layers, n, n_heads, threshold, mode), last[0], distance_kernel())


def decoder_layer_contributions(parts: LayerParts, threshold: float, mode: Mode, kernel: str) -> LayerContributions:
    """An encoder-decoder's decoder layer as a graph: its self-attention node S (whole mid; the heads' parts over the
    target's keys and the residual x), its cross-attention node A (whole cross.whole; the cross heads' parts over the
    source's positions and the residual S) and its feed-forward node."""
    cross = parts.cross
    assert cross is not None
    layer = layer_contributions(parts.x, parts.mid, parts.weights, parts.values, parts.ffn, parts.carried, threshold,
                                mode, True, None, kernel)  # fmt: skip
    blocks = attention_blocks(cross.before, cross.whole, cross.weights, cross.values, False, None, kernel)
    layer.cross, layer.cross_residual = node_edges(blocks, parts.x.shape[0], threshold, mode)
    return layer


@dataclass
class TargetGraph:
    """An encoder-decoder's whole graph for a source and a target (the decoder's Graph, its encoder's as `source`), the
    model's logits at every target position [n, V] and the kernel that ran."""

    graph: Graph
    logits: torch.Tensor
    kernel: str | None


def target_graph(lm: LoadedModel, source: Encoded, target: Target, threshold: float, mode: Mode,
                 kernel: Kernel = "auto") -> TargetGraph:  # fmt: skip
    """The encoder's graph of the source (one pass of the encoder), then the decoder's for the target (one pass of
    the whole model)."""
    n_target = len(target.input_ids)
    chosen = choose_kernel(kernel, route_work(lm, source.n) + route_work(lm, n_target, crossing=source.n))
    encoder = input_graph(lm, source, threshold, mode, chosen)  # type: ignore[arg-type]
    layers, _, logits = decoder_parts(lm, source_inputs(lm, source), target.input_ids)
    contributed = [decoder_layer_contributions(parts, threshold, mode, chosen) for parts in layers]
    n_heads = layers[0].weights.shape[0]
    graph = Graph(contributed, n_target, n_heads, threshold, mode, source=encoder.graph)
    return TargetGraph(graph, logits, distance_kernel())


def _prediction(lm: LoadedModel, encoded: Encoded, last: torch.Tensor, position: int) -> dict:
    """A decoder's next token at the position (its final norm and LM head, argmax); the input's token elsewhere."""
    head = lm.causal_lm.get_output_embeddings() if lm.causal_lm is not None else None
    if not lm.facts.causal or head is None:
        return {"position": position, "id": encoded.input_ids[position], "token": encoded.tokens[position]}
    from attnlib.core.families import layout

    final = layout(lm.encoder, "norms").final_norm
    with torch.inference_mode():
        state = last[position][None, None]
        logits = head(state if final is None else final(state))[0, 0]
    token_id = int(logits.float().argmax())
    return {"position": position, "id": token_id, "token": lm.tokenizer.convert_ids_to_tokens(token_id)}


def graph_json(graph: Graph, position: int) -> tuple[list[dict], list[dict], list[int]]:
    """(nodes, edges, the route's edge indices) of the graph as the JSON lists them: every node; every edge above tau
    (an encoder-decoder's: the encoder's nodes and edges first, each with its `part`)."""
    reached = routes(graph, np.array([position]))
    if graph.source is None or reached.source is None:
        return _stack_json(graph, reached)
    nodes, edges, on_route = _stack_json(graph.source, reached.source, part="encoder")
    source_layer = len(graph.source.layers) - 1
    more_nodes, more_edges, more_on = _stack_json(graph, reached, part="decoder", source_layer=source_layer)
    return nodes + more_nodes, edges + more_edges, on_route + [len(edges) + i for i in more_on]


def _stack_json(
    graph: Graph, reached: Reached, part: str | None = None, source_layer: int = -1
) -> tuple[list[dict], list[dict], list[int]]:
    """graph_json of one stack; `part` names an encoder-decoder's stack (its decoder's node ids start with "d", its
    decoder layers have S and A nodes, and cross edges from the encoder's layer `source_layer`)."""
    n, layers = graph.n, graph.layers
    prefix = "d" if part == "decoder" else ""
    tagged = {} if part is None else {"part": part}
    kinds = "SAFR" if part == "decoder" else "AFR"
    nodes = [{"id": node_id("E", None, i, prefix), "kind": "E", "layer": None, "position": i, **tagged}
             for i in range(n)]  # fmt: skip
    for l in range(len(layers)):
        nodes += [{"id": node_id(k, l, i, prefix), "kind": k, "layer": l, "position": i, **tagged}
                  for k in kinds for i in range(n)]  # fmt: skip
    edges: list[dict] = []
    on_route: list[int] = []
    tau = graph.threshold

    def add(edge: dict, reached_here: bool) -> None:
        if reached_here:
            on_route.append(len(edges))
        edges.append({**edge, **tagged})

    for l, layer in enumerate(layers):
        into = "S" if layer.cross is not None else "A"  # the self-attention's node
        att = layer.attention
        for e in range(len(att.weight)):
            add({"source": node_id("R", l - 1, int(att.source[e]), prefix),
                 "target": node_id(into, l, int(att.target[e]), prefix), "kind": "attention",
                 "weight": float(att.weight[e]), "heads": [float(v) for v in att.heads[e]]},
                bool(reached.attention_edges[l][0, e]))  # fmt: skip
        for i in np.nonzero(layer.residual > tau)[0]:
            add({"source": node_id("R", l - 1, int(i), prefix), "target": node_id(into, l, int(i), prefix),
                 "kind": "residual", "weight": float(layer.residual[i])}, bool(reached.residual[l][0, i]))  # fmt: skip
        if layer.cross is not None and layer.cross_residual is not None:
            cross = layer.cross
            for e in range(len(cross.weight)):
                add({"source": node_id("R", source_layer, int(cross.source[e])),
                     "target": node_id("A", l, int(cross.target[e]), prefix), "kind": "cross",
                     "weight": float(cross.weight[e]), "heads": [float(v) for v in cross.heads[e]]},
                    bool(reached.cross_edges[l][0, e]))  # fmt: skip
            for i in np.nonzero(layer.cross_residual > tau)[0]:
                add({"source": node_id("S", l, int(i), prefix), "target": node_id("A", l, int(i), prefix),
                     "kind": "residual", "weight": float(layer.cross_residual[i])},
                    bool(reached.cross_residual[l][0, i]))  # fmt: skip
        for i in np.nonzero(layer.ffn > tau)[0]:
            on = bool(reached.ffn[l][0, i])
            add({"source": node_id("A", l, int(i), prefix), "target": node_id("F", l, int(i), prefix), "kind": "ffn",
                 "weight": float(layer.ffn[i])}, on)  # fmt: skip
            add({"source": node_id("F", l, int(i), prefix), "target": node_id("R", l, int(i), prefix), "kind": "ffn",
                 "weight": float(layer.ffn[i])}, on)  # fmt: skip
        for i in np.nonzero(layer.carried > tau)[0]:
            add({"source": node_id("A", l, int(i), prefix), "target": node_id("R", l, int(i), prefix),
                 "kind": "residual", "weight": float(layer.carried[i])}, bool(reached.carried[l][0, i]))  # fmt: skip
    return nodes, edges, on_route


def _encoded(lm: LoadedModel, text: str | list[str]) -> Encoded:
    encoded = encode(lm, text)
    check_tokens(encoded, False)
    return encoded


def resolve_position(position: int, n: int) -> int:
    """The 0-based position (-1: the last); InputError outside the input."""
    found = position if position >= 0 else n + position
    if not 0 <= found < n:
        raise InputError(
            f"position {position} is outside the input: it has {n} tokens (positions 0 to {n - 1}, or -1 for the last)."
        )
    return found


def crossing(lm: LoadedModel, options: RoutesOptions) -> bool:
    """Whether the routes run through an encoder-decoder's decoder (part auto or decoder of an encoder-decoder);
    NotEncoderDecoderError for a decoder part or a target asked of another model."""
    check_one_attention(lm, options.part, options.target)
    return lm.seq2seq is not None and options.part != "encoder"


def compute_routes(lm: LoadedModel, item: CorpusInput, options: RoutesOptions) -> RouteGraph:
    """The graph of one text and the route to the prediction at options.position (an encoder-decoder's: at the
    target's position, through its decoder and cross-attention into its encoder)."""
    if item.text_b is not None:
        raise InputError("routes reads one text, not a pair.")
    if crossing(lm, options):
        return _target_routes(lm, item, options)
    encoded = _encoded(lm, item.text_a)
    position = resolve_position(options.position, encoded.n)
    made = input_graph(lm, encoded, options.threshold, options.mode, options.kernel)
    nodes, edges, on_route = graph_json(made.graph, position)
    about = None if lm.seq2seq is None else {"kind": "encoder-decoder", "part": "encoder", "source": encoded.tokens,
                                             "target": None, "target_from": None}  # fmt: skip
    return RouteGraph(
        encoded.tokens,
        options.threshold,
        options.mode,
        nodes,
        edges,
        {"position": position, "edges": on_route},
        _prediction(lm, encoded, made.last, position),
        made.kernel,
        about,
    )


def _target_routes(lm: LoadedModel, item: CorpusInput, options: RoutesOptions) -> RouteGraph:
    """An encoder-decoder's whole graph for the source and the target, the route to the decoder's prediction."""
    text = source_of(item)
    source = _encoded(lm, text)
    target = target_of(lm, source, text, options.target)
    position = resolve_position(options.position, len(target.input_ids))
    made = target_graph(lm, source, target, options.threshold, options.mode, options.kernel)
    nodes, edges, on_route = graph_json(made.graph, position)
    token_id = int(made.logits[position].argmax())
    about = {"kind": "encoder-decoder", "part": "decoder", "source": source.tokens, "target": target.text,
             "target_from": target.source}  # fmt: skip
    return RouteGraph(
        target.tokens,
        options.threshold,
        options.mode,
        nodes,
        edges,
        {"position": position, "edges": on_route},
        {"position": position, "id": token_id, "token": lm.tokenizer.convert_ids_to_tokens(token_id)},
        made.kernel,
        about,
    )


# --------------------------------------------------------------------------------------------- over a corpus


def route_accumulators(lm: LoadedModel, options: RoutesOptions) -> list:
    """An empty RouteFrequencyStats of the model's heads (an encoder-decoder's decoder's, cross-attention's and
    encoder's)."""
    if not crossing(lm, options):
        return [RouteFrequencyStats(lm.facts.n_layers, lm.facts.n_heads, options.threshold, options.mode)]
    assert lm.seq2seq is not None
    decoder = layout(lm.seq2seq.get_decoder(), "norms", "decoder")
    encoder = (lm.facts.n_layers, lm.facts.n_heads)
    return [RouteFrequencyStats(len(decoder.sites), decoder.n_heads, options.threshold, options.mode, encoder)]


def fill_routes(lm: LoadedModel, inputs: list[CorpusInput], accumulators: list, batch_size: int,
                progress: Progress | None, options: RoutesOptions) -> list:  # fmt: skip
    """Every position's route of every input (one pass each; an encoder-decoder's: every position of its greedy output
    for the input), into the frequency."""
    (stats,) = accumulators
    if crossing(lm, options):
        for done, item in enumerate(inputs, start=1):
            text = source_of(item)
            source = encode(lm, text)
            target = target_of(lm, source, text, None)
            stats.add_graph(target_graph(lm, source, target, options.threshold, options.mode, options.kernel).graph)
            if progress is not None:
                progress(done, len(inputs))
        return accumulators
    encoded = [encode(lm, item.text_a, item.text_b) for item in inputs]
    kernel = choose_kernel(options.kernel, sum(route_work(lm, e.n) for e in encoded))  # once for the whole corpus
    for done, one in enumerate(encoded, start=1):
        graph = input_graph(lm, one, options.threshold, options.mode, kernel)  # type: ignore[arg-type]
        stats.add_graph(graph.graph)
        if progress is not None:
            progress(done, len(inputs))
    return accumulators


def _listed(frequency: np.ndarray) -> list[list[float | None]]:
    return [[None if math.isnan(v) else float(v) for v in row] for row in frequency]


def frequency_result(stats: RouteFrequencyStats) -> RouteFrequency:
    if stats.cross_on_routes is None or stats.encoder_on_routes is None:
        return RouteFrequency(_listed(stats.frequency()), stats.routes, stats.threshold, stats.mode)
    return RouteFrequency(_listed(stats.frequency()), stats.routes, stats.threshold, stats.mode,
                          _listed(stats.frequency(stats.cross_on_routes)),
                          _listed(stats.frequency(stats.encoder_on_routes)))  # fmt: skip


def compute_model_routes(
    lm: LoadedModel,
    inputs: list[CorpusInput] | None,
    options: RoutesOptions,
    scale: Scale,
    progress: Progress | None = None,
) -> RouteFrequency:
    """The route frequency over a corpus, here or on Ray (engine), as the other corpus statistics run."""
    if not inputs:
        raise InputError("routes reads a text (--text) or a corpus (--corpus).")
    run = scale.accumulate(
        lm if scale.engine == "local" else lm.facts.name,
        inputs,
        partial(route_accumulators, options=options),
        partial(fill_routes, options=options),
        progress=progress,
    )
    return frequency_result(run.accumulators[0])


ROUTES: Analysis[RoutesOptions, RoutesResult] = Analysis(
    name="routes",
    help="information-flow routes (METHODS §21): a text's contribution graph and the route to the prediction at a "
    "position; --corpus: each head's route frequency",
    options=RoutesOptions,
    reads="model",
    result=RoutesResult,
    methods=(21,),
    compute=compute_routes,
    compute_model=compute_model_routes,
    note=route_cost,
)
