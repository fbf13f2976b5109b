"""The `routes` analysis (METHODS §21): the information-flow graph of one text and the route to the prediction at a
position, or, over a corpus, each head's route frequency (the share of every position's route that the head is on).

One input runs once through the model (attnlib.core.residual.walk); each layer's contributions are computed as that
layer finishes, over blocks of queries (attnlib.stats.routes), so only one layer's parts are held. The prediction at a
position t: a decoder's next token there (its own final norm and LM head, argmax); an encoder predicts nothing beyond
its positions: every position's route ends at that position's last state, and `prediction` names the token there
(id and token of the input, no model prediction). An encoder-decoder's routes are its encoder's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import torch

from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import Scale, run_accumulators
from attnlib.core.model import LoadedModel
from attnlib.core.residual import LayerParts, walk
from attnlib.core.runner import Encoded, InputError, check_tokens, encode, model_inputs
from attnlib.results.files import ResultFileError
from attnlib.stats.routes import (
    DEFAULT_THRESHOLD,
    Graph,
    Kernel,
    LayerContributions,
    Mode,
    RouteFrequencyStats,
    choose_kernel,
    distance_kernel,
    layer_contributions,
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

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.threshold < 1:
            raise OptionError(f"threshold must be between 0 and 1 (both excluded), not {self.threshold!r}")


def node_id(kind: str, layer: int | None, position: int) -> str:
    """A node's id: E_i, A3_i, F3_i, R3_i (R of layer -1 is E)."""
    if kind == "E" or (kind == "R" and layer == -1):
        return f"E_{position}"
    return f"{kind}{layer}_{position}"


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

    def to_json(self) -> dict[str, Any]:
        """The `routes` command's JSON on a text."""
        keys = ("tokens", "threshold", "mode", "nodes", "edges", "route", "prediction")
        return {k: getattr(self, k) for k in keys}

    @classmethod
    def read(cls, data: dict[str, Any]) -> Self:
        """The graph of a text's JSON; ResultFileError when a key is missing."""
        try:
            return cls(**{k: data[k] for k in ("tokens", "threshold", "mode", "nodes", "edges", "route", "prediction")})
        except KeyError as exc:
            raise ResultFileError(f"a routes result lacks {exc}.") from exc

    @property
    def n_layers(self) -> int:
        return 1 + max((n["layer"] for n in self.nodes if n["layer"] is not None), default=-1)

    def route_heads(self) -> np.ndarray:
        """[L, H]: each head's largest share on an attention edge of the route (0 where it has none)."""
        n_heads = next((len(e["heads"]) for e in self.edges if e["kind"] == "attention"), 0)
        best = np.zeros((self.n_layers, n_heads))
        layer_of = {n["id"]: n["layer"] for n in self.nodes}
        for index in self.route["edges"]:
            edge = self.edges[index]
            if edge["kind"] == "attention":
                layer = layer_of[edge["target"]]
                best[layer] = np.maximum(best[layer], edge["heads"])
        return best

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
                    "layer": target["layer"] + 1,
                    "kind": edge["kind"],
                    "source": edge["source"],
                    "source_token": self.tokens[source["position"]],
                    "target": edge["target"],
                    "target_token": self.tokens[target["position"]],
                    "weight": edge["weight"],
                    "on_route": index in on_route,
                }
            )
        heads = [
            {"model": model, "layer": l + 1, "head": h + 1, "route_share": float(v)}
            for (l, h), v in np.ndenumerate(self.route_heads())
        ]
        columns = ["model", "layer", "kind", "source", "source_token", "target", "target_token", "weight", "on_route"]
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

    def to_json(self) -> dict[str, Any]:
        """The `routes` command's JSON on a corpus."""
        return {"frequency": self.frequency, "routes": self.routes, "threshold": self.threshold, "mode": self.mode}

    @classmethod
    def read(cls, data: dict[str, Any]) -> Self:
        """The frequency of a corpus's JSON; ResultFileError when a key is missing."""
        try:
            return cls(data["frequency"], int(data["routes"]), data["threshold"], data["mode"])
        except KeyError as exc:
            raise ResultFileError(f"a routes result lacks {exc}.") from exc

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Each head's route frequency (layers and heads from 1)."""
        import pandas as pd

        rows = [
            {"model": model, "layer": l + 1, "head": h + 1, "route_frequency": value}
            for l, row in enumerate(self.frequency)
            for h, value in enumerate(row)
        ]
        return {"Route frequency per head": pd.DataFrame(rows)}


# ------------------------------------------------------------------------------------------------- one input


@dataclass
class InputGraph:
    """One input's graph, the last layer's output x^L [n, d] (the prediction reads it) and the kernel that ran."""

    graph: Graph
    last: torch.Tensor
    kernel: str | None


def route_work(lm: LoadedModel, n: int) -> float:
    """The L1 terms of one n-token input's contributions: layers x heads x query-key pairs x hidden size."""
    facts = lm.facts
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
    """(nodes, edges, the route's edge indices) of the graph as the JSON lists them: every node; every edge above tau."""
    n, layers = graph.n, graph.layers
    nodes = [{"id": node_id("E", None, i), "kind": "E", "layer": None, "position": i} for i in range(n)]
    for l in range(len(layers)):
        nodes += [{"id": node_id(k, l, i), "kind": k, "layer": l, "position": i} for k in "AFR" for i in range(n)]
    reached = routes(graph, np.array([position]))
    edges: list[dict] = []
    on_route: list[int] = []
    tau = graph.threshold

    def add(edge: dict, reached_here: bool) -> None:
        if reached_here:
            on_route.append(len(edges))
        edges.append(edge)

    for l, layer in enumerate(layers):
        att = layer.attention
        for e in range(len(att.weight)):
            add({"source": node_id("R", l - 1, int(att.source[e])), "target": node_id("A", l, int(att.target[e])),
                 "kind": "attention", "weight": float(att.weight[e]), "heads": [float(v) for v in att.heads[e]]},
                bool(reached.attention_edges[l][0, e]))  # fmt: skip
        for i in np.nonzero(layer.residual > tau)[0]:
            add({"source": node_id("R", l - 1, int(i)), "target": node_id("A", l, int(i)), "kind": "residual",
                 "weight": float(layer.residual[i])}, bool(reached.residual[l][0, i]))  # fmt: skip
        for i in np.nonzero(layer.ffn > tau)[0]:
            on = bool(reached.ffn[l][0, i])
            add({"source": node_id("A", l, int(i)), "target": node_id("F", l, int(i)), "kind": "ffn",
                 "weight": float(layer.ffn[i])}, on)  # fmt: skip
            add({"source": node_id("F", l, int(i)), "target": node_id("R", l, int(i)), "kind": "ffn",
                 "weight": float(layer.ffn[i])}, on)  # fmt: skip
        for i in np.nonzero(layer.carried > tau)[0]:
            add({"source": node_id("A", l, int(i)), "target": node_id("R", l, int(i)), "kind": "residual",
                 "weight": float(layer.carried[i])}, bool(reached.carried[l][0, i]))  # fmt: skip
    return nodes, edges, on_route


def _encoded(lm: LoadedModel, text: str | list[str]) -> Encoded:
    encoded = encode(lm, text)
    check_tokens(encoded, False)
    return encoded


def compute_routes(lm: LoadedModel, item: CorpusInput, options: RoutesOptions) -> RouteGraph:
    """The graph of one text and the route to the prediction at options.position."""
    if item.text_b is not None:
        raise InputError("routes reads one text, not a pair.")
    encoded = _encoded(lm, item.text_a)
    position = options.position if options.position >= 0 else encoded.n + options.position
    if not 0 <= position < encoded.n:
        raise InputError(
            f"position {options.position} is outside the input: it has {encoded.n} tokens (positions 0 to "
            f"{encoded.n - 1}, or -1 for the last)."
        )
    made = input_graph(lm, encoded, options.threshold, options.mode, options.kernel)
    nodes, edges, on_route = graph_json(made.graph, position)
    return RouteGraph(
        encoded.tokens,
        options.threshold,
        options.mode,
        nodes,
        edges,
        {"position": position, "edges": on_route},
        _prediction(lm, encoded, made.last, position),
        made.kernel,
    )


# --------------------------------------------------------------------------------------------- over a corpus


def route_accumulators(lm: LoadedModel, options: RoutesOptions) -> list:
    """An empty RouteFrequencyStats of the model's heads."""
    return [RouteFrequencyStats(lm.facts.n_layers, lm.facts.n_heads, options.threshold, options.mode)]


def fill_routes(lm: LoadedModel, inputs: list[CorpusInput], accumulators: list, batch_size: int,
                progress: Progress | None, options: RoutesOptions) -> list:  # fmt: skip
    """Every position's route of every input (one pass each), into the frequency."""
    (stats,) = accumulators
    encoded = [encode(lm, item.text_a, item.text_b) for item in inputs]
    kernel = choose_kernel(options.kernel, sum(route_work(lm, e.n) for e in encoded))  # once for the whole corpus
    for done, one in enumerate(encoded, start=1):
        graph = input_graph(lm, one, options.threshold, options.mode, kernel)  # type: ignore[arg-type]
        stats.add_graph(graph.graph)
        if progress is not None:
            progress(done, len(inputs))
    return accumulators


def frequency_result(stats: RouteFrequencyStats) -> RouteFrequency:
    frequency: list[list[float | None]] = [
        [None if math.isnan(v) else float(v) for v in row] for row in stats.frequency()
    ]
    return RouteFrequency(frequency, stats.routes, stats.threshold, stats.mode)


def compute_model_routes(
    lm: LoadedModel, inputs: list[CorpusInput] | None, options: RoutesOptions, scale: Scale
) -> RouteFrequency:
    """The route frequency over a corpus, here or on Ray (engine), as the other corpus statistics run."""
    if not inputs:
        raise InputError("routes reads a text (--text) or a corpus (--corpus).")
    run = run_accumulators(
        lm if scale.engine == "local" else lm.facts.name,
        inputs,
        partial(route_accumulators, options=options),
        partial(fill_routes, options=options),
        engine=scale.engine,
        device=scale.device,
        workers=scale.workers,
        cpus_per_worker=scale.cpus_per_worker,
    )
    return frequency_result(run.accumulators[0])


ROUTES: Analysis[RoutesOptions, Any] = Analysis(
    name="routes",
    help="information-flow routes (METHODS §21): a text's contribution graph and the route to the prediction at a "
    "position; --corpus: each head's route frequency",
    options=RoutesOptions,
    reads="model",
    result=RoutesResult,
    methods=(21,),
    compute=compute_routes,
    compute_model=compute_model_routes,
)
