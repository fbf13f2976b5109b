"""What every way of computing Hidden Token Attribution shares: the modes, the result, the directions pushed through
the model, how squared norms become shares, the chunk sizes and the cost of an exact run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from attnlib.core.families import UnsupportedModelError, unsupported_reason
from attnlib.core.model import LoadedModel, ModelFacts

Mode = Literal["exact", "estimate"]
MODES: tuple[Mode, ...] = ("exact", "estimate")
DEFAULT_PROBES = 12  # benchmarks/bench_hta.py: Pearson >= 0.99 with exact mode at about 20x its speed
DEFAULT_SEED = 0
CHUNK_BUDGET = 4_000_000  # floats in the widest activation of one chunk of directions (about 16 MB)
LINEARISED_BUDGET = 2**27  # floats of per-token Jacobians kept at once (512 MB)
EXACT_SECONDS_AT_34_TOKENS = 32.0  # benchmarks/bench_hta.py: the default model (hidden 384, 6 layers) on 2 CPU cores


@dataclass
class Attribution:
    """Per-head and layer-output contributions, each row normalised to sum 1 over the input tokens."""

    tokens: list[str]
    input: np.ndarray  # [layers, heads, query j, input token i]: C(e0_i, o(l,h)_j)
    previous: np.ndarray  # [layers, heads, query j, input token i]: C(e(l-1)_i, o(l,h)_j)
    mode: str
    probes: int | None  # k in estimate mode, None in exact mode
    output: np.ndarray | None = None  # [layers, position j, input token i]: G_out, C(e0_i, e(l+1)_j) (METHODS §13)


def direction_chunks(
    n: int, hidden: int, mode: str, probes: int, seed: int, chunk: int, device
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Chunks of (input token i, direction vector in token i's hidden space [c, hidden])."""
    if mode == "exact":
        total, per_token = n * hidden, hidden
    else:
        total, per_token = n * probes, probes
        generator = torch.Generator().manual_seed(seed)
        probe_vectors = torch.randn(total, hidden, generator=generator).to(device)
    for start in range(0, total, chunk):
        index = torch.arange(start, min(start + chunk, total), device=device)
        if mode == "exact":
            vectors = torch.zeros(len(index), hidden, device=device)
            vectors[torch.arange(len(index)), index % hidden] = 1.0
        else:
            vectors = probe_vectors[index]
        yield index // per_token, vectors


def normalise(squared: torch.Tensor) -> np.ndarray:
    """[i, layers, j, heads] squared norms -> [layers, heads, j, i] Frobenius norms divided by their sum over i."""
    norms = squared.clamp_min(0).sqrt().permute(1, 3, 2, 0)
    sums = norms.sum(-1, keepdim=True)
    return (norms / torch.where(sums > 0, sums, torch.ones_like(sums))).cpu().numpy().astype(np.float32)


def normalise_outputs(squared: torch.Tensor) -> np.ndarray:
    """[i, layers, j] squared norms -> [layers, j, i] Frobenius norms divided by their sum over i."""
    return normalise(squared[..., None])[:, 0]


def default_chunk(n: int, hidden: int, widest: int, n_heads: int) -> int:
    """Directions per vmap chunk so that the widest activation of a chunk stays near CHUNK_BUDGET floats."""
    per_direction = n * max(widest, n_heads * n, hidden)
    return int(max(8, min(1024, CHUNK_BUDGET // per_direction)))


def widest_activation(encoder: torch.nn.Module, hidden: int) -> int:
    """The widest Linear output in the encoder (the feed-forward size)."""
    return max([m.out_features for m in encoder.modules() if isinstance(m, torch.nn.Linear)] + [hidden])


@contextlib.contextmanager
def eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Dropout off for the duration, whatever the module's mode was."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def exact_seconds(facts: ModelFacts, n_tokens: int) -> float:
    """Rough time of an exact attribution on 2 CPU cores: n * hidden directions, each ~ n * hidden^2 * layers."""
    return EXACT_SECONDS_AT_34_TOKENS * (n_tokens / 34) ** 2 * (facts.hidden_size / 384) ** 3 * facts.n_layers / 6


def refuse_unless_supported(lm: LoadedModel, mode: str) -> None:
    """ValueError for an unknown mode; UnsupportedModelError, saying why, for a model whose family cannot run HTA."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    reason = unsupported_reason(lm.encoder.config, "hta")
    if reason is not None:
        raise UnsupportedModelError(reason)
