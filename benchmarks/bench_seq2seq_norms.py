"""Benchmark the norms of an encoder-decoder's decoder and cross parts (METHODS §11-13, §18) against the plain forward
pass of the whole model, on random T5, BART and Marian models of the tests' tiny shape (hidden 32, 2+2 layers) and of
a small one (hidden 512, 6+6 layers, 8 heads: t5-small's shape), for one source and target.

Run: python -m benchmarks.bench_seq2seq_norms [--repeats R] [--threads T]
Each configuration is run_seq2seq with the given target (no generation): plain; norms of the decoder (its hooks and
part_norm_maps: every §11-13 map); norms of the cross-attention (§11). Interleaved, best of the repeats.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks import best_of_interleaved  # noqa: E402

SOURCE = "The cat sat on the mat because it was warm, and the dog slept by the fire all afternoon."
TARGET = "A dog ran to the park, and then it slept for a very long time by the fire in the house."
SMALL = {
    "t5": dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8),
    "bart": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
    "marian": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                   decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
}  # fmt: skip


def saved_model(kind: str, size: str, folder: Path):
    """A random model of this kind and size with the tests' tokenizer, loaded by the library's loader."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from attnlib.core.model import load_model
    from support.models import tiny_encoder_decoder_config, tokenizer_for

    tokenizer = tokenizer_for(kind)
    config = tiny_encoder_decoder_config(kind, tokenizer)
    if size == "small":
        for key, value in SMALL[kind].items():
            setattr(config, key, value)
    torch.manual_seed(0)
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder))


def configurations(lm) -> dict:
    """name -> a function running it once."""
    from attnlib.core.seq2seq import run_seq2seq
    from attnlib.stats.norms import part_norm_maps

    return {
        "plain forward": lambda: run_seq2seq(lm, SOURCE, TARGET),
        "decoder norms (§11-13)": lambda: part_norm_maps(run_seq2seq(lm, SOURCE, TARGET, norms="decoder")),
        "cross norms (§11)": lambda: part_norm_maps(run_seq2seq(lm, SOURCE, TARGET, norms="cross")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print(f"{torch.get_num_threads()} torch threads, best of {args.repeats} interleaved runs (ms)")
    for size in ("tiny", "small"):
        for kind in ("t5", "bart", "marian"):
            with tempfile.TemporaryDirectory() as folder:
                lm = saved_model(kind, size, Path(folder))
                runs = configurations(lm)
                maps = runs["plain forward"]()
                best = best_of_interleaved(runs, args.repeats)
            plain = best["plain forward"]
            shape = f"{kind} {size} ({lm.facts.hidden_size} hidden, {lm.facts.n_layers} layers, "
            shape += f"{maps.source.n} source / {len(maps.target.tokens)} target tokens)"
            cells = ", ".join(f"{name} {1e3 * t:.1f} ({t / plain:.2f}x)" for name, t in best.items())
            print(f"{shape}: {cells}")


if __name__ == "__main__":
    main()
