"""`positions` on one long input of the issue's tiny ModernBERT-layout model (issue 36: within 60 s at 2,048 tokens).

Run: python -m benchmarks.bench_long_positions [--lengths 512 2048] [--sample-rows 128] [--estimate-only]
The model: transformers' ModernBertConfig with 4 layers x 4 heads, hidden 64, feed-forward 128, every third layer
global, the others local within +-64, 8,192 positions, random weights (seed 0), the default model's tokenizer; the
input is EWT dev text cut to exactly n tokens (benchmarks.bench_long.text_of). Inputs above --sample-from (512) tokens
attribute --sample-rows query rows (METHODS §19). Printed per length: the library's own estimate (said before the
long attribution starts, calibrated on its first chunk of pull-backs), the seconds of the whole run (unless
--estimate-only, which stops at the estimate) and the peak resident memory (MB).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.bench_long import SIZE, PeakSampler, text_of  # noqa: E402

TINY = SIZE | dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128)


class Estimated(Exception):
    """Raised to stop a run once its estimate is said (--estimate-only)."""


def save_tiny_modernbert(folder: Path) -> None:
    """The issue's tiny ModernBERT-layout model with the default model's tokenizer, saved in folder."""
    import transformers as tf

    from attnlib.core.model import bundled_model_path

    tokenizer = tf.AutoTokenizer.from_pretrained(str(bundled_model_path()))
    tokenizer.model_max_length = TINY["max_position_embeddings"]
    ids = {"pad_token_id": tokenizer.pad_token_id, "cls_token_id": tokenizer.cls_token_id}
    ids |= {"sep_token_id": tokenizer.sep_token_id, "bos_token_id": tokenizer.cls_token_id}
    config = tf.ModernBertConfig(**TINY, **ids, vocab_size=len(tokenizer), eos_token_id=tokenizer.sep_token_id)
    torch.manual_seed(0)
    tf.ModernBertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--sample-rows", type=int, default=128)
    parser.add_argument("--estimate-only", action="store_true")
    args = parser.parse_args()
    from attnlib.analyses.base import run_analysis
    from attnlib.analyses.positions import POSITIONS, LongAttributionReport, reporting_long_attribution
    from attnlib.core.corpus import CorpusInput
    from attnlib.core.model import load_model

    with tempfile.TemporaryDirectory() as tmp:
        save_tiny_modernbert(Path(tmp))
        lm = load_model(tmp)
        print(
            f"tiny ModernBERT layout (4 x 4, hidden 64), {torch.get_num_threads()} threads, sample_rows {args.sample_rows}"
        )
        for n in args.lengths:

            def estimate(line: str, n: int = n) -> None:
                print(f"  {n}: the library says {line}", flush=True)
                if args.estimate_only:
                    raise Estimated

            options = POSITIONS.make_options(sample_rows=args.sample_rows)
            sampler = PeakSampler()
            sampler.start()
            start = time.perf_counter()
            try:
                with reporting_long_attribution(LongAttributionReport(estimate, lambda done, total: None)):
                    run_analysis(POSITIONS, lm, options, inputs={"corpus": [CorpusInput(text_of(lm, n))]})
                seconds = f"{time.perf_counter() - start:.1f} s"
            except Estimated:
                seconds = f"stopped at the estimate after {time.perf_counter() - start:.1f} s"
            sampler.done.set()
            sampler.join()
            print(f"{n:>6} tokens: {seconds}, peak {sampler.peak:.0f} MB", flush=True)


if __name__ == "__main__":
    main()
