"""`norms`: value-weighted norms, GlobEnc's N and N_ResLN and both rollouts of one sentence or pair (METHODS §11-13)."""

from __future__ import annotations

import argparse

from ..cli_options import add_model_option, add_text_options
from ..model import load_model
from ..norms import norm_maps
from ..runner import run


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `norms` command."""
    p = sub.add_parser("norms", help="value-weighted norms, residual+LayerNorm norms and rollouts of one input")
    add_text_options(p)
    add_model_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """tokens, value_norm [layer][head][key], weighted_norm [layer][head][query][key], and per layer [query][key]:
    layer_norm, residual_ln (not row-normalised), attention_rollout, residual_ln_rollout; 0-based."""
    lm = load_model(args.model, device=args.device)
    maps = norm_maps(run(lm, args.text, args.pair, capture_qk=False, capture_norms=True))
    return {
        "model": lm.facts.name,
        "tokens": maps.tokens,
        "value_norm": maps.value_norm,
        "weighted_norm": maps.weighted_norm,
        "layer_norm": maps.layer_norm,
        "residual_ln": maps.residual_ln,
        "attention_rollout": maps.attention_rollout,
        "residual_ln_rollout": maps.residual_ln_rollout,
    }
