"""Benchmarks: run as `python -m benchmarks.<name>` from the repository root."""

from __future__ import annotations

from attnlib.results.shipped import EWT_DEV


class TimedAdds:
    """Wraps an accumulator and adds up the seconds spent in its add()."""

    def __init__(self, inner) -> None:
        self.inner, self.seconds = inner, 0.0
        self.captures = inner.captures

    def add(self, result, item) -> None:
        import time

        start = time.perf_counter()
        self.inner.add(result, item)
        self.seconds += time.perf_counter() - start


def best_of_interleaved(runs: dict, repeats: int) -> dict[str, float]:
    """Each run's best wall seconds over `repeats` rounds, the runs interleaved within each round (so a change of load
    on the machine falls on all of them alike)."""
    import time

    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, once in runs.items():
            start = time.perf_counter()
            once()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def ewt_dev(limit: int | None = None) -> list:
    """The first `limit` sentences of UD English EWT dev (all when None), as the repository ships it."""
    from attnlib.core.corpus import read_conllu

    return read_conllu(EWT_DEV)[:limit]


def default_model_on_ewt_dev(limit: int | None, batch_size: int, repeats: int) -> tuple:
    """(the default model, the first `limit` EWT dev sentences), after printing what a run measures on."""
    import torch

    from attnlib.core.model import DEFAULT_MODEL, load_model

    lm = load_model(DEFAULT_MODEL)
    sentences = ewt_dev(limit)
    print(
        f"{DEFAULT_MODEL} on {len(sentences)} EWT dev sentences, batch size {batch_size}, "
        f"{torch.get_num_threads()} torch threads, best of {repeats} interleaved runs\n"
    )
    return lm, sentences


def peak_resident_mb() -> float:
    """This process's peak resident set in MB: the kernel's VmHWM (Linux), else ru_maxrss. Not ru_maxrss on Linux: a
    child started by a large process inherits that process's peak in it (a child of the 1.2 GB benchmark reported
    1213 MB doing nothing)."""
    import resource
    from pathlib import Path

    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_report(script: str, limit: int, batch_size: int) -> dict:
    """The JSON line a benchmark's `--memory-child LIMIT` run of `script` prints last (a fresh process: its peak
    memory is its own)."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, script, "--memory-child", str(limit), "--batch-size", str(batch_size)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


GPT2_SMALL = dict(n_embd=768, n_layer=12, n_head=12, n_inner=3072, vocab_size=50257)  # GPT-2 small's shape


def saved_decoder(folder, positions: int = 1024):
    """A random GPT-2-small-shaped decoder (seed 0; `positions` long) with the tests' GPT-2 tokenizer, saved to
    `folder` and loaded by the library's loader (the benchmarks put `tests/` on the path for support.models)."""
    import torch
    import transformers as tf

    from attnlib.core.model import load_model
    from support.models import tokenizer_for

    tokenizer = tokenizer_for("gpt2")
    tokenizer.model_max_length = positions
    torch.manual_seed(0)
    tf.GPT2LMHeadModel(tf.GPT2Config(**GPT2_SMALL, n_positions=positions)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder))
