"""Sentences per second: attnlib's batched runner against a plain loop over single inputs with transformers (EWT dev)."""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attnlib.core.model import DEFAULT_MODEL, bundled_model_path, load_model
from attnlib.core.runner import run_batches
from benchmarks import ewt_dev


def plain_loop(sentences: list[list[str]]) -> tuple[float, list[np.ndarray]]:
    """The baseline: transformers' own model and tokenizer, one sentence at a time."""
    from transformers import AutoModel, AutoTokenizer

    path = str(bundled_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    maps = []
    start = time.perf_counter()
    with torch.inference_mode():
        for words in sentences:
            enc = tok(words, is_split_into_words=True, return_tensors="pt", truncation=True)
            maps.append(torch.stack(model(**enc, output_attentions=True).attentions)[:, 0].numpy())
    return time.perf_counter() - start, maps


def batched(sentences: list[list[str]], batch_size: int) -> tuple[float, list[np.ndarray]]:
    """attnlib: encode, pad in length-sorted batches, cut each map back to its input."""
    lm = load_model(DEFAULT_MODEL)
    start = time.perf_counter()
    maps = [r.attentions for r in run_batches(lm, ((s, None) for s in sentences), batch_size=batch_size)]
    return time.perf_counter() - start, maps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="first N sentences (default: all 2001)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    sentences = [s.words for s in ewt_dev(args.limit)]
    torch.set_num_threads(torch.get_num_threads())
    t_loop, loop_maps = plain_loop(sentences)
    t_batch, batch_maps = batched(sentences, args.batch_size)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(loop_maps, batch_maps))
    n = len(sentences)
    print(f"EWT dev, {n} sentences, {DEFAULT_MODEL}, {torch.get_num_threads()} threads, batch size {args.batch_size}")
    print(f"{'runner':<34}{'seconds':>10}{'sent/s':>10}")
    print(f"{'transformers, one at a time':<34}{t_loop:>10.2f}{n / t_loop:>10.1f}")
    print(f"{'attnlib run_batches':<34}{t_batch:>10.2f}{n / t_batch:>10.1f}")
    print(f"speed-up (loop time / batched time): {t_loop / t_batch:.2f}x")
    print(f"largest difference between the two runs' attention maps: {worst:.2e}")


if __name__ == "__main__":
    main()
