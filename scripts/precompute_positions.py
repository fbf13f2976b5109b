"""Precompute the local-versus-global page for the default model on the classroom set, so the page opens at once.

Run from the repository root: python scripts/precompute_positions.py
Writes data/precomputed/positions_<model>_classroom.json with, per classroom file, the result over all its inputs
with the default options and with [CLS]/[SEP] dropped from the histograms (both from one attribution run per input),
the result over its first CHECK_INPUTS inputs with the default options (tests/test_positions.py recomputes that part
and compares), and the exact attribution of the live page's default sentence pair for the page's example.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.attribution import attribute  # noqa: E402
from attnlib.corpus import read_corpus  # noqa: E402
from attnlib.model import DEFAULT_MODEL, load_model  # noqa: E402
from attnlib.positions import PositionOptions, accumulate_variants  # noqa: E402
from ui.live_inputs import DEFAULT_A, DEFAULT_B  # noqa: E402

CORPORA = [ROOT / "data" / "classroom_single.txt", ROOT / "data" / "classroom_pairs.tsv"]
CHECK_INPUTS = 5
OUTPUT = ROOT / "data" / "precomputed" / f"positions_{DEFAULT_MODEL}_classroom.json"


def precomputed_path(model: str = DEFAULT_MODEL) -> Path:
    """Where the page looks for the shipped results of a model."""
    return ROOT / "data" / "precomputed" / f"positions_{model}_classroom.json"


def rounded(value, digits: int = 6):
    """Every float in a JSON-ready structure rounded, for a compact file (the maps are float32 to begin with)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    if isinstance(value, np.ndarray):
        return rounded(value.tolist(), digits)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    lm = load_model(args.model)
    options = PositionOptions()
    variants = [options, replace(options, drop_special=True)]
    out = {
        "model": args.model,
        "made_by": "scripts/precompute_positions.py",
        "options": asdict(options),
        "check_inputs": CHECK_INPUTS,
        "corpora": {},
    }
    for path in CORPORA:
        inputs = read_corpus(path)
        start = time.perf_counter()

        def progress(done: int, total: int, path=path, start=start) -> None:
            print(f"\r{path.name}: {done}/{total} inputs, {time.perf_counter() - start:.0f} s", end="", flush=True)

        first = accumulate_variants(lm, inputs[:CHECK_INPUTS], variants)
        rest = accumulate_variants(
            lm, inputs[CHECK_INPUTS:], variants, lambda done, total: progress(CHECK_INPUTS + done, CHECK_INPUTS + total)
        )
        print()
        out["corpora"][path.name] = {
            "file": str(path.relative_to(ROOT)),
            "sha1": hashlib.sha1(path.read_bytes()).hexdigest(),
            "n_total": len(inputs),
            "results": [rounded(a.merge(b).result().to_dict()) for a, b in zip(first, rest)],
            "check": rounded(first[0].result().to_dict()),
        }
    example = attribute(lm, DEFAULT_A, DEFAULT_B, mode="exact")
    out["example"] = {
        "text_a": DEFAULT_A,
        "text_b": DEFAULT_B,
        "tokens": example.tokens,
        "input": rounded(example.input, 4),
        "previous": rounded(example.previous, 4),
    }
    path = precomputed_path(args.model)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, allow_nan=False))
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
