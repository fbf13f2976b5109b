"""The `lens` analysis (METHODS §21): at one position of one input, the logit lens of every node's state (E, each
layer's A and R) with its top and bottom tokens and their rank change, the direct logit attribution of a token (or of
a pair) to every component (embeddings, each head, each attention bias, each feed-forward block) with the exactness of
the sum, each head's readout (its promoted and suppressed tokens) and the model's own prediction.

One forward pass of the stack through the residual decomposition (attnlib.core.residual.walk), keeping only the
position read; the model's own logits at that position from its own head applied to the stack's own output. A
masked-LM encoder is read through its whole head (the lens alone: its head is not linear after its norm)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from attnlib.analyses.attention import TARGET_HELP, source_of
from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.corpus import CorpusInput
from attnlib.core.families import UnsupportedModelError, layout
from attnlib.core.hooks import hooked
from attnlib.core.model import LoadedModel
from attnlib.core.residual import LayerParts, walk
from attnlib.core.runner import InputError, encode, model_inputs
from attnlib.core.seq2seq import source_inputs, target_of
from attnlib.results.files import malformed
from attnlib.stats.importance import mlm_head
from attnlib.stats.lens import (
    DEFAULT_TOP,
    HEAD_CHECK,
    Mode,
    Unembedding,
    check_head,
    dla_reason,
    extremes,
    head_reason,
    lens_tokens,
    probabilities,
    token_logit_gap,
    unembedding_of,
)

if TYPE_CHECKING:
    import pandas as pd

NODE_KINDS = ("E", "A", "R")
ENCODER_DECODER_KEYS = ("kind", "part", "source", "target", "target_from")  # an encoder-decoder's decoder, first
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
    target: str = option("", TARGET_HELP)
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
    cross_heads: list[list[float]] | None = None  # [layers][heads]: an encoder-decoder's cross-attention heads

    @property
    def total(self) -> float:
        """The sum of the parts: equals `logit` within max_error."""
        crossed = 0.0 if self.cross_heads is None else sum(map(sum, self.cross_heads))
        return (
            crossed
            + sum(map(sum, self.heads))
            + sum(self.ffn)
            + sum(self.attention_bias)
            + self.embeddings
            + self.constant
        )

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
            **({} if self.cross_heads is None else {"cross_heads": self.cross_heads}),
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
            cross_heads=None if "cross_heads" not in data else [[float(v) for v in r] for r in data["cross_heads"]],
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
    cross_readouts: list[list[Readout]] | None = None  # an encoder-decoder's cross-attention heads' readouts
    encoder_decoder: dict | None = None  # an encoder-decoder's kind, part, source tokens, target and target_from

    def to_json(self) -> dict:
        cross = {} if self.cross_readouts is None else {"cross_readouts": _readouts_json(self.cross_readouts)}
        return {
            **(self.encoder_decoder or {}),
            "tokens": self.tokens,
            "position": self.position,
            "mode": self.mode,
            "nodes": [n.to_json() for n in self.nodes],
            "dla": None if self.dla is None else self.dla.to_json(),
            "readouts": None if self.readouts is None else _readouts_json(self.readouts),
            "prediction": {"position": self.position, "top": [t.to_json("probability") for t in self.prediction]},
            "notes": dict(self.notes),
            **cross,
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
                readouts=None if readouts is None else _readouts_of(readouts),
                prediction=[ReadToken.from_json(t, "probability") for t in data["prediction"]["top"]],
                notes={str(k): str(v) for k, v in data.get("notes", {}).items()},
                cross_readouts=_readouts_of(data["cross_readouts"]) if "cross_readouts" in data else None,
                encoder_decoder={k: data[k] for k in ENCODER_DECODER_KEYS} if "part" in data else None,
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
        counts = {"layer": "Int64", "head": "Int64"}
        tables = {"Logit lens": pd.DataFrame(lens).astype({"layer": "Int64", "rank_change": "Int64"})}
        if self.dla is not None:
            tables["Direct logit attribution"] = pd.DataFrame(attribution_rows(self.dla, model)).astype(counts)
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


def _readouts_json(readouts: list[list[Readout]]) -> list:
    return [[r.to_json() for r in row] for row in readouts]


def _readouts_of(data: list) -> list[list[Readout]]:
    return [[Readout.from_json(r) for r in row] for row in data]


def attribution_rows(dla: Attribution, model: str) -> list[dict]:
    """Every component's DLA as rows (component, layer and head from 1, value) and the constant (beta W_U + b_U)."""
    rows = [{"model": model, "component": "embeddings", "layer": None, "head": None, "value": dla.embeddings}]
    for l, row in enumerate(dla.heads):
        rows += [
            {"model": model, "component": "head", "layer": l + 1, "head": h + 1, "value": v} for h, v in enumerate(row)
        ]
        rows.append({"model": model, "component": "attention bias", "layer": l + 1, "head": None,
                     "value": dla.attention_bias[l]})  # fmt: skip
        rows.append({"model": model, "component": "feed-forward", "layer": l + 1, "head": None, "value": dla.ffn[l]})
    rows.append({"model": model, "component": "constant", "layer": None, "head": None, "value": dla.constant})
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
    bias: torch.Tensor | None  # [d] (an encoder-decoder's decoder: its self- and cross-attention's together)
    ffn: torch.Tensor | None  # [d]
    cross: torch.Tensor | None = None  # [H, d] an encoder-decoder's cross-attention heads' outputs


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


@dataclass
class _Read:
    """One input read at position t: its tokens, the embedding and every layer's parts there, the model's own logits
    before soft-capping (None for a masked-LM head) and a note on an encoder-decoder's input."""

    tokens: list[str]
    t: int
    embedding: torch.Tensor
    kept: list[_AtPosition]
    own: torch.Tensor | None
    encoder_decoder: dict | None = None


def _stack_read(lm: LoadedModel, item: CorpusInput, position: int, linear: bool) -> _Read:
    """A decoder's or an encoder's one input through the residual decomposition (core.residual.walk)."""
    if item.text_b is not None:
        raise OptionError("lens reads one text (no pair).")
    encoded = encode(lm, item.text_a)
    t = resolve_position(position, encoded.n)
    kept: list[_AtPosition] = []
    output: list[torch.Tensor] = []

    def keep_output(_module, _args, out) -> None:
        output.append((out[0] if isinstance(out, tuple) else out.last_hidden_state)[0, t].detach().float())

    with hooked([lm.encoder], keep_output, after=True):
        embeddings, _ = walk(lm, model_inputs(lm, [encoded]), lambda parts: kept.append(_at(parts, t, linear)))
    own = _own_logits(lm, output[0]) if lm.causal_lm is not None else None
    return _Read(encoded.tokens, t, embeddings[t], kept, own)


def _head_outputs(context: torch.Tensor, projection: torch.nn.Module, n_heads: int) -> torch.Tensor:
    """Each head's output [H, d] from the output projection's input at one position [H * d_h]: its slice times the
    projection's columns of that head (W_O^h)."""
    weight = projection.weight.detach().float()  # [d, H d_h]
    d_h = weight.shape[1] // n_heads
    return torch.einsum("hk,dhk->hd", context.float().reshape(n_heads, d_h), weight.reshape(-1, n_heads, d_h))


def _carried_state_module(layer: torch.nn.Module, post_norm: bool) -> torch.nn.Module:
    """The module whose input is the state a decoder layer's feed-forward block adds to (A^l): T5's feed-forward
    sublayer; a post-norm (BART, Marian) layer's first feed-forward projection, which reads the normed state; a
    pre-norm BART-shaped layer's (mBART) norm before the feed-forward block."""
    if hasattr(layer, "layer"):
        return layer.layer[-1]
    return layer.fc1 if post_norm else layer.final_layer_norm


def _decoder_read(lm: LoadedModel, item: CorpusInput, options: LensOptions, linear: bool) -> _Read:
    """An encoder-decoder's decoder at one target position: hooks on its layers, its self- and cross-attention output
    projections (their inputs: each head's slice) and its feed-forward sublayer, in the whole model's own pass."""
    model = lm.seq2seq
    assert model is not None
    stack = model.get_decoder()
    own_heads, cross_heads = layout(stack, "norms", "decoder"), layout(stack, "norms", "cross")
    source = encode(lm, source_of(item))
    target = target_of(lm, source, source_of(item), options.target)
    t = resolve_position(options.position, len(target.input_ids))
    seen: dict[str, list[torch.Tensor]] = {k: [] for k in ("x", "out", "own", "cross", "carried")}

    def keep(name: str, after: bool = False):
        def hook(_module, args, *rest):
            value = rest[-1] if after else (args[0] if args else rest[0]["hidden_states"])
            value = value[0] if isinstance(value, tuple) else value
            seen[name].append(value[0, t].detach().float())

        return hook

    layers = [site.layer for site in own_heads.sites]
    carried = [_carried_state_module(layer, own_heads.family.post_layer_norm) for layer in layers]
    with contextlib.ExitStack() as hooks_on, torch.inference_mode():
        hooks_on.enter_context(hooked(layers, keep("x"), with_kwargs=True))
        hooks_on.enter_context(hooked(layers, keep("out", after=True), after=True))
        hooks_on.enter_context(hooked([s.output for s in own_heads.sites], keep("own")))
        hooks_on.enter_context(hooked([s.output for s in cross_heads.sites], keep("cross")))
        hooks_on.enter_context(hooked(carried, keep("carried")))
        logits = model(
            **source_inputs(lm, source), decoder_input_ids=torch.tensor([target.input_ids], device=lm.device)
        ).logits
    kept = []
    for l, (own_site, cross_site) in enumerate(zip(own_heads.sites, cross_heads.sites)):
        if not linear:
            kept.append(_AtPosition(seen["carried"][l], seen["out"][l], None, None, None))
            continue
        biases = [b.detach().float() for b in (own_site.output.bias, cross_site.output.bias) if b is not None]
        bias = sum(biases, torch.zeros_like(seen["x"][l]))
        kept.append(_AtPosition(seen["carried"][l], seen["out"][l],
                                _head_outputs(seen["own"][l], own_site.output, own_heads.n_heads), bias,
                                seen["out"][l] - seen["carried"][l],
                                _head_outputs(seen["cross"][l], cross_site.output, cross_heads.n_heads)))  # fmt: skip
    about = {"kind": "encoder-decoder", "part": "decoder", "source": source.tokens, "target": target.text,
             "target_from": target.source}  # fmt: skip
    return _Read(target.tokens, t, seen["x"][0], kept, logits[0, t].float(), about)


def seq2seq_dla_reason(lm: LoadedModel) -> str | None:
    """Why an encoder-decoder's decoder is not split into components (a post-norm decoder), in words; None otherwise."""
    if lm.seq2seq is None or not layout(lm.seq2seq.get_decoder(), "norms", "decoder").family.post_layer_norm:
        return None
    return (
        f"Direct logit attribution (METHODS §21) splits the last state into what each component adds; the decoder of "
        f"{lm.facts.name} normalises its sum after every sublayer (post-norm), so its last state is no sum of the "
        "components. The logit lens reads its states through its head."
    )


def compute_lens(lm: LoadedModel, item: CorpusInput, options: LensOptions) -> LensResult:
    """The lens, the attribution, the readouts and the prediction of one input at one position (METHODS §21)."""
    reason = head_reason(lm)
    if reason is not None:
        raise UnsupportedModelError(reason)
    refusal = dla_reason(lm) or seq2seq_dla_reason(lm)
    linear = refusal is None
    if not linear and (options.token or options.versus):
        raise UnsupportedModelError(refusal)
    if lm.mlm is not None and options.mode == "raw":
        raise OptionError(
            "mode raw reads a state through the unembedding alone; a masked-LM head's decoder reads the output of its "
            "own dense layer and LayerNorm, not a residual state, so only mode normalise reads this model."
        )
    if options.target and lm.seq2seq is None:
        raise OptionError("--target is the decoder's input of an encoder-decoder; this model reads one text.")
    token = token_id(lm, options.token, "token") if options.token else None
    versus = token_id(lm, options.versus, "versus") if options.versus else None
    read = (
        _decoder_read(lm, item, options, linear)
        if lm.seq2seq is not None
        else _stack_read(lm, item, options.position, linear)
    )
    states = torch.stack([read.embedding, *(s for k in read.kept for s in (k.carried, k.out))])  # E, A0, R0, A1, ...
    if read.own is not None:
        head = unembedding_of(lm)
        own = read.own
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
    dla = readouts = cross_readouts = None
    if linear:
        dla, readouts, cross_readouts = _attribution(head, own, read.embedding, read.kept,
                                                     token if token is not None else ids[0], versus, options.top, names)  # fmt: skip
        if dla.max_error > HEAD_CHECK * float(own.abs().max()):
            notes["dla"] = (
                f"The parts do not add up to the model's own logits (largest difference {dla.max_error:.3g}): attnlib's "
                f"split of this '{lm.facts.model_type}' model's layers into sums misses part of what they add, so read "
                "these attributions with care."
            )
    else:
        notes["dla"] = refusal or ""
    return LensResult(read.tokens, read.t, options.mode, nodes, dla, readouts, prediction, notes, cross_readouts,
                      read.encoder_decoder)  # fmt: skip


def _readouts(direct: torch.Tensor, n_heads: int, top: int, names) -> list[list[Readout]]:
    """Each head's promoted and suppressed tokens from its direct effects [L H, V], as [layers][heads]."""
    (up_ids, up), (down_ids, down) = extremes(direct, top)
    flat = [
        Readout([ReadToken(i, s, v) for i, s, v in zip(ui, names(ui), uv)],
                [ReadToken(i, s, v) for i, s, v in zip(di, names(di), dv)])
        for ui, uv, di, dv in zip(up_ids, up, down_ids, down)
    ]  # fmt: skip
    return [flat[l * n_heads : (l + 1) * n_heads] for l in range(len(flat) // n_heads)]


def _attribution(
    head: Unembedding, own: torch.Tensor, embedding: torch.Tensor, kept: list[_AtPosition], token: int,
    versus: int | None, top: int, names,
) -> tuple[Attribution, list[list[Readout]], list[list[Readout]] | None]:  # fmt: skip
    """DLA of every component at the position, its exactness over the vocabulary and every head's readout (an
    encoder-decoder's cross-attention heads' too). Every head's direct effect is read over the whole vocabulary (its
    readout); the other components' at the two tokens, and over the vocabulary through their sum (the same linear map
    of each: the parts' sum, as exactness needs)."""
    n_layers, n_heads = len(kept), kept[0].heads.shape[0]  # type: ignore[union-attr]
    last = kept[-1].out
    heads = head.direct(torch.cat([k.heads for k in kept]), last)  # [L H, V]
    cross = None
    if kept[0].cross is not None:
        cross = head.direct(torch.cat([k.cross for k in kept]), last)
    others = torch.stack([embedding, *(k.bias for k in kept), *(k.ffn for k in kept)])
    asked = [token] if versus is None else [token, versus]
    at_tokens = (head.gamma * head.centred(others) / head.scale(last)) @ head.rows[asked].T  # [1 + 2 L, 1 or 2]
    other_values = at_tokens[:, 0] - (0.0 if versus is None else at_tokens[:, 1])
    constant = head.constant()
    parts = heads.sum(0) + head.direct(others.sum(0, keepdim=True), last)[0]
    if cross is not None:
        parts = parts + cross.sum(0)
    max_error = float((parts + constant - own).abs().max())
    gap = lambda z: float(z[token] - (0.0 if versus is None else z[versus]))  # noqa: E731
    dla = Attribution(
        token=ReadToken(token, names([token])[0], float(own[token])),
        versus=None if versus is None else ReadToken(versus, names([versus])[0], float(own[versus])),
        heads=token_logit_gap(heads, token, versus).reshape(n_layers, n_heads).tolist(),
        ffn=other_values[1 + n_layers :].tolist(),
        attention_bias=other_values[1 : 1 + n_layers].tolist(),
        embeddings=float(other_values[0]),
        constant=gap(constant),
        logit=gap(own),
        max_error=max_error,
        cross_heads=None if cross is None else token_logit_gap(cross, token, versus).reshape(n_layers, -1).tolist(),
    )
    cross_readouts = None if cross is None else _readouts(cross, cross.shape[0] // n_layers, top, names)
    return dla, _readouts(heads, n_heads, top, names), cross_readouts


LENS: Analysis[LensOptions, LensResult] = Analysis(
    name="lens",
    help="the logit lens, direct logit attribution and every head's readout at one position of one input",
    options=LensOptions,
    reads="text",
    result=LensResult,
    methods=(21,),
    compute=compute_lens,
)
