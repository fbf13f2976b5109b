"""Benchmark the report: its time against the sum of its parts run alone, its size, and a two-model comparison.

Run: OMP_NUM_THREADS=1 python -m benchmarks.bench_report [--inputs N] [--sentences N] [--skip-compare] [--skip-memory]
Memory: peak traced memory of the report on 25 and 99 inputs of each file (tiny BERT), which the accumulators keep flat.
Target (issue 17): the report for the classroom single-sentence set with the default model takes at most 2x the sum of
its parts run alone. Each part alone is its command (`special --head-map --norms`, `positions`, `aggregation`, `deps`,
`probe`) run in-process, model load included, as a user runs it; the report loads the model once, runs special,
positions and aggregation in one pass over the corpus (positions and aggregation share each input's attribution) and
deps with the probe's test maps in one pass over the treebank (the probe trains on EWT test).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from attnlib.cli.entry import build_parser
from attnlib.core.model import DEFAULT_MODEL, bundled_model_path
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, EWT_TEST
from benchmarks import peak_resident_mb


def run_command(*argv: str) -> tuple[dict, float]:
    """A command's JSON and its wall time, in this process."""
    args = build_parser().parse_args(list(argv))
    start = time.perf_counter()
    result = args.handler(args)
    return result, time.perf_counter() - start


def tiny_bert(folder: Path) -> str:
    """A random 2-layer, 4-head BERT with the bundled tokenizer, saved to a folder (as tests/support/models.py does)."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, BertConfig

    tokenizer = AutoTokenizer.from_pretrained(str(bundled_model_path()))
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def first_lines(path: Path, n: int, out: Path) -> str:
    """The first n lines of a text corpus, written to out."""
    out.write_text("\n".join(path.read_text().splitlines()[:n]) + "\n")
    return str(out)


def first_sentences(path: Path, n: int, out: Path) -> str:
    """The first n sentences of a CoNLL-U file, written to out."""
    out.write_text("\n\n".join(path.read_text().split("\n\n")[:n]) + "\n\n")
    return str(out)


def memory_peaks(model: str, limits: tuple[int, ...]) -> dict[int, int]:
    """Peak memory tracemalloc sees (Python and numpy) while the report runs on growing corpora: it should stay flat."""
    from attnlib.present.report import ReportOptions, run_report

    run_report(model, str(CLASSROOM_SINGLE), str(EWT_DEV), options=ReportOptions(limit=2))  # imports and caches
    peaks = {}
    for limit in limits:
        tracemalloc.start()
        run_report(model, str(CLASSROOM_SINGLE), str(EWT_DEV), options=ReportOptions(limit=limit, probes=4))
        peaks[limit] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=99, help="classroom inputs for the corpus parts (99: all)")
    parser.add_argument(
        "--sentences",
        type=int,
        default=100,
        help="EWT dev (test) and EWT test (train) sentences for deps, probe (0: none)",
    )
    parser.add_argument("--skip-memory", action="store_true", help="leave out the peak-memory runs")
    parser.add_argument("--skip-compare", action="store_true", help="leave out the default model vs tiny BERT run")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    corpus = first_lines(CLASSROOM_SINGLE, args.inputs, tmp / "corpus.txt")  # cut here: the report's --limit is global
    dev = first_sentences(EWT_DEV, args.sentences, tmp / "dev.conllu")
    train = first_sentences(EWT_TEST, args.sentences, tmp / "train.conllu")
    conllu = ["--conllu", dev, "--train", train] if args.sentences else []

    alone = {
        "special --head-map --norms": run_command("special", "--corpus", corpus, "--head-map", "--norms")[1],
        "positions (estimate)": run_command("positions", "--corpus", corpus)[1],
        "aggregation (estimate)": run_command("aggregation", "--corpus", corpus)[1],
    }
    if args.sentences:
        alone["deps"] = run_command("deps", "--conllu", dev)[1]
        alone["probe"] = run_command("probe", "--train", train, "--test", dev)[1]
    out = tmp / "report.html"
    summary, report_seconds = run_command("report", "--corpus", corpus, *conllu, "--out", str(out), "--quiet")
    total = sum(alone.values())
    print(
        f"classroom single-sentence set (first {args.inputs} inputs), {DEFAULT_MODEL}"
        + (f", EWT dev and EWT test first {args.sentences} sentences" if args.sentences else "")
    )
    for name, seconds in alone.items():
        print(f"  alone: {name:28s} {seconds:8.1f} s")
    print(f"  sum of the parts alone:        {total:8.1f} s")
    print(
        f"  report (one file):             {report_seconds:8.1f} s   ratio report / sum = {report_seconds / total:.2f}"
    )
    for name, seconds in summary["part_seconds"].items():
        print(f"    in the report: {name:40s} {seconds:8.1f} s")
    for p in summary["passes"]:
        print(f"    forward pass over {p['source']} ({'+'.join(p['parts'])}): {p['forward_seconds']:.1f} s")
    print(f"  report size: {summary['bytes'] / 1e6:.2f} MB")

    tiny = tiny_bert(tmp / "tiny-bert")
    if not args.skip_memory:
        for n, peak in memory_peaks(tiny, (25, 99)).items():
            print(f"peak traced memory (tiny BERT, probes 4), first {n} inputs of each file: {peak / 1e6:.1f} MB")
    if not args.skip_compare:
        out = tmp / "compare.html"
        summary, seconds = run_command(
            "report", "--corpus", corpus, *conllu, "--compare", tiny, "--out", str(out), "--quiet"
        )
        print(f"{DEFAULT_MODEL} vs a tiny random BERT: {seconds:.1f} s, {summary['bytes'] / 1e6:.2f} MB")
        for part, line in summary["differences"].items():
            print(f"  {part}: {line}")
    print(f"peak resident memory of this process: {peak_resident_mb():.0f} MB")


if __name__ == "__main__":
    sys.exit(main())
