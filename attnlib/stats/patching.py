"""Activation patching and attribution patching (METHODS §22): the clean and corrupted runs of one pair, the metric
at a position, every head's context vector (§15: the input slice of the attention output projection) patched from
the other run, the residual stream patched at one layer and position, and the first-order estimate of every head
from one backward pass.

Patched runs are batched: each row of a batch is the base input with a different head (or head and position, or
layer and position) patched, through replay.editing_contexts (the hook that ablation uses) or a replaced layer input.
A decoder's metric at position t reads only positions 0..t, so its inputs are cut after t (exact, and cheaper);
positions after t score 0. The LM head runs at position t only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from attnlib.core.errors import InputError
from attnlib.core.families import Layout, Part, UnsupportedModelError, family_for, layout, unsupported_reason
from attnlib.core.hooks import hooked, site_modules
from attnlib.core.model import LoadedModel
from attnlib.core.replay import captured_contexts, editing_contexts
from attnlib.core.runner import Encoded, encode, model_inputs
from attnlib.core.seq2seq import encode_target
from attnlib.stats.importance import mlm_head

Metric = Literal["logit-diff", "logprob"]
Direction = Literal["denoise", "noise"]
Grid = Literal["heads", "heads-positions", "residual"]
METRICS: tuple[Metric, ...] = ("logit-diff", "logprob")
DIRECTIONS: tuple[Direction, ...] = ("denoise", "noise")
NO_DIFFERENCE = 1e-6  # |m_c - m_r| below this: nothing to recover (refused)
ROW_TOKENS = 2048  # patched rows per batch: about this many tokens (more rows were slower per row on CPU)
Patch = tuple[Part, int, int, int | None]  # (part, layer, head, position or None for every position)


class PatchingUnavailable(UnsupportedModelError):
    """Patching is not defined for this model (no LM head, or heads attnlib cannot reach); the message says why."""


class PairError(InputError):
    """A clean and corrupted pair that cannot be patched (token counts, answer tokens, no difference)."""


def unavailable_reason(lm: LoadedModel) -> str | None:
    """Why this model's heads cannot be patched, in words; None when they can."""
    model_type = lm.encoder.config.model_type
    if family_for(lm.encoder.config) is None:
        return (
            f"Activation patching (METHODS §22) is not available for '{model_type}' models: attnlib does not know "
            "where their heads' context vectors enter the attention output projection."
        )
    replay = unsupported_reason(lm.encoder.config, "ablation")
    if replay is not None:
        return f"Activation patching (METHODS §22) patches heads as the ablation does, which it cannot here: {replay}"
    if lm.seq2seq is not None:
        return None
    if lm.facts.causal and lm.causal_lm is None:
        return (
            f"{lm.facts.name} has no trained language-model head, so the metric of activation patching (METHODS §22), "
            "a logit difference or log-probability of its prediction, is not defined for it."
        )
    if not lm.facts.causal and lm.mlm is None:
        return (
            f"{lm.facts.name} has no trained masked-language-model head, so the metric of activation patching "
            "(METHODS §22), read at a masked position, is not defined for it."
        )
    return None


def check_available(lm: LoadedModel) -> None:
    """Raise PatchingUnavailable with the reason when unavailable_reason gives one."""
    reason = unavailable_reason(lm)
    if reason is not None:
        raise PatchingUnavailable(reason)


def parts_of(lm: LoadedModel) -> tuple[Part, ...]:
    """The attentions whose heads are patched: an encoder-decoder's three, any other model's one."""
    return ("encoder", "decoder", "cross") if lm.seq2seq is not None else ("encoder",)


def layouts(lm: LoadedModel) -> dict[Part, Layout]:
    """Each patched part's layout (an encoder-decoder's decoder and cross attention in its decoder stack)."""
    found = {"encoder": layout(lm.encoder, "ablation")}
    if lm.seq2seq is not None:
        decoder = lm.seq2seq.get_decoder()
        found |= {part: layout(decoder, "norms", part) for part in ("decoder", "cross")}
    return found  # type: ignore[return-value]


def token_id(lm: LoadedModel, text: str, what: str) -> int:
    """The id of a one-token answer: its text encodes to one token, or it is a token of the vocabulary as written
    (GPT-2's 'Ġcat'); PairError otherwise."""
    tok = lm.tokenizer
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if len(ids) == 1:
        return int(ids[0])
    as_token = tok.convert_tokens_to_ids(text)
    if isinstance(as_token, int) and as_token != tok.unk_token_id and as_token is not None:
        return as_token
    pieces = tok.convert_ids_to_tokens(ids)
    raise PairError(
        f"the {what} {text!r} is {len(ids)} tokens ({', '.join(map(repr, pieces)) or 'none'}), not one: "
        "give one token (a decoder's word usually starts with a space)."
    )


@dataclass
class Pair:
    """One clean and corrupted pair as patching runs it: each run's model inputs (cut after t for a decoder), its
    context vectors per part and layer ([1, n, heads * d]) and its layer inputs ([1, n, hidden]), the metric's
    tokens and both runs' metrics."""

    lm: LoadedModel
    clean: Encoded
    corrupted: Encoded
    position: int  # t, 0-based
    metric: Metric
    answer: int
    wrong: int | None
    inputs: dict[str, dict]  # "clean"/"corrupted" -> model inputs
    contexts: dict[str, dict[Part, list[torch.Tensor]]] = field(default_factory=dict)
    layer_inputs: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    clean_metric: float = 0.0
    corrupted_metric: float = 0.0
    graph: tuple | None = None  # (direction, m of its base run with its graph, the deltas): attribution's pass

    @property
    def n(self) -> int:
        """The positions of the runs as patched (a decoder's: 0..t)."""
        return int(self.inputs["clean"]["input_ids"].shape[1])

    @property
    def difference(self) -> float:
        return self.clean_metric - self.corrupted_metric


def _position(lm: LoadedModel, clean: Encoded, position: int | None, n_out: int) -> int:
    """t: the given position (negative counts from the end), else the last, or a masked-LM's first mask token."""
    if position is None and not lm.facts.causal and lm.seq2seq is None:
        masks = [i for i, t in enumerate(clean.input_ids) if t == lm.tokenizer.mask_token_id]
        if not masks:
            raise PairError(
                f"a masked-LM's metric is read at a masked position: put {lm.tokenizer.mask_token} in the clean text, "
                "or give the position."
            )
        return masks[0]
    t = n_out - 1 if position is None else position
    t = t + n_out if t < 0 else t
    if not 0 <= t < n_out:
        raise PairError(f"the position {position} is outside the {n_out} positions of the prediction (0-{n_out - 1}).")
    return t


def _cut(batch: dict, n: int) -> dict:
    return {k: v[:, :n] if v.dim() == 2 else v for k, v in batch.items()}


def _repeated(batch: dict, rows: int) -> dict:
    return {k: v.repeat(rows, *([1] * (v.dim() - 1))) for k, v in batch.items()}


def logits_at(lm: LoadedModel, batch: dict, t: int) -> torch.Tensor:
    """The model's logits at position t of every row [R, vocab] (an encoder-decoder's decoder logits)."""
    if lm.seq2seq is not None:
        return lm.seq2seq(**batch, use_cache=False).logits[:, t]
    extra = {"use_cache": False} if lm.facts.causal else {}
    hidden = lm.encoder(**batch, **extra).last_hidden_state[:, t]
    return mlm_head(lm)(hidden)


def metric_of(logits: torch.Tensor, metric: Metric, answer: int, wrong: int | None) -> torch.Tensor:
    """m per row [R] (float64): z(w) - z(w'), or log p(w)."""
    z = logits.double()
    if metric == "logprob":
        return torch.log_softmax(z, dim=-1)[:, answer]
    assert wrong is not None
    return z[:, answer] - z[:, wrong]


@contextlib.contextmanager
def _captured(pair: Pair, residual: bool) -> Iterator[tuple[dict, list]]:
    """Within the context, one forward pass records every part's context vectors (and the main stack's layer
    inputs)."""
    lays = layouts(pair.lm)
    layer_inputs: list[torch.Tensor] = []
    with contextlib.ExitStack() as stack:
        seen = {part: stack.enter_context(captured_contexts(lay)) for part, lay in lays.items()}
        if residual:
            stack.enter_context(_layer_inputs(lays["encoder"], lambda _l, x: layer_inputs.append(x.detach())))
        yield seen, layer_inputs


@contextlib.contextmanager
def _layer_inputs(lay: Layout, change: Callable[[int, torch.Tensor], torch.Tensor | None]) -> Iterator[None]:
    """Within the context, every layer application's hidden-state input goes through change(layer, x) (None keeps
    it), in call order (ALBERT's shared layer: its k-th call is layer k)."""
    order: dict[torch.nn.Module, list[int]] = {}
    for index, site in enumerate(lay.sites):
        order.setdefault(site.layer, []).append(index)
    calls = dict.fromkeys(order, 0)

    def hook(module, args, kwargs):
        index = order[module][calls[module] % len(order[module])]
        calls[module] += 1
        x = args[0] if args else kwargs["hidden_states"]
        new = change(index, x)
        if new is None:
            return None
        return ((new, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": new})

    with hooked(site_modules(lay, "layer"), hook, with_kwargs=True):
        yield


def prepare_pair(
    lm: LoadedModel,
    clean: str,
    corrupted: str,
    *,
    position: int | None = None,
    answer: str | None = None,
    wrong: str | None = None,
    metric: Metric = "logit-diff",
    target: str | None = None,
    residual: bool = False,
    attribution: Direction | None = None,
) -> Pair:
    """Run the clean and corrupted inputs once: their context vectors, layer inputs and metrics (with `attribution`,
    the base run of that direction differentiable, for attribution_scores' one backward pass); PairError for token
    counts that differ, an answer that is not one token, or a metric that does not differ."""
    check_available(lm)
    enc_clean, enc_corrupted = encode(lm, clean), encode(lm, corrupted)
    if enc_clean.n != enc_corrupted.n:
        raise PairError(
            f"the clean and corrupted inputs must have as many tokens: the clean has {enc_clean.n}, the corrupted "
            f"{enc_corrupted.n}."
        )
    inputs = {"clean": model_inputs(lm, [enc_clean]), "corrupted": model_inputs(lm, [enc_corrupted])}
    n_out = enc_clean.n
    if lm.seq2seq is not None:
        start = lm.seq2seq.config.decoder_start_token_id
        ids = [start] if not target else encode_target(lm, target).input_ids
        decoder = torch.tensor([ids], device=lm.device)
        inputs = {k: {**v, "decoder_input_ids": decoder} for k, v in inputs.items()}
        n_out = len(ids)
    t = _position(lm, enc_clean, position, n_out)
    if lm.facts.causal:  # the prediction at t reads positions 0..t only
        inputs = {k: _cut(v, t + 1) for k, v in inputs.items()}
    w = None if answer is None else token_id(lm, answer, "answer")
    w_wrong = None if wrong is None else token_id(lm, wrong, "wrong answer")
    pair = Pair(lm, enc_clean, enc_corrupted, t, metric, -1, None, inputs)
    if lm.seq2seq is None:
        mlm_head(lm)  # checked once against the model's own forward pass, before anything is captured
    logits = {}
    gradient_run = None if attribution is None else _base_and_source(attribution)[0]
    deltas: dict = {}
    for run in ("clean", "corrupted"):
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            seen, layer_inputs = stack.enter_context(_captured(pair, residual))
            if run == gradient_run:  # the base run of attribution patching, differentiable, in the same pass
                deltas = stack.enter_context(_differentiable(lm))
            logits[run] = logits_at(lm, inputs[run], t)
        pair.contexts[run] = {part: [c.detach() for _, c in sorted(s, key=lambda p: p[0])] for part, s in seen.items()}
        pair.layer_inputs[run] = layer_inputs
    pair.answer = int(logits["clean"][0].detach().argmax()) if w is None else w
    if metric == "logit-diff":
        pair.wrong = int(logits["corrupted"][0].argmax()) if w_wrong is None else w_wrong
    m_c, m_r = (
        float(metric_of(logits[r].detach(), metric, pair.answer, pair.wrong)[0]) for r in ("clean", "corrupted")
    )
    if attribution is not None and gradient_run is not None:
        pair.graph = (attribution, metric_of(logits[gradient_run], metric, pair.answer, pair.wrong).sum(), deltas)
    pair.clean_metric, pair.corrupted_metric = m_c, m_r
    if abs(m_c - m_r) < NO_DIFFERENCE:
        same = " (the clean and corrupted runs predict the same top token: give the answers)" if w is None else ""
        raise PairError(
            f"the metric does not differ between the clean and corrupted runs ({m_c:.6g} and {m_r:.6g}){same}: "
            "there is nothing for patching to recover."
        )
    return pair


def _base_and_source(direction: Direction) -> tuple[str, str]:
    """The run that is patched and the run its values come from."""
    return ("corrupted", "clean") if direction == "denoise" else ("clean", "corrupted")


def scores(pair: Pair, m: torch.Tensor, direction: Direction) -> np.ndarray:
    """§22's normalised scores of patched metrics m [V]: (m - m_r) / (m_c - m_r), or (m_c - m) / (m_c - m_r)."""
    m = m.cpu().numpy()
    if direction == "denoise":
        return (m - pair.corrupted_metric) / pair.difference
    return (pair.clean_metric - m) / pair.difference


def _rows_per_batch(pair: Pair) -> int:
    return max(1, ROW_TOKENS // max(pair.n, 1))


def patch_heads(pair: Pair, patches: Sequence[Patch], direction: Direction) -> np.ndarray:
    """The score of every patch [len(patches)]: the base run with that head's context vector (at every position, or
    at one) taken from the other run, the patches batched one per row."""
    base, source = _base_and_source(direction)
    lays = layouts(pair.lm)
    d = {part: lay.head_dim for part, lay in lays.items()}
    values = pair.contexts[source]
    found = np.zeros(len(patches))
    size = _rows_per_batch(pair)
    for first in range(0, len(patches), size):
        chunk = patches[first : first + size]
        by_layer: dict[tuple[Part, int], list[tuple[int, int, int | None]]] = {}
        for row, (part, layer, head, pos) in enumerate(chunk):
            by_layer.setdefault((part, layer), []).append((row, head, pos))

        def edit_of(part: Part, by_layer=by_layer):
            def edit(index: int, c: torch.Tensor) -> torch.Tensor | None:
                todo = by_layer.get((part, index))
                if not todo:
                    return None
                out = c.clone(memory_format=torch.contiguous_format)
                src = values[part][index][0].to(out.dtype)  # [n, heads * d]
                for row, head, pos in todo:
                    cols = slice(head * d[part], (head + 1) * d[part])
                    if pos is None:
                        out[row, :, cols] = src[:, cols]
                    else:
                        out[row, pos, cols] = src[pos, cols]
                return out

            return edit

        with torch.no_grad(), contextlib.ExitStack() as stack:
            for part, lay in lays.items():
                stack.enter_context(editing_contexts(lay, edit_of(part)))
            logits = logits_at(pair.lm, _repeated(pair.inputs[base], len(chunk)), pair.position)
        m = metric_of(logits, pair.metric, pair.answer, pair.wrong)
        found[first : first + len(chunk)] = scores(pair, m, direction)
    return found


def every_head(lay: Layout, part: Part, position: int | None = None) -> list[Patch]:
    return [(part, l, h, position) for l in range(len(lay.sites)) for h in range(lay.n_heads)]


def head_scores(pair: Pair, direction: Direction) -> dict[str, np.ndarray]:
    """Every head of every part patched at every position: part -> [layers, heads]."""
    out: dict[str, np.ndarray] = {}
    for part, lay in layouts(pair.lm).items():
        values = patch_heads(pair, every_head(lay, part), direction)
        out[part] = values.reshape(len(lay.sites), lay.n_heads)
    return out


def head_position_scores(pair: Pair, direction: Direction, n_positions: int) -> dict[str, np.ndarray]:
    """Every head patched at one position q at a time: part -> [layers, heads, positions] (the main stack's
    positions; an encoder-decoder's decoder and cross heads over the decoder's). Positions a decoder does not read
    (after t) score 0."""
    out: dict[str, np.ndarray] = {}
    for part, lay in layouts(pair.lm).items():
        n = pair.n if part == "encoder" else int(pair.inputs["clean"]["decoder_input_ids"].shape[1])
        L, H = len(lay.sites), lay.n_heads
        width = n_positions if part == "encoder" else n
        grid = np.zeros((L, H, width))
        patches = [(part, l, h, q) for l in range(L) for h in range(H) for q in range(n)]
        grid[:, :, :n] = patch_heads(pair, patches, direction).reshape(L, H, n)
        out[part] = grid
    return out


def residual_scores(pair: Pair, direction: Direction, n_positions: int) -> np.ndarray:
    """x^l_q (the input of layer l at position q) of the base run replaced by the other run's: [layers, positions]
    of the main stack (an encoder-decoder's encoder); positions a decoder does not read score 0."""
    base, source = _base_and_source(direction)
    lay = layouts(pair.lm)["encoder"]
    values = pair.layer_inputs[source]
    L, n = len(lay.sites), pair.n
    patches = [(l, q) for l in range(L) for q in range(n)]
    found = np.zeros(len(patches))
    size = _rows_per_batch(pair)
    for first in range(0, len(patches), size):
        chunk = patches[first : first + size]
        by_layer: dict[int, list[tuple[int, int]]] = {}
        for row, (l, q) in enumerate(chunk):
            by_layer.setdefault(l, []).append((row, q))

        def change(index: int, x: torch.Tensor, by_layer=by_layer) -> torch.Tensor | None:
            todo = by_layer.get(index)
            if not todo:
                return None
            out = x.clone()
            for row, q in todo:
                out[row, q] = values[index][0, q].to(out.dtype)
            return out

        with torch.no_grad(), _layer_inputs(lay, change):
            logits = logits_at(pair.lm, _repeated(pair.inputs[base], len(chunk)), pair.position)
        m = metric_of(logits, pair.metric, pair.answer, pair.wrong)
        found[first : first + len(chunk)] = scores(pair, m, direction)
    grid = np.zeros((L, n_positions))
    grid[:, :n] = found.reshape(L, n)
    return grid


@contextlib.contextmanager
def _differentiable(lm: LoadedModel) -> Iterator[dict[Part, dict[int, torch.Tensor]]]:
    """Within the context, every context vector c of every part is c + delta (delta zero, requiring a gradient, kept
    per part and layer): dm/d(delta) is dm/dc through every later path."""
    lays = layouts(lm)
    deltas: dict[Part, dict[int, torch.Tensor]] = {part: {} for part in lays}

    def edit_of(part: Part):
        def edit(index: int, c: torch.Tensor) -> torch.Tensor:
            delta = torch.zeros_like(c, requires_grad=True)
            deltas[part][index] = delta
            return c + delta

        return edit

    with torch.enable_grad(), contextlib.ExitStack() as stack:
        for part, lay in lays.items():
            stack.enter_context(editing_contexts(lay, edit_of(part)))
        yield deltas


def attribution_scores(pair: Pair, direction: Direction) -> dict[str, np.ndarray]:
    """Attribution patching (§22): sum_i (c_clean - c_corr) . dm/dc at the base run (the corrupted run when
    denoising, the clean one when noising), divided by m_c - m_r: one backward pass for every head of every part
    (from prepare_pair's pass of the base run where it was asked for this direction, else one more forward pass);
    part -> [layers, heads]."""
    if pair.graph is not None and pair.graph[0] == direction:
        _, m, deltas = pair.graph
        pair.graph = None  # one backward pass through it
    else:
        base, _ = _base_and_source(direction)
        with _differentiable(pair.lm) as deltas:
            logits = logits_at(pair.lm, pair.inputs[base], pair.position)
            m = metric_of(logits, pair.metric, pair.answer, pair.wrong).sum()
    lays = layouts(pair.lm)
    keys = [(part, index) for part in lays for index in sorted(deltas[part])]
    with torch.enable_grad():
        grads = torch.autograd.grad(m, [deltas[p][i] for p, i in keys], allow_unused=True)
    out: dict[str, np.ndarray] = {}
    for part, lay in lays.items():
        L, H, d = len(lay.sites), lay.n_heads, lay.head_dim
        table = np.zeros((L, H))
        for (p, index), grad in zip(keys, grads):
            if p != part or grad is None:
                continue
            change = (pair.contexts["clean"][part][index] - pair.contexts["corrupted"][part][index]).double()
            n = change.shape[1]
            table[index] = (change * grad.double()).view(n, H, d).sum((0, 2)).cpu().numpy()
        out[part] = table / pair.difference
    return out


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r of two arrays' values (NaN where either is constant)."""
    x, y = np.ravel(a).astype(float), np.ravel(b).astype(float)
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])
