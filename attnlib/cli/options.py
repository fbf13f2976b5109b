"""Command-line flags: each analysis's, built from its options dataclass, the shared run flags, and argparse types."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

from attnlib.analyses.base import DEFAULT_BATCH_SIZE, Analysis, Options, choices_of, option_types
from attnlib.core.engines import ENGINES, check_device
from attnlib.core.model import DEFAULT_MODEL, DTYPES, LoadedModel, ModelLoadError, load_model
from attnlib.results.shipped import ROOT

CORPUS_HELP = "a text file (one input per line, TAB between A and B) or a .conllu file"


def at_least(minimum: int | None) -> Callable[[str], int]:
    """argparse type: a whole number of `minimum` or more (any whole number for None)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return whole_number


positive_int = at_least(1)


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
    parser.add_argument(
        "--model-dtype",
        choices=DTYPES,
        default="float32",
        help="float32: half-precision weights are converted when loaded (default); saved: kept as saved (attention "
        "statistics only)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only output format)")


def add_text_options(parser: argparse.ArgumentParser) -> None:
    """--text (sentence A) and --pair (sentence B), shared by the commands of one input."""
    parser.add_argument("--text", required=True, help="sentence A")
    parser.add_argument("--pair", default=None, help="sentence B (optional)")


INPUT_FLAGS: dict[str, dict[str, str]] = {  # help of each input flag, and the unit of --limit and --batch-size
    "corpus": {"--corpus": CORPUS_HELP, "limit": "inputs", "batch": "inputs"},
    "conllu": {"--conllu": "path of a CoNLL-U file (gold trees)", "limit": "sentences", "batch": "inputs"},
    "treebanks": {
        "--train": "CoNLL-U file to train on (gold trees)",
        "--test": "CoNLL-U file to score on (gold trees)",
        "limit": "sentences of each file",
        "batch": "sentences",
    },
}


CONLLU_HELP = "a CoNLL-U file (the same as --corpus with a .conllu file: its gold UPOS tags are kept)"


def conllu_path(text: str) -> str:
    """argparse type: the path of a .conllu (or .conll) file."""
    if not text.lower().endswith((".conllu", ".conll")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a .conllu file (give a text corpus as --corpus)")
    return text


def add_input_flags(parser: argparse.ArgumentParser, analysis: Analysis) -> None:
    """What the analysis reads: --text and --pair, or its files with --limit and --batch-size."""
    if analysis.reads == "text":
        add_text_options(parser)
        return
    if analysis.reads == "options":  # its inputs are among its options (patch --clean, --corrupted, --pairs)
        return
    if analysis.reads == "model":  # the model alone; a text or a corpus adds what the analysis computes on inputs
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--text", default=None, help="a sentence to analyse as well (optional)")
        group.add_argument("--corpus", default=None, help=f"{CORPUS_HELP}, to analyse as well (optional)")
        parser.add_argument("--limit", type=positive_int, default=None, help="use only the first N inputs")
        parser.add_argument("--pair", default=None, help="sentence B of --text (optional)")
        return
    flags = INPUT_FLAGS[analysis.reads]
    if analysis.conllu_flag:  # --corpus PATH | --conllu PATH, both the corpus
        group = parser.add_mutually_exclusive_group(required=True)
        group.add_argument("--corpus", help=flags["--corpus"])
        group.add_argument("--conllu", dest="corpus", type=conllu_path, help=CONLLU_HELP)
    else:
        for flag in analysis.sources:
            default = analysis.default_corpus if flag == "corpus" else None
            more = f" (default: {default.relative_to(ROOT)})" if default is not None else ""
            parser.add_argument(f"--{flag}", required=default is None, default=default, help=flags[f"--{flag}"] + more)
    parser.add_argument("--limit", type=positive_int, default=None, help=f"use only the first N {flags['limit']}")
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH_SIZE,
        help=f"{flags['batch']} per forward pass (default {DEFAULT_BATCH_SIZE})",
    )


def add_option_flags(parser: argparse.ArgumentParser, options_type: type[Options]) -> None:
    """One flag per field of an options dataclass: --name-with-hyphens, its default the field's, its help the field's
    (a bool that defaults to False is a switch; a Literal gives the choices; `minimum` bounds a whole number)."""
    hints = option_types(options_type)
    for f in fields(options_type):
        flag, kind, meta = "--" + f.name.replace("_", "-"), hints[f.name], f.metadata
        assert f.default is not MISSING, f"{options_type.__name__}.{f.name} needs a default"
        if kind is bool:
            if f.default:
                parser.add_argument(f"--no-{flag[2:]}", dest=f.name, action="store_false", help=meta["help"])
            else:
                parser.add_argument(flag, action="store_true", help=meta["help"])
            continue
        if kind == tuple[str, ...]:  # a list of names: --flag A B ...
            parser.add_argument(flag, nargs="+", default=f.default, metavar="NAME", help=meta["help"])
            continue
        choices = choices_of(kind)
        convert: Any = str if choices is not None else at_least(meta.get("minimum")) if kind is int else kind
        parser.add_argument(flag, type=convert, choices=choices, default=f.default, help=meta["help"])


def options_from_args(options_type: type[Options], args: argparse.Namespace) -> Options:
    """The options dataclass of parsed arguments."""
    return options_type(**{f.name: getattr(args, f.name) for f in fields(options_type)})


def add_out_option(parser: argparse.ArgumentParser) -> None:
    """--out of a one-input analysis (the corpus ones have it with the scale-out flags)."""
    parser.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help="also write the result as a JSON result file (`attention`: FILE.npz writes the maps as NumPy instead)",
    )


OUT_HELP = "also write the result as a JSON file the app's corpus pages can load"


def add_scale_options(parser: argparse.ArgumentParser, out_help: str = OUT_HELP, out_required: bool = False) -> None:
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
    group.add_argument("--out", default=None, required=out_required, metavar="FILE", help=out_help)


def corpus_run_flags(args: argparse.Namespace) -> dict:
    """What a corpus command's flags say about the run: limit, engine, device, workers, CPUs per worker, batch size."""
    names = ("limit", "engine", "device", "workers", "cpus_per_worker", "batch_size")
    return {name: getattr(args, name) for name in names}


def note(line: str) -> None:
    """What a run will cost, on stderr."""
    print(line, file=sys.stderr)


class StderrProgress:
    """A Progress that says on stderr how far some work is, one line each tenth of the way."""

    def __init__(self, what: str) -> None:
        self.what, self.said = what, -1

    def __call__(self, done: int, total: int) -> None:
        tenth = 10 * done // max(total, 1)
        if tenth > self.said:
            self.said = tenth
            note(f"{self.what}: {100 * done // max(total, 1)} % ({done:,} of {total:,})")


def loaded(args: argparse.Namespace, name: str | None = None) -> LoadedModel:
    """The command's model (or another one by name) loaded with its --device and --model-dtype; its size said first."""
    check_device(args.device)
    return load_model(name or args.model, device=args.device, dtype=args.model_dtype, note=note)


def model_of(args: argparse.Namespace) -> str | LoadedModel:
    """The model a command runs: loaded here unless Ray workers load it by name."""
    if getattr(args, "engine", "local") != "local":
        if args.model_dtype != "float32":
            raise ModelLoadError(
                "--model-dtype saved runs with --engine local only (Ray workers load float32 weights)."
            )
        return args.model
    return loaded(args)
