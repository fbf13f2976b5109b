"""A few inputs of each analysis, small enough for the quick tier (test_analysis, test_runs, test_json_keys), and the
same inputs as a command line."""

from __future__ import annotations

from typing import Any

from attnlib.analyses.registry import ANALYSES
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV, PUD_TEST

INPUTS: dict[str, dict[str, Any]] = {
    "attention": {"text": "The cat sat.", "pair": "It purred."},
    "norms": {"text": "The cat sat."},
    "hta": {"text": "A cat.", "mode": "estimate", "probes": 1},
    "special": {"corpus": CLASSROOM_PAIRS, "limit": 3, "head_map": True, "norms": True},
    "deps": {"conllu": EWT_DEV, "limit": 3, "min_count": 1},
    "positions": {"corpus": CLASSROOM_SINGLE, "limit": 2, "probes": 1},
    "aggregation": {"corpus": CLASSROOM_SINGLE, "limit": 2, "probes": 1},
    "probe": {"train": PUD_TEST, "test": EWT_DEV, "limit": 3},
    "ablate": {"text": "The cat sat.", "heads": "0-0,1-2"},
    "importance": {"corpus": CLASSROOM_SINGLE, "limit": 2, "knockout": True, "prune": True},
    "qk": {"corpus": CLASSROOM_SINGLE, "limit": 2, "all_heads": True},
    "gradient": {"corpus": CLASSROOM_PAIRS, "limit": 3},
}


def command_line(name: str, model: str, **more: Any) -> list[str]:
    """The command that runs `name` on INPUTS[name] (and `more`) with `model`: --flag VALUE, a bare --flag for True."""
    argv = [name, "--model", model]
    for key, value in {**INPUTS[name], **more}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False:
            argv += [flag, str(value)]
    return argv


def split_inputs(name: str) -> tuple[dict, dict, int | None, dict]:
    """INPUTS[name] as run_analysis takes them: the inputs by source, text and pair, the limit, and the options."""
    given = dict(INPUTS[name])
    inputs = {s: given.pop(s) for s in ANALYSES[name].sources}
    text = {k: given.pop(k) for k in ("text", "pair") if k in given}
    return inputs, text, given.pop("limit", None), given
