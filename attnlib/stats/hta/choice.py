"""The one choice of method both attributions make at an input: the linearised layers where they reproduce the model
(checked on two random directions) and fit in memory, else torch.func through the model's own layers."""

from __future__ import annotations

from dataclasses import dataclass

from attnlib.core.families import Layout
from attnlib.core.model import ModelFacts
from attnlib.core.replay import Recording
from attnlib.stats.hta.attention import LayerAtInput, layer_at_input
from attnlib.stats.hta.common import CHUNK_BUDGET, LINEARISED_BUDGET
from attnlib.stats.hta.forward import agrees_with_model, previous_agrees_with_model
from attnlib.stats.hta.position_wise import PositionWise, position_wise_parts
from attnlib.stats.hta.through_model import all_heads_function


def _jacobians_fit(n: int, hidden: int, n_layers: int) -> bool:
    """Whether every layer's per-token Jacobians (n * hidden^2 floats each) fit in LINEARISED_BUDGET."""
    return n_layers * n * hidden * hidden <= LINEARISED_BUDGET


def _relative_terms_fit(lay: Layout, n: int, hidden: int) -> bool:
    """Whether every layer's DeBERTa terms P_K and P_Q (n^2 * hidden floats each) fit in LINEARISED_BUDGET."""
    return lay.family.scores != "disentangled" or len(lay.sites) * 2 * n * n * hidden <= LINEARISED_BUDGET


@dataclass
class Method:
    """How tangents go through the layers at this input."""

    layers: list[LayerAtInput] | None  # every layer's self-attention written out; None: jvp through each block
    rest: list[PositionWise] | None  # and the rest of every layer as per-token Jacobians; None: jvp through the model


def choose_method(rec: Recording, facts: ModelFacts, linearise: bool, with_output: bool) -> Method:
    """The written-out self-attention of every layer where each reproduces its attention block, and the per-token
    Jacobians of the rest where they fit and, with it, reproduce the model's own layers (with_output: up to every
    layer's output, else up to the last layer's heads); linearise=False takes the model's own layers throughout."""
    lay = rec.layout
    e0 = rec.layers[0].hidden
    n, hidden, n_heads = e0.shape[1], facts.hidden_size, facts.n_heads
    everything = all_heads_function(rec, with_output)
    head_outputs, _ = everything(e0)  # [layers, 1, n, hidden], also checks the layer loop runs
    layers: list[LayerAtInput] | None = None
    if linearise and _relative_terms_fit(lay, n, hidden):
        found = [
            layer_at_input(lay, site, rec.heads[l], rec.layers[l].hidden, head_outputs[l, 0])
            for l, site in enumerate(lay.sites)
        ]
        layers = None if any(layer is None for layer in found) else found  # type: ignore[assignment]
    if layers is not None and not previous_agrees_with_model(rec, layers, n_heads):
        layers = None
    fits = layers is not None and _jacobians_fit(n, hidden, rec.n_layers) and lay.after_first_layer is None
    rest = position_wise_parts(rec, CHUNK_BUDGET) if fits else None
    agrees = (
        layers is not None
        and rest is not None
        and agrees_with_model(everything, e0, layers, rest, n_heads, with_output)
    )
    return Method(layers, rest if agrees else None)
