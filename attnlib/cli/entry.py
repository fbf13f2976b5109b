"""Command line: `python -m attnlib <command> ... --json`; one command per analysis (attnlib.analyses.registry), its flags made
from the analysis's options, and the commands that are not one analysis (attnlib.cli.commands: the report)."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from functools import partial
from typing import NoReturn

from attnlib.analyses.attention import MAX_JSON_VALUES, AttentionMaps
from attnlib.analyses.base import Analysis, AnalysisRun, OptionError, Options, run_analysis
from attnlib.analyses.errors import USER_ERRORS
from attnlib.analyses.positions import LongAttributionReport, reporting_long_attribution
from attnlib.analyses.registry import ANALYSES
from attnlib.cli import commands
from attnlib.cli.options import (
    StderrProgress,
    add_input_flags,
    add_model_option,
    add_option_flags,
    add_out_option,
    add_scale_options,
    corpus_run_flags,
    model_of,
    note,
    options_from_args,
)
from attnlib.results.files import json_ready, write_result_file

USAGE_ERROR = 2  # exit status of user errors, as argparse uses


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors print one `error: ...` line to stderr (no usage) and exit 2; sub-parsers too."""

    def error(self, message: str) -> NoReturn:
        """Print `error: <prog>: <message>` and exit 2."""
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def add_analysis(sub: argparse._SubParsersAction, analysis: Analysis) -> None:
    """The command of one analysis: what it reads, its options, the model flags, and --out (with the scale-out flags
    for a corpus)."""
    p = sub.add_parser(analysis.name, help=analysis.help)
    add_input_flags(p, analysis)
    add_option_flags(p, analysis.options)
    add_model_option(p)
    if analysis.reads == "text":
        add_out_option(p)
    else:  # a model's checkpoints, like a corpus, fan out on Ray
        add_scale_options(p)
    p.set_defaults(handler=partial(handle_analysis, analysis))


def handle_analysis(analysis: Analysis, args: argparse.Namespace) -> dict:
    """Run the analysis on the command's inputs; write --out if given; return its JSON."""
    options = options_from_args(analysis.options, args)
    model = model_of(args)
    if analysis.reads == "text":
        run = run_analysis(analysis, model, options, text=args.text, pair=args.pair, device=args.device, note=note)
    elif analysis.reads in ("model", "options"):
        scale = {name: getattr(args, name) for name in ("engine", "workers", "cpus_per_worker")}
        given = {} if analysis.reads == "options" else dict(text=args.text, pair=args.pair, limit=args.limit,
                                                            inputs={"corpus": args.corpus})  # fmt: skip
        run = run_analysis(analysis, model, options, device=args.device, note=note, **given, **scale)
    else:
        with reporting_long_attribution(LongAttributionReport(note, StderrProgress("attribution"))):
            run = run_analysis(
                analysis,
                model,
                options,
                inputs={source: getattr(args, source) for source in analysis.sources},
                **corpus_run_flags(args),
                strict=True,
            )
    if isinstance(run.result, AttentionMaps):
        return _attention_out(run, args.out)
    if args.out:
        write_result_file(args.out, run.result_file())
    return run.to_json()


def _attention_out(run: AnalysisRun, out: str | None) -> dict:
    """`attention`'s JSON, or with --out FILE.npz the maps written as NumPy and the JSON without them; maps too large
    to print are refused in words that name the options which make them smaller."""
    maps = run.result
    if out is not None and out.endswith(".npz"):
        maps.save_npz(out)
        return {
            **{k: v for k, v in run.to_json().items() if k != "attentions"},
            "npz": out,
            "shape": maps.attentions.shape,
        }
    if maps.attentions.size > MAX_JSON_VALUES:
        layers, heads, rows, keys = maps.attentions.shape
        raise OptionError(
            f"These maps hold {maps.attentions.size:,} weights ({layers} layers x {heads} heads x {rows} x {keys}), "
            f"too many to print as JSON (at most {MAX_JSON_VALUES:,}): choose some with --layers, --heads or --rows, "
            "or write them to a NumPy file with --out maps.npz."
        )
    if out:
        write_result_file(out, run.result_file())
    return run.to_json()


def build_parser() -> argparse.ArgumentParser:
    """The parser with one sub-command per analysis and per module of attnlib.cli.commands, in alphabetical order."""
    parser = OneLineParser(
        prog="python -m attnlib",
        description="Attention statistics of transformers: encoders, decoders and encoder-decoders.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    adders = {name: partial(add_analysis, analysis=a) for name, a in ANALYSES.items()}
    for info in pkgutil.iter_modules(commands.__path__):
        adders[info.name] = importlib.import_module(f"{commands.__name__}.{info.name}").register
    for name in sorted(adders):
        adders[name](sub)
    return parser


def parse_command(argv: list[str]) -> argparse.Namespace | None:
    """The parse of these arguments, or None when this attnlib lacks the command or one of its flags."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices.get(argv[0]) if argv else None
    if command is None or any(a.startswith("--") and a not in command._option_string_actions for a in argv[1:]):
        return None
    return parser.parse_args(argv)


def command_options(args: argparse.Namespace) -> Options:
    """The analysis options of a parsed analysis command."""
    return options_from_args(ANALYSES[args.command].options, args)


def main(argv: list[str] | None = None) -> int:
    """Run one command and print its JSON (NaN as null); user errors print one line to stderr and exit 2."""
    args = build_parser().parse_args(argv)
    try:
        result = args.handler(args)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    json.dump(json_ready(result), sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


def run() -> None:
    """Console entry point (`attnlib` script and `python -m attnlib`): exit with main's status."""
    sys.exit(main())
