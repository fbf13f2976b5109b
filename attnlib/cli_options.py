"""Command-line options shared by the commands, argparse types, and the corpus run and `--out` file of a command."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .attribution import DEFAULT_PROBES, MODES
from .corpus import CorpusInput
from .engines import ENGINES, CorpusRun, Fill, MakeAccumulators, engine_fill, run_accumulators
from .model import DEFAULT_MODEL
from .results import make_result_file, write_result_file

DEFAULT_BATCH_SIZE = 32
CORPUS_HELP = "a text file (one input per line, TAB between A and B) or a .conllu file"
RUN_ARGS = {
    "handler",
    "command",
    "model",
    "device",
    "json",
    "out",
    "engine",
    "workers",
    "cpus_per_worker",
    "corpus",
    "conllu",
    "batch_size",
}  # argparse fields that are not options of the statistic (the batch size changes only the order of float sums)


def positive_int(text: str) -> int:
    """argparse type: an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {value}")
    return value


def add_model_option(parser: argparse.ArgumentParser) -> None:
    """--model, --device and --json, shared by every command."""
    parser.add_argument("--model", default=DEFAULT_MODEL, help=f"Hub id or local folder (default: {DEFAULT_MODEL})")
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")


def add_text_options(parser: argparse.ArgumentParser) -> None:
    """--text (sentence A) and --pair (sentence B), shared by the commands of one input."""
    parser.add_argument("--text", required=True, help="sentence A")
    parser.add_argument("--pair", default=None, help="sentence B (optional)")


def add_corpus_options(
    parser: argparse.ArgumentParser, source: str = "--corpus", help: str = CORPUS_HELP, unit: str = "inputs"
) -> None:
    """The corpus file (`source`, required), --limit and --batch-size, shared by the corpus commands."""
    parser.add_argument(source, required=True, help=help)
    parser.add_argument("--limit", type=positive_int, default=None, help=f"use only the first N {unit}")
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"inputs per forward pass (default {DEFAULT_BATCH_SIZE})",
    )


def add_scale_options(parser: argparse.ArgumentParser) -> None:
    """--engine, --workers, --cpus-per-worker and --out, shared by the corpus commands (--device comes with --model)."""
    group = parser.add_argument_group("scale-out")
    group.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: in this process; ray: Ray Data, one model per worker (default local)",
    )
    group.add_argument(
        "--workers", type=positive_int, default=2, help="Ray workers, each with its own model (default 2)"
    )
    group.add_argument(
        "--cpus-per-worker",
        type=positive_float,
        default=1.0,
        help="CPUs Ray reserves for each worker; torch uses that many threads (default 1)",
    )
    group.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the result as a JSON file the app's corpus pages can load",
    )


def run_corpus(
    args: argparse.Namespace,
    make_accumulators: MakeAccumulators,
    inputs: Sequence[CorpusInput],
    fill: Fill = engine_fill,
) -> CorpusRun:
    """run_accumulators with the command's --model, --device, --engine, --workers and --batch-size."""
    return run_accumulators(
        args.model,
        inputs,
        make_accumulators,
        fill,
        engine=args.engine,
        device=args.device,
        workers=args.workers,
        batch_size=getattr(args, "batch_size", DEFAULT_BATCH_SIZE),
        cpus_per_worker=args.cpus_per_worker,
    )


def command_options(args: argparse.Namespace) -> dict:
    """The options of the statistic: every argument but the model, corpus, engine and output ones."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in RUN_ARGS}


def save_result(
    args: argparse.Namespace, corpus_path: str, n_inputs: int, run: CorpusRun, result: dict, state: dict | None = None
) -> None:
    """Write the --out file when the command was given one."""
    if args.out:
        record = make_result_file(
            args.command, run.facts.name, corpus_path, n_inputs, command_options(args), result, run.describe(), state
        )
        write_result_file(args.out, record)


def add_attribution_options(parser: argparse.ArgumentParser, default_mode: str = "estimate") -> None:
    """--mode and --probes of the commands that run Hidden Token Attribution (METHODS §9)."""
    parser.add_argument(
        "--mode", choices=MODES, default=default_mode, help=f"exact or estimate (random probes; default {default_mode})"
    )
    parser.add_argument(
        "--probes",
        type=positive_int,
        default=DEFAULT_PROBES,
        help=f"probes per token in estimate mode (default {DEFAULT_PROBES})",
    )
