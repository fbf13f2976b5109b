"""Hidden Token Attribution of every query row (METHODS §9, and §13's layer outputs): forward mode, one direction per
input coordinate (exact) or k random probes per input token (estimate), through the method choose_method picks."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from attnlib.core.model import LoadedModel
from attnlib.core.replay import record
from attnlib.core.runner import Encoded, TextOrWords, encode, model_inputs
from attnlib.stats.hta import forward
from attnlib.stats.hta.choice import choose_method
from attnlib.stats.hta.common import (
    DEFAULT_PROBES,
    DEFAULT_SEED,
    Attribution,
    Mode,
    default_chunk,
    direction_chunks,
    eval_mode,
    normalise,
    normalise_outputs,
    refuse_unless_supported,
    widest_activation,
)
from attnlib.stats.hta.through_model import all_heads_function, block_heads_function, plain_input_norms


def hidden_token_attribution(
    lm: LoadedModel,
    encoded: Encoded,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
    chunk_size: int | None = None,
    linearise: bool = True,
    with_output: bool = False,
) -> Attribution:
    """Input and previous-layer contribution of every token to every head's output at every position (METHODS §9),
    and with_output, input contribution to every layer's output (§13, Attribution.output), from the same tangents.

    linearise=False pushes every direction through the model's own layers (slower, same numbers)."""
    refuse_unless_supported(lm, mode)
    if mode == "estimate" and probes < 1:
        raise ValueError("probes must be at least 1")
    encoder = lm.encoder
    f = lm.facts
    n, hidden = encoded.n, f.hidden_size
    batch = model_inputs(lm, [encoded])
    widest = widest_activation(encoder, hidden)
    through_model, through_rows, through_layers = (
        chunk_size or default_chunk(n, hidden, width, f.n_heads) for width in (widest, hidden, 3 * hidden)
    )

    def directions(chunk: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return direction_chunks(n, hidden, mode, probes, seed, chunk, lm.device)

    with eval_mode(encoder), torch.no_grad():
        rec = record(lm, batch, "hta")
        method = choose_method(rec, f, linearise, with_output)
        if method.layers is not None:
            previous_sq = forward.previous_norms(method.layers, directions(through_rows))
        else:
            previous_sq = torch.cat(
                [
                    plain_input_norms(
                        block_heads_function(rec, l), rec.layers[l].hidden, f.n_heads, directions(through_model)
                    )[0]
                    for l in range(rec.n_layers)
                ],
                dim=1,
            )
        if method.layers is not None and method.rest is not None:
            input_sq, output_sq = forward.linearised_input_norms(
                method.layers, method.rest, directions(through_layers), with_output
            )
        else:
            everything = all_heads_function(rec, with_output)
            input_sq, output_sq = plain_input_norms(
                everything, rec.layers[0].hidden, f.n_heads, directions(through_model)
            )
    return Attribution(
        tokens=list(encoded.tokens),
        input=normalise(input_sq),
        previous=normalise(previous_sq),
        mode=mode,
        probes=probes if mode == "estimate" else None,
        output=normalise_outputs(output_sq) if with_output else None,
    )


def attribute(
    lm: LoadedModel,
    text_a: TextOrWords,
    text_b: TextOrWords | None = None,
    mode: Mode = "exact",
    probes: int = DEFAULT_PROBES,
    seed: int = DEFAULT_SEED,
    with_output: bool = False,
) -> Attribution:
    """Tokenize a sentence or pair and attribute it (see hidden_token_attribution)."""
    encoded = encode(lm, text_a, text_b)
    return hidden_token_attribution(lm, encoded, mode=mode, probes=probes, seed=seed, with_output=with_output)
