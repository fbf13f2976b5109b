"""The Predictions page's state: its options in the URL, and one model's computations on the prompt (the routes, the
logit lens and attribution at a position, the next-token prediction), each cached, read from the commands' JSON
(`attnlib routes --json`, `attnlib lens --json`: node and edge ids, heads and layers 0-based)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import streamlit as st

from attnlib.analyses.registry import analyse
from attnlib.analyses.routes import RoutesOptions, route_cost
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel
from ui.sources.model_sidebar import model_named
from ui.sources.page_state import Option
from ui.sources.result_source import REFUSED

KEY = "pred"  # widget keys and download names start with it
DEFAULT_PROMPT = (
    "Mr and Mrs Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal. "
    "Mr Dursley of number four Privet"
)
ROUTES_DEFAULTS = RoutesOptions()  # METHODS §21's default tau and mode, the command's
MODES = ("renormalise", "cut")
LENS_MODES = ("normalise", "raw")
TOP = 10  # tokens in a lens table, a readout, and the prediction

TEXT = Option(f"{KEY}_text", "text", DEFAULT_PROMPT)
POSITION = Option(f"{KEY}_position", "pos", -1)  # the token whose next token is predicted; -1: the last
THRESHOLD = Option(f"{KEY}_threshold", "thr", ROUTES_DEFAULTS.threshold)
MODE = Option(f"{KEY}_mode", "mode", ROUTES_DEFAULTS.mode, MODES)
LENS_MODE = Option(f"{KEY}_lens_mode", "lens", LENS_MODES[0], LENS_MODES, omit_default=True)
TOKEN = Option(f"{KEY}_token", "tok", "")  # the token whose logit is attributed; empty: the predicted one
VERSUS = Option(f"{KEY}_versus", "versus", "")  # the token it is compared with; empty: none
# an encoder-decoder's target, which its decoder reads (the prompt is its source); empty: the model's greedy output
TARGET = Option(f"{KEY}_target", "target", "", omit_default=True)
PROMPT_OPTIONS = (TEXT, POSITION, THRESHOLD, MODE, LENS_MODE, TOKEN, VERSUS, TARGET)


def picked(name: str, sfx: str) -> Option:
    """A pick of one model's drawing (an edge, a head, a node), its own URL key per model (`edge`, `edge_2`)."""
    return Option(f"{KEY}_{name}{sfx}", f"{name}{sfx}", "", omit_default=True)


def lm_head_reason(lm: LoadedModel) -> str | None:
    """Why the model's prediction cannot be read (no LM head), in one sentence; None when it can."""
    if lm.causal_lm is not None or lm.mlm is not None or lm.seq2seq is not None:
        return None
    return (
        f"The prediction, the logit lens and logit attribution read the residual stream through a language-model head "
        f"(the final norm and the unembedding), and {lm.facts.name} has none: only its routes are shown."
    )


@st.cache_data(max_entries=8, show_spinner=False)
def cached_routes(model_name: str, text: str, position: int, threshold: float, mode: str,
                  target: str = "") -> dict[str, Any]:  # fmt: skip
    """`attnlib routes --text` (its JSON) of a model, once per text, position, threshold, mode and target."""
    found = analyse("routes", model_named(model_name), text=text, position=position, threshold=threshold, mode=mode,
                    target=target)  # fmt: skip
    return found.result.to_json()


@st.cache_data(max_entries=16, show_spinner=False)
def cached_lens(model_name: str, text: str, position: int, token: str, versus: str, mode: str,
                target: str = "") -> dict[str, Any]:  # fmt: skip
    """`attnlib lens --text` (its JSON) of a model at one position, once per token pair, mode and target."""
    found = analyse("lens", model_named(model_name), text=text, position=position, token=token, versus=versus,
                    mode=mode, top=TOP, target=target)  # fmt: skip
    return found.result.to_json()


@dataclass
class PromptView:
    """One model's computations on the prompt as the page draws them: the routes (None after a refusal), the lens at
    the position and the attribution of the token asked for (None without an LM head or after a refusal), and why a
    part is missing, in words."""

    model: str
    text: str
    position: int
    target: str = ""  # an encoder-decoder's target as given (empty: its greedy output)
    routes: dict[str, Any] | None = None
    lens: dict[str, Any] | None = None  # of the predicted token
    attribution: dict[str, Any] | None = None  # of the token (pair) asked for: the lens's own when none is
    refusals: dict[str, str] = field(default_factory=dict)  # part -> the sentence said instead
    no_head: bool = False  # the model has no LM head (said once, at the top of the page)

    def missing(self, part: str) -> str:
        """Why a part that reads the LM head is missing, in words (short where the page said it at the top)."""
        if self.no_head:
            return f"{self.model} has no language-model head: no {part}."
        return f"{self.model}: {self.refusals.get('lens', 'no ' + part)}"

    @property
    def tokens(self) -> list[str]:
        """The input's tokens (an encoder-decoder's: its target's, whose positions predict)."""
        return list((self.routes or self.lens or {}).get("tokens", []))

    @property
    def crosses(self) -> bool:
        """Whether the graph is an encoder-decoder's (its decoder's, with its encoder's)."""
        return bool(self.routes and self.routes.get("part") == "decoder")


def prompt_view(lm: LoadedModel, text: str, position: int, threshold: float, mode: str, lens_mode: str,
                token: str, versus: str, target: str = "") -> PromptView:  # fmt: skip
    """A model's routes and lens on the prompt (an encoder-decoder's: the prompt as its source, and the target);
    a user error (empty prompt, position outside, bad threshold or token) is kept as its sentence."""
    name = lm.facts.name
    target = target if lm.seq2seq is not None else ""
    view = PromptView(name, text, position, target)
    try:
        cost = route_cost(lm, CorpusInput(text), ROUTES_DEFAULTS)
        with st.spinner(f"{name}: {cost}…" if cost else f"{name}: routes…"):
            view.routes = cached_routes(name, text, position, threshold, mode, target)
        view.position = int(view.routes["route"]["position"])
    except REFUSED as exc:
        view.refusals["routes"] = str(exc)
        return view
    if lm_head_reason(lm) is not None:
        view.no_head = True
        return view
    try:
        view.lens = cached_lens(name, text, view.position, "", "", lens_mode, target)
    except REFUSED as exc:
        view.refusals["lens"] = str(exc)
        return view
    try:
        view.attribution = (
            cached_lens(name, text, view.position, token, versus, lens_mode, target) if token or versus else view.lens
        )
    except REFUSED as exc:  # a token that is not one of the vocabulary's: said beside the attribution alone
        view.refusals["attribution"] = str(exc)
    return view


# ---------- the graph, read from the routes JSON ---------------------------------------------------------------------
# An encoder-decoder's graph (`part` decoder) holds its encoder's nodes (part encoder: the source's positions) and its
# decoder's (part decoder, ids starting with "d": the target's); attention edges go into a stack's own attention nodes,
# cross edges from the encoder's last states into the decoder's A nodes.

ATTENTIONS = ("attention", "cross")  # the edge kinds that heads carry


def node_name(node: dict[str, Any]) -> str:
    """A node as the page names it (URL and lists): kind, layer from 1, position: 'A2:7', 'E:0'; an encoder-decoder's
    decoder nodes start with 'd': 'dA2:3'."""
    layer = "" if node["layer"] is None else str(int(node["layer"]) + 1)
    return f"{'d' if node.get('part') == 'decoder' else ''}{node['kind']}{layer}:{int(node['position'])}"


def nodes_by_id(routes: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    """The graph's nodes by id."""
    return {n["id"]: n for n in routes["nodes"]}


def route_part(routes: dict[str, Any]) -> str | None:
    """The stack whose positions predict: an encoder-decoder's decoder; None for one stack."""
    return "decoder" if routes.get("part") == "decoder" else None


def node_tokens(routes: dict[str, Any], node: dict[str, Any]) -> list[str]:
    """The tokens a node's position indexes: an encoder-decoder's encoder nodes the source's, else the input's."""
    if route_part(routes) is not None and node.get("part") == "encoder":
        return list(routes["source"])
    return list(routes["tokens"])


def edge_attention(routes: dict[str, Any], index: int) -> str | None:
    """Which attention an edge's heads are: None for one stack; an encoder-decoder's "encoder", "decoder" or "cross"."""
    edge = routes["edges"][index]
    if route_part(routes) is None:
        return None
    return "cross" if edge["kind"] == "cross" else nodes_by_id(routes)[edge["target"]].get("part")


def attention_edges(routes: dict[str, Any], position: int, on_route: bool = True) -> list[int]:
    """The indices of the attention (and cross) edges (of the route to the prediction, or of the whole graph): those
    into the position's attention nodes first, then the others, each heaviest first."""
    edges, nodes = routes["edges"], nodes_by_id(routes)
    among = routes["route"]["edges"] if on_route else range(len(edges))
    found = [int(e) for e in among if edges[int(e)]["kind"] in ATTENTIONS]
    part = route_part(routes)

    def into(e: int) -> bool:
        target = nodes[edges[e]["target"]]
        return int(target["position"]) == position and target.get("part") == part

    return sorted(found, key=lambda e: (not into(e), -float(edges[e]["weight"])))


def edge_name(routes: dict[str, Any], index: int) -> str:
    """An attention edge as the page names it (URL): layer from 1, key position, query position: '2:5>9'; an
    encoder-decoder's decoder self-attention edges start with 'd', its cross edges with 'x'."""
    nodes = nodes_by_id(routes)
    edge = routes["edges"][index]
    target = nodes[edge["target"]]
    prefix = {"decoder": "d", "cross": "x"}.get(edge_attention(routes, index) or "", "")
    return f"{prefix}{int(target['layer']) + 1}:{int(nodes[edge['source']]['position'])}>{int(target['position'])}"


def edge_text(routes: dict[str, Any], index: int, pretty) -> str:
    """An attention edge in words: its layer (and attention), key and query tokens, and weight."""
    nodes = nodes_by_id(routes)
    edge = routes["edges"][index]
    key, query = nodes[edge["source"]], nodes[edge["target"]]
    j, i = int(key["position"]), int(query["position"])
    keys, queries = pretty(node_tokens(routes, key)), pretty(node_tokens(routes, query))
    attention = edge_attention(routes, index)
    which = "" if attention is None else f" ({ATTENTION_WORDS[attention]})"
    return (
        f"layer {int(query['layer']) + 1}{which}: {queries[i]!r} ({i}) reads {keys[j]!r} ({j}), "
        f"weight {float(edge['weight']):.3f}"
    )


ATTENTION_WORDS = {"encoder": "encoder", "decoder": "decoder", "cross": "cross-attention"}


def edge_ends(routes: dict[str, Any], index: int) -> tuple[int, int, int]:
    """(layer, key position, query position) of an attention edge, 0-based."""
    nodes = nodes_by_id(routes)
    edge = routes["edges"][index]
    target = nodes[edge["target"]]
    return int(target["layer"]), int(nodes[edge["source"]]["position"]), int(target["position"])


def head_contribution_map(routes: dict[str, Any], layer: int, head: int, attention: str | None = None) -> np.ndarray:
    """[queries, keys]: head `head`'s share of each attention edge into layer `layer`'s attention nodes (query i, key
    j), as the mode leaves it (METHODS §21: c(p[h, j]) of node A^l_i); 0 where the graph has no edge. An
    encoder-decoder's `attention`: "encoder", "decoder" (its S nodes) or "cross" (its A nodes, keys the source's)."""
    nodes = nodes_by_id(routes)
    kind = "cross" if attention == "cross" else "attention"
    part = None if attention is None else ("decoder" if attention == "cross" else attention)
    n = len(routes["tokens"]) if part != "encoder" else len(routes["source"])
    m = len(routes["source"]) if attention in ("cross", "encoder") else n
    found = np.zeros((n, m))
    for edge in routes["edges"]:
        target = nodes[edge["target"]]
        if edge["kind"] != kind or target.get("part") != part:
            continue
        if int(target["layer"]) == layer:
            found[int(target["position"]), int(nodes[edge["source"]]["position"])] = float(edge["heads"][head])
    return found


def route_nodes(routes: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes the route to the prediction reaches (its edges' ends) that the lens reads (E, A, R; an
    encoder-decoder's: its decoder's), top first."""
    nodes = nodes_by_id(routes)
    part = route_part(routes)
    ids = {routes["edges"][int(e)][end] for e in routes["route"]["edges"] for end in ("source", "target")}
    reached = [nodes[i] for i in ids if nodes[i]["kind"] in ("E", "A", "R") and nodes[i].get("part") == part]
    order = {"E": 0, "A": 1, "R": 2}
    return sorted(reached, key=lambda n: (-(-1 if n["layer"] is None else int(n["layer"])), -order[n["kind"]],
                                          int(n["position"])))  # fmt: skip


def final_node(routes: dict[str, Any], position: int) -> dict[str, Any]:
    """The node the route starts from: R of the last layer at the position."""
    part = route_part(routes)
    last = [n for n in routes["nodes"] if n["kind"] == "R" and int(n["position"]) == position and n.get("part") == part]
    return max(last, key=lambda n: int(n["layer"]))
