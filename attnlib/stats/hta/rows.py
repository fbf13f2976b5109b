"""Hidden Token Attribution of some query rows only (METHODS §19): reverse mode, one pull-back per row, head and
output coordinate (exact) or per row, head and probe (estimate), through the method choose_method picks; the
previous-layer contribution from the forward-mode row tangents, which cost little for every row."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.func import vjp, vmap

from attnlib.core.model import LoadedModel
from attnlib.core.replay import record
from attnlib.core.runner import Encoded, model_inputs
from attnlib.stats.hta.attention import LayerAtInput, dense_tangent_heads
from attnlib.stats.hta.choice import choose_method
from attnlib.stats.hta.common import (
    CHUNK_BUDGET,
    DEFAULT_PROBES,
    DEFAULT_SEED,
    Mode,
    direction_chunks,
    eval_mode,
    normalise,
    refuse_unless_supported,
)
from attnlib.stats.hta.forward import previous_norms
from attnlib.stats.hta.position_wise import PositionWise
from attnlib.stats.hta.through_model import heads_from_input, heads_from_layer_input


@dataclass
class RowAttribution:
    """Hidden Token Attribution of some query rows only (METHODS §19), each row normalised over the input tokens."""

    rows: np.ndarray  # [m] the query rows j, ascending
    input: np.ndarray  # [layers, heads, m, input token i]: C(e0_i, o(l,h)_j) for j = rows
    previous: np.ndarray  # [layers, heads, m, input token i]: C(e(l-1)_i, o(l,h)_j)
    mode: str
    probes: int | None


def _row_squared_norms(fn: Callable, x: torch.Tensor, rows: torch.Tensor, n_heads: int, mode: str, probes: int,
                       generator: torch.Generator, chunk: int, done: Callable[[int], None] | None = None,
                       ) -> torch.Tensor:  # fmt: skip
    """[heads, m, i]: ||d o(l,h)_j / d x_i||_F^2 for j = rows[r] (estimate mode: its probe estimate), where
    fn(x) = o(l) [1, n, heads * d] and x holds n * hidden numbers; pull-backs travel `chunk` at a time.

    Pull-back c is row c // (heads * k), head (c // k) % heads and coordinate or probe c % k (k = d in exact mode);
    done(pull-backs) after each chunk."""
    out, pull = vjp(fn, x)
    _, n, width = out.shape
    d = width // n_heads
    per = d if mode == "exact" else probes
    pulled = vmap(pull)
    total = torch.zeros(n_heads, len(rows), n, device=x.device)
    count = len(rows) * n_heads * per
    for start in range(0, count, chunk):
        c = torch.arange(start, min(start + chunk, count), device=x.device)
        row, head, e = c // (n_heads * per), (c // per) % n_heads, c % per
        if mode == "exact":
            values = torch.nn.functional.one_hot(e, d).to(out.dtype)
        else:
            values = torch.randn(len(c), d, generator=generator).to(x.device)
        cot = torch.zeros(len(c), 1, n, width, device=x.device)
        cot[torch.arange(len(c))[:, None], 0, rows[row][:, None], head[:, None] * d + torch.arange(d)] = values
        (grads,) = pulled(cot)
        total.index_put_((head, row), grads.reshape(len(c), n, -1).square().sum(-1), accumulate=True)
        if done is not None:
            done(len(c))
    return total if mode == "exact" else total / probes


def _linearised_heads_function(layers: Sequence[LayerAtInput], rest: Sequence[PositionWise], index: int) -> Callable:
    """A tangent of e0 [n, 1, hidden] -> the tangent of o(l) [n, 1, heads, d] of layer `index`, through the
    linearised layers below it (the same arithmetic as linearised_input_norms, for a dense tangent)."""

    def heads(tangent: torch.Tensor) -> torch.Tensor:
        inputs = tangent
        n, c, _ = tangent.shape
        for l in range(index):
            inputs = rest[l].tangent(dense_tangent_heads(layers[l], inputs).reshape(n, c, -1), inputs)
        return dense_tangent_heads(layers[index], inputs)

    return heads


def _linearised_row_norms(layers, rest, index: int, rows: torch.Tensor, mode: str, probes: int, generator,
                          chunk: int, done: Callable[[int], None] | None = None) -> torch.Tensor:  # fmt: skip
    """_row_squared_norms through the linearised layers: the pull-back of the tangent map, which is linear."""
    n_heads, n, d = layers[0].q.shape
    fn = _linearised_heads_function(layers, rest, index)
    zero = torch.zeros(n, 1, layers[0].qkv_t.shape[0], device=layers[0].q.device)
    return _row_squared_norms(lambda t: fn(t).reshape(1, n, n_heads * d), zero, rows, n_heads, mode, probes,
                              generator, chunk, done)  # fmt: skip


@dataclass
class _Tally:
    """Counts the pull-back work of row_attribution: progress after every chunk, the estimate after the first."""

    total: int  # pull-backs times the layers each goes through
    setup: float  # seconds spent before the first pull-back
    progress: Callable[[int, int], None] | None
    estimate: Callable[[float], None] | None
    depth: int = 1  # layers the current pull-backs go through
    done: int = 0
    started: float = field(default_factory=time.perf_counter)

    def __call__(self, pulled: int) -> None:
        first = self.done == 0
        self.done += pulled * self.depth
        if first and self.estimate is not None:
            per_unit = (time.perf_counter() - self.started) / self.done
            self.estimate(self.setup + per_unit * self.total)
        if self.progress is not None:
            self.progress(self.done, self.total)

    def finish(self) -> None:
        """Nothing to pull back (the first layer alone): the estimate is what it took."""
        if self.total == 0 and self.estimate is not None:
            self.estimate(self.setup)


def row_chunk(n: int, n_heads: int) -> int:
    """Pull-backs per vmap chunk so that one chunk's score tangents (heads x n^2 floats each) stay near
    CHUNK_BUDGET * 4 floats."""
    return int(max(1, min(256, 4 * CHUNK_BUDGET // (n_heads * n * n))))


def row_attribution(
    lm: LoadedModel,
    encoded: Encoded,
    rows: Sequence[int] | np.ndarray,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
    chunk_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    linearise: bool = True,
    estimate: Callable[[float], None] | None = None,
) -> RowAttribution:
    """Input and previous-layer contribution (METHODS §9) of the given query rows only.

    Previous-layer contribution (and the input contribution of the first layer, the same thing) comes from the
    forward-mode row tangents of hidden_token_attribution, which cost little for every row; the input contribution of
    the later layers by reverse mode, one pull-back per row, head and output coordinate (exact) or per row, head and
    probe (estimate: k standard-normal probes u of the head's output, ||J||_F^2 ~ (1/k) sum_p ||u_p^T J||^2), through
    the linearised layers where they reproduce the model, else through the model's own layers.

    The pull-backs run from the last layer down; the first chunk's time calibrates estimate(seconds), told once, of
    the whole call; progress(done, total) after every chunk, in pull-backs times the layers each goes through."""
    refuse_unless_supported(lm, mode)
    f = lm.facts
    n, hidden = encoded.n, f.hidden_size
    index = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=lm.device)
    generator = torch.Generator().manual_seed(seed)
    chunk = chunk_size or row_chunk(n, f.n_heads)
    batch = model_inputs(lm, [encoded])
    started = time.perf_counter()
    with eval_mode(lm.encoder), torch.no_grad():
        rec = record(lm, batch, "hta")
        method = choose_method(rec, f, linearise, False)
        layers, rest = method.layers, method.rest
        e0 = rec.layers[0].hidden
        if layers is not None:
            # one row tangent is [n, heads, d]: a chunk of them within CHUNK_BUDGET floats
            row_tangents = int(max(8, min(1024, CHUNK_BUDGET // (n * hidden))))
            directions = direction_chunks(n, hidden, mode, probes, seed, row_tangents, lm.device)
            previous = previous_norms(layers, directions)[:, :, index].permute(1, 3, 2, 0)  # [layers, heads, m, i]
        else:
            previous = torch.stack(
                [
                    _row_squared_norms(
                        heads_from_layer_input(rec, l),
                        rec.layers[l].hidden,
                        index,
                        f.n_heads,
                        mode,
                        probes,
                        generator,
                        chunk,
                    )
                    for l in range(rec.n_layers)
                ]
            )
        per_row = f.n_heads * (f.head_dim if mode == "exact" else probes)
        total = sum(len(index) * per_row * (l + 1) for l in range(1, rec.n_layers))
        tally = _Tally(total, time.perf_counter() - started, progress, estimate)
        inputs: list[torch.Tensor] = [previous[0]] * rec.n_layers
        for l in reversed(range(1, rec.n_layers)):
            tally.depth = l + 1
            if layers is not None and rest is not None:
                inputs[l] = _linearised_row_norms(layers, rest, l, index, mode, probes, generator, chunk, tally)
            else:
                inputs[l] = _row_squared_norms(heads_from_input(rec, l), e0, index, f.n_heads, mode, probes,
                                               generator, chunk, tally)  # fmt: skip
        tally.finish()
    return RowAttribution(
        rows=index.cpu().numpy(),
        input=normalise(torch.stack(inputs).permute(3, 0, 2, 1)),
        previous=normalise(previous.permute(3, 0, 2, 1)),
        mode=mode,
        probes=probes if mode == "estimate" else None,
    )
