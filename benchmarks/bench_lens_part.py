"""The lens section of bench_predictions (METHODS §21), to be merged into it: on a random decoder of GPT-2 small's shape
(12 layers, 12 heads, hidden 768, vocabulary 50,257) and a 128-token input, the whole `lens` analysis (every node's
table, the attribution of every component and every head's readout at the last position, the prediction) against the
model's own forward pass (its causal-LM model with its LM head at every position), side by side, interleaved, best of
the repeats. Target: <= 2x.

Run: python -m benchmarks.bench_lens_part [--repeats R] [--threads T] [--tokens N]"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import best_of_interleaved, ewt_dev  # noqa: E402
from benchmarks.bench_roles import saved_decoder  # noqa: E402

TOKENS = 128
TARGET = 2.0


def input_of(lm, tokens: int) -> str:
    """EWT dev's text cut to about `tokens` tokens of the model's tokenizer (a text, as the command takes it)."""
    text = " ".join(" ".join(s.words) for s in ewt_dev(200))
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"][: tokens - 1]  # GPT-2's tokenizer adds none
    return lm.tokenizer.decode(ids)


def lens_section(lm, repeats: int, tokens: int = TOKENS) -> dict[str, float]:
    """The lens against the forward pass on one input of about `tokens` tokens: seconds of each and their ratio."""
    import torch

    from attnlib.analyses.lens import LensOptions, compute_lens
    from attnlib.core.corpus import CorpusInput
    from attnlib.core.runner import encode, model_inputs

    text = input_of(lm, tokens)
    encoded = encode(lm, text)
    batch = model_inputs(lm, [encoded])
    item = CorpusInput(text)

    def forward() -> None:
        with torch.inference_mode():
            lm.causal_lm(**batch, use_cache=False)

    def lens() -> None:
        compute_lens(lm, item, LensOptions())

    forward(), lens()  # warm up
    best = best_of_interleaved({"forward": forward, "lens": lens}, repeats)
    return {"tokens": encoded.n, **best, "ratio": best["lens"] / best["forward"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--tokens", type=int, default=TOKENS)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        lm = saved_decoder(Path(folder))
        found = lens_section(lm, args.repeats, args.tokens)
    print(f"torch threads {torch.get_num_threads()}, best of {args.repeats}, interleaved")
    print(f"lens at {found['tokens']} tokens: forward pass {found['forward']:.3f} s, lens (every node's table, every "
          f"component's attribution, every head's readout) {found['lens']:.3f} s: {found['ratio']:.2f}x "
          f"(target <= {TARGET:g}x)")  # fmt: skip


if __name__ == "__main__":
    main()
