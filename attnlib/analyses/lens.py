"""The `lens` analysis (METHODS §21): at one position of one input, the logit lens of every node's state (E, each
layer's A and R) with its top and bottom tokens and their rank change, the direct logit attribution of a token (or of
a pair) to every component (embeddings, each head, each attention bias, each feed-forward block) with the exactness of
the sum, each head's readout (its promoted and suppressed tokens) and the model's own prediction.

One forward pass of the stack through the residual decomposition (attnlib.core.residual.walk), keeping only the
position read; the model's own logits at that position from its own head applied to the stack's own output. A
masked-LM encoder is read through its whole head (the lens alone: its head is not linear after its norm)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.corpus import CorpusInput
from attnlib.core.families import UnsupportedModelError
from attnlib.core.hooks import hooked
from attnlib.core.model import LoadedModel
from attnlib.core.residual import LayerParts, walk
from attnlib.core.runner import InputError, encode, model_inputs
from attnlib.results.files import malformed
from attnlib.stats.importance import mlm_head
from attnlib.stats.lens import (
    DEFAULT_TOP,
    Mode,
    Unembedding,
    check_head,
    dla_reason,
    extremes,
    lens_reason,
    lens_tokens,
    probabilities,
    token_logit_gap,
    unembedding_of,
)

if TYPE_CHECKING:
    import pandas as pd

NODE_KINDS = ("E", "A", "R")
PREDICTION_TOP = 10  # the model's likeliest next tokens shown with their probabilities


@dataclass(frozen=True)
class LensOptions(Options):
    """The position read, the token attributed (and the one it is compared with), how many tokens, the lens's mode."""

    position: int = option(-1, "the position read, 0-based (negative counts from the end; default %(default)s: the "
                           "last, which predicts the next token)")  # fmt: skip
    token: str = option("", "the token whose logit is attributed: text that is one token of the model's vocabulary "
                        "(with its leading space where the vocabulary has one), or the vocabulary's own spelling; "
                        "default: the model's prediction at the position")  # fmt: skip
    versus: str = option("", "a second token: attribute the difference token - versus (default: none)")
    top: int = option(DEFAULT_TOP, "tokens of each lens table and readout, top and bottom (default %(default)s)",
                      minimum=1)  # fmt: skip
    mode: Mode = option("normalise", "normalise: read each state through the final norm and the unembedding (the "
                        "model's own head); raw: through the unembedding alone (default %(default)s)")  # fmt: skip


@dataclass
class LensToken:
    """One token of a lens table: its id, text, logit and rank change from the previous node (None for E)."""

    id: int
    token: str
    logit: float
    rank_change: int | None

    def to_json(self) -> dict:
        return {"id": self.id, "token": self.token, "logit": self.logit, "rank_change": self.rank_change}

    @classmethod
    def from_json(cls, data: dict) -> LensToken:
        change = data["rank_change"]
        return cls(int(data["id"]), str(data["token"]), float(data["logit"]), None if change is None else int(change))


@dataclass
class LensNode:
    """One node's reading: its kind ("E", "A", "R"), its layer (None for E), its top and bottom tokens."""

    kind: str
    layer: int | None
    top: list[LensToken]
    bottom: list[LensToken]

    @property
    def name(self) -> str:
        """E, A0, R0, ... (layers 0-based, as the JSON counts them)."""
        return self.kind if self.layer is None else f"{self.kind}{self.layer}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "layer": self.layer, "top": [t.to_json() for t in self.top],
                "bottom": [t.to_json() for t in self.bottom]}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> LensNode:
        if data["kind"] not in NODE_KINDS:
            raise ValueError(f"node kind must be one of {', '.join(NODE_KINDS)}")
        layer = data["layer"]
        return cls(str(data["kind"]), None if layer is None else int(layer),
                   [LensToken.from_json(t) for t in data["top"]], [LensToken.from_json(t) for t in data["bottom"]])  # fmt: skip


@dataclass
class ReadToken:
    """A token of a readout or of the prediction, and its value (a direct effect, or a probability)."""

    id: int
    token: str
    value: float

    def to_json(self, key: str = "value") -> dict:
        return {"id": self.id, "token": self.token, key: self.value}

    @classmethod
    def from_json(cls, data: dict, key: str = "value") -> ReadToken:
        return cls(int(data["id"]), str(data["token"]), float(data[key]))


@dataclass
class Readout:
    """One head's promoted and suppressed tokens: the largest and smallest of its direct effect over the vocabulary."""

    promoted: list[ReadToken]
    suppressed: list[ReadToken]

    def to_json(self) -> dict:
        return {"promoted": [t.to_json() for t in self.promoted], "suppressed": [t.to_json() for t in self.suppressed]}

    @classmethod
    def from_json(cls, data: dict) -> Readout:
        return cls(
            [ReadToken.from_json(t) for t in data["promoted"]], [ReadToken.from_json(t) for t in data["suppressed"]]
        )


@dataclass
class Attribution:
    """Direct logit attribution at the position: the token (and versus), every component's share of its logit (of the
    difference), what no component adds (beta W_U + b_U), the model's own logit (before soft-capping) and the largest
    difference, over the vocabulary, of the sum of the parts from the model's own logits."""

    token: ReadToken  # value: the model's own logit of it
    versus: ReadToken | None
    heads: list[list[float]]  # [layers][heads]
    ffn: list[float]  # [layers]
    attention_bias: list[float]  # [layers]
    embeddings: float
    constant: float
    logit: float  # the model's own (of the difference, for a pair)
    max_error: float

    @property
    def total(self) -> float:
        """The sum of the parts: equals `logit` within max_error."""
        return sum(map(sum, self.heads)) + sum(self.ffn) + sum(self.attention_bias) + self.embeddings + self.constant

    def to_json(self) -> dict:
        return {
            "token": self.token.to_json("logit"),
            "versus": None if self.versus is None else self.versus.to_json("logit"),
            "heads": self.heads,
            "ffn": self.ffn,
            "attention_bias": self.attention_bias,
            "embeddings": self.embeddings,
            "constant": self.constant,
            "logit": self.logit,
            "max_error": self.max_error,
        }

    @classmethod
    def from_json(cls, data: dict) -> Attribution:
        versus = data["versus"]
        return cls(
            token=ReadToken.from_json(data["token"], "logit"),
            versus=None if versus is None else ReadToken.from_json(versus, "logit"),
            heads=[[float(v) for v in row] for row in data["heads"]],
            ffn=[float(v) for v in data["ffn"]],
            attention_bias=[float(v) for v in data["attention_bias"]],
            embeddings=float(data["embeddings"]),
            constant=float(data["constant"]),
            logit=float(data["logit"]),
            max_error=float(data["max_error"]),
        )


@dataclass
class LensResult:
    """The command's JSON: tokens, position, mode, nodes (the lens of E, then each layer's A and R at the position),
    dla (None where not defined, `notes` saying why), readouts [layers][heads] (likewise), the model's prediction at
    the position (its likeliest tokens and their probabilities) and notes."""

    tokens: list[str]
    position: int
    mode: str
    nodes: list[LensNode]
    dla: Attribution | None
    readouts: list[list[Readout]] | None
    prediction: list[ReadToken]
    notes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "tokens": self.tokens,
            "position": self.position,
            "mode": self.mode,
            "nodes": [n.to_json() for n in self.nodes],
            "dla": None if self.dla is None else self.dla.to_json(),
            "readouts": None if self.readouts is None else [[r.to_json() for r in row] for row in self.readouts],
            "prediction": {"position": self.position, "top": [t.to_json("probability") for t in self.prediction]},
            "notes": dict(self.notes),
        }

    @classmethod
    def from_json(cls, data: dict) -> LensResult:
        with malformed("`lens` result"):
            dla, readouts = data["dla"], data["readouts"]
            return cls(
                tokens=[str(t) for t in data["tokens"]],
                position=int(data["position"]),
                mode=str(data["mode"]),
                nodes=[LensNode.from_json(n) for n in data["nodes"]],
                dla=None if dla is None else Attribution.from_json(dla),
                readouts=None if readouts is None else [[Readout.from_json(r) for r in row] for row in readouts],
                prediction=[ReadToken.from_json(t, "probability") for t in data["prediction"]["top"]],
                notes={str(k): str(v) for k, v in data.get("notes", {}).items()},
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """The lens (one row per node, end and rank), the attribution of every component and every head's readout;
        layers and heads numbered from 1."""
        import pandas as pd

        lens = [
            {"model": model, "node": node.name, "kind": node.kind, "layer": None if node.layer is None else node.layer + 1,
             "end": end, "rank": rank + 1, "id": t.id, "token": t.token, "logit": t.logit, "rank_change": t.rank_change}
            for node in self.nodes for end, listed in (("top", node.top), ("bottom", node.bottom))
            for rank, t in enumerate(listed)
        ]  # fmt: skip
        tables = {"Logit lens": pd.DataFrame(lens)}
        if self.dla is not None:
            tables["Direct logit attribution"] = pd.DataFrame(attribution_rows(self.dla, model))
        if self.readouts is not None:
            rows = [
                {"model": model, "layer": l + 1, "head": h + 1, "direction": direction, "rank": rank + 1, "id": t.id,
                 "token": t.token, "value": t.value}
                for l, row in enumerate(self.readouts) for h, readout in enumerate(row)
                for direction, listed in (("promoted", readout.promoted), ("suppressed", readout.suppressed))
                for rank, t in enumerate(listed)
            ]  # fmt: skip
            tables["Head readouts"] = pd.DataFrame(rows)
        return tables


def attribution_rows(dla: Attribution, model: str) -> list[dict]:
    """Every component's DLA as rows (component, layer and head from 1, value), the constant and the model's logit."""
    rows = [{"model": model, "component": "embeddings", "layer": None, "head": None, "value": dla.embeddings}]
    for l, row in enumerate(dla.heads):
        rows += [
            {"model": model, "component": "head", "layer": l + 1, "head": h + 1, "value": v} for h, v in enumerate(row)
        ]
        rows.append({"model": model, "component": "attention bias", "layer": l + 1, "head": None,
                     "value": dla.attention_bias[l]})  # fmt: skip
        rows.append({"model": model, "component": "feed-forward", "layer": l + 1, "head": None, "value": dla.ffn[l]})
    rows.append({"model": model, "component": "constant", "layer": None, "head": None, "value": dla.constant})
    rows.append({"model": model, "component": "model's logit", "layer": None, "head": None, "value": dla.logit})
    return rows


# ------------------------------------------------------------------------------------ computing it


def resolve_position(position: int, n: int) -> int:
    """The 0-based position (negative counts from the end); InputError naming the input's positions when outside."""
    if not -n <= position < n:
        raise InputError(f"position {position} is outside the input: it has {n} tokens (positions 0 to {n - 1}, or -1 "
                         f"to -{n} from the end).")  # fmt: skip
    return position % n


def token_id(lm: LoadedModel, text: str, what: str) -> int:
    """The id of a token given as text (one token when encoded) or as the vocabulary spells it; InputError saying what
    it encodes to otherwise."""
    tokenizer = lm.tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) == 1:
        return int(ids[0])
    spelled = tokenizer.get_vocab().get(text)
    if spelled is not None:
        return int(spelled)
    if not ids:
        raise InputError(f"{what} {text!r} encodes to no token: give one token of the model's vocabulary.")
    pieces = ", ".join(repr(t) for t in tokenizer.convert_ids_to_tokens(ids))
    raise InputError(f"{what} {text!r} is {len(ids)} tokens of this model's vocabulary ({pieces}), not one: give one "
                     "token (with its leading space where the vocabulary has one, e.g. ' Drive').")  # fmt: skip


@dataclass
class _AtPosition:
    """What the lens and the attribution read of one layer at the position t."""

    carried: torch.Tensor  # [d] A^l_t (post-norm: the normed state)
    out: torch.Tensor  # [d] R^l_t
    heads: torch.Tensor | None  # [H, d] o[l, h, t] as added to the residual; None for post-norm
    bias: torch.Tensor | None  # [d]
    ffn: torch.Tensor | None  # [d]


def _at(parts: LayerParts, t: int, linear: bool) -> _AtPosition:
    if not linear:
        return _AtPosition(parts.carried[t], parts.out[t], None, None, None)
    weights, values = parts.attention_parts()
    heads = torch.einsum("hj,hjd->hd", weights[:, t], values)
    return _AtPosition(parts.carried[t], parts.out[t], heads, parts.added_bias()[t], parts.ffn[t])


def _own_logits(lm: LoadedModel, stack_output: torch.Tensor) -> torch.Tensor:
    """The model's own logits before soft-capping at one position, from its own head module on its stack's output."""
    whole = lm.causal_lm
    assert whole is not None
    with torch.inference_mode():
        z = whole.get_output_embeddings()(stack_output).float()
    return z * float(getattr(whole, "logit_scale", None) or 1.0)


def compute_lens(lm: LoadedModel, item: CorpusInput, options: LensOptions) -> LensResult:
    """The lens, the attribution, the readouts and the prediction of one input at one position (METHODS §21)."""
    reason = lens_reason(lm)
    if reason is not None:
        raise UnsupportedModelError(reason)
    if item.text_b is not None:
        raise OptionError("lens reads one text (no pair).")
    linear = dla_reason(lm) is None
    if not linear and (options.token or options.versus):
        raise UnsupportedModelError(dla_reason(lm))
    if not linear and options.mode == "raw":
        raise OptionError(
            "mode raw reads a state through the unembedding alone; a masked-LM head's decoder reads the output of its "
            "own dense layer and LayerNorm, not a residual state, so only mode normalise reads this model."
        )
    encoded = encode(lm, item.text_a)
    t = resolve_position(options.position, encoded.n)
    token = token_id(lm, options.token, "token") if options.token else None
    versus = token_id(lm, options.versus, "versus") if options.versus else None
    batch = model_inputs(lm, [encoded])
    kept: list[_AtPosition] = []
    output: list[torch.Tensor] = []

    def keep_output(_module, _args, out) -> None:
        output.append((out[0] if isinstance(out, tuple) else out.last_hidden_state)[0, t].detach().float())

    with hooked([lm.encoder], keep_output, after=True):
        embeddings, _ = walk(lm, batch, lambda parts: kept.append(_at(parts, t, linear)))
    states = torch.stack([embeddings[t], *(s for k in kept for s in (k.carried, k.out))])  # E, A0, R0, A1, ...
    if linear:
        head = unembedding_of(lm)
        own = _own_logits(lm, output[0])
        check_head(head.uncapped(states[-1]), own, lm.facts.name)
        readings = head.logits(states, options.mode)
        final = head.cap(own)
    else:
        head_fn = mlm_head(lm)
        with torch.inference_mode():
            readings = head_fn(states).float()
        final = readings[-1]
    names = lm.tokenizer.convert_ids_to_tokens
    nodes = []
    for index, (top, bottom) in enumerate(lens_tokens(readings, options.top)):
        layer = None if index == 0 else (index - 1) // 2
        kind = "E" if index == 0 else ("A", "R")[(index - 1) % 2]
        listed = [
            [LensToken(i, s, v, None if c is None else c[j]) for j, (i, s, v) in
             enumerate(zip(part.ids, names(part.ids), part.logits))]
            for part in (top, bottom)
            for c in [part.rank_change]
        ]  # fmt: skip
        nodes.append(LensNode(kind, layer, listed[0], listed[1]))
    ids, probs = probabilities(final, PREDICTION_TOP)
    prediction = [ReadToken(i, s, p) for i, s, p in zip(ids, names(ids), probs)]
    notes: dict[str, str] = {}
    dla = readouts = None
    if linear:
        dla, readouts = _attribution(head, own, embeddings[t], kept, token if token is not None else ids[0], versus,
                                     options.top, names)  # fmt: skip
    else:
        notes["dla"] = dla_reason(lm) or ""
    return LensResult(encoded.tokens, t, options.mode, nodes, dla, readouts, prediction, notes)


def _attribution(head: Unembedding, own: torch.Tensor, embedding: torch.Tensor, kept: list[_AtPosition], token: int,
                 versus: int | None, top: int, names) -> tuple[Attribution, list[list[Readout]]]:  # fmt: skip
    """DLA of every component at the position, its exactness over the vocabulary and every head's readout."""
    n_heads = kept[0].heads.shape[0]  # type: ignore[union-attr]
    rows = [embedding]
    for k in kept:
        rows += [*k.heads, k.bias, k.ffn]  # type: ignore[misc]
    components = torch.stack(rows)  # [1 + L (H + 2), d]
    last = kept[-1].out
    direct = head.direct(components, last)  # [K, V]
    constant = head.constant()
    max_error = float((direct.sum(0) + constant - own).abs().max())
    values = token_logit_gap(direct, token, versus).tolist()
    gap = lambda z: float(z[token] - (0.0 if versus is None else z[versus]))  # noqa: E731
    per_layer = n_heads + 2
    layers = [values[1 + l * per_layer : 1 + (l + 1) * per_layer] for l in range(len(kept))]
    dla = Attribution(
        token=ReadToken(token, names([token])[0], float(own[token])),
        versus=None if versus is None else ReadToken(versus, names([versus])[0], float(own[versus])),
        heads=[row[:n_heads] for row in layers],
        ffn=[row[n_heads + 1] for row in layers],
        attention_bias=[row[n_heads] for row in layers],
        embeddings=values[0],
        constant=gap(constant),
        logit=gap(own),
        max_error=max_error,
    )
    head_rows = torch.cat([direct[1 + l * per_layer : 1 + l * per_layer + n_heads] for l in range(len(kept))])
    (up_ids, up), (down_ids, down) = extremes(head_rows, top)
    flat = [
        Readout([ReadToken(i, s, v) for i, s, v in zip(ui, names(ui), uv)],
                [ReadToken(i, s, v) for i, s, v in zip(di, names(di), dv)])
        for ui, uv, di, dv in zip(up_ids, up, down_ids, down)
    ]  # fmt: skip
    return dla, [flat[l * n_heads : (l + 1) * n_heads] for l in range(len(kept))]


LENS: Analysis[LensOptions, LensResult] = Analysis(
    name="lens",
    help="the logit lens, direct logit attribution and every head's readout at one position of one input",
    options=LensOptions,
    reads="text",
    result=LensResult,
    methods=(21,),
    compute=compute_lens,
)
