"""Hidden Token Attribution per head (METHODS §9): how much each token feeds each head's output.

Exact mode pushes one forward-mode derivative per input coordinate (n * hidden directions) through every layer,
which gives every layer and head at once; estimate mode pushes k random standard-normal probes per input token
instead: ||J||_F^2 ~ (1/k) sum_p ||J v_p||^2. Directions travel in chunks, each layer linearised at the input:
- self-attention: the tangent of softmax(logits) v written out from the layer's own projections, with the family's
  score terms read off its own code as linear maps (rotary's rotation per position, after Qwen3's and Gemma 3's
  per-head norm of q and k; DeBERTa's c2p and p2c as per-(i, k) terms in q_i and k_k; Gemma 2's soft-cap as its slope
  per score; pre-LN families first pass the tangent through their LayerNorm's Jacobian), all checked against the
  module's output;
- the rest of the layer acts on each token alone, so it becomes one Jacobian per token (LayerNorm, feed-forward,
  LayerNorm; pre-LN: the residual plus a LayerNorm or RMSNorm and the feed-forward, gated in ModernBERT, Phi-3 and
  Llama, its output normalised in Gemma 2 and 3, reading the layer input in GPT-NeoX's parallel residual), built once
  and applied as a batched matrix product (Gemma's norm of the attention output is applied to the tangent).
Two random directions are checked against torch.func.jvp through the model's own layers (attnlib.core.replay), which is
the reference and the path taken wherever the linearisation does not reproduce it: layers of another shape (a
convolution after the first layer, scores that mix heads), or Jacobians over LINEARISED_BUDGET. The previous-layer
contribution is the first step of the same computation started at every layer's input (written out where
linearised, else jvp through the attention block).

One module each: the shared modes, result and directions (common), the choice of method (choice), jvp through the
model (through_model), the linearised self-attention (attention, norms) and the rest of each layer (position_wise),
forward mode written out (forward), every query row (every_row) and reverse mode for sampled rows (rows).
"""

from attnlib.stats.hta.common import (
    CHUNK_BUDGET,
    DEFAULT_PROBES,
    DEFAULT_SEED,
    EXACT_SECONDS_AT_34_TOKENS,
    LINEARISED_BUDGET,
    MODES,
    Attribution,
    Mode,
    default_chunk,
    exact_seconds,
)
from attnlib.stats.hta.every_row import attribute, hidden_token_attribution
from attnlib.stats.hta.rows import RowAttribution, row_attribution, row_chunk

__all__ = [
    "CHUNK_BUDGET",
    "DEFAULT_PROBES",
    "DEFAULT_SEED",
    "EXACT_SECONDS_AT_34_TOKENS",
    "LINEARISED_BUDGET",
    "MODES",
    "Attribution",
    "Mode",
    "RowAttribution",
    "attribute",
    "default_chunk",
    "exact_seconds",
    "hidden_token_attribution",
    "row_attribution",
    "row_chunk",
]
