"""`report`: every corpus statistic for a model (or two compared) as one self-contained HTML file."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from attnlib.cli.options import add_model_option, loaded, positive_int
from attnlib.core.corpus import CorpusError
from attnlib.core.engines import check_device
from attnlib.core.runner import InputError
from attnlib.present.report import Report, ReportOptions, render_report, run_report, terminal_progress
from attnlib.stats.hta import DEFAULT_PROBES


def report_renderer() -> Callable[[Report], str]:
    """attnlib.present.report.render_report, once plotly imports: its figures need the views extra (plotly), which every
    other command runs without."""
    try:
        import attnlib.views.figure  # noqa: F401 (the figures' plotly, imported here only)
    except ImportError as exc:
        raise InputError(f"report: the report's figures need plotly ({exc}); install attnlib[views].") from exc
    return render_report


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `report` command."""
    p = sub.add_parser(
        "report",
        help="the whole study (special tokens and norms, positions, aggregation, dependency heads, probe) as one HTML file",
    )
    p.add_argument("--corpus", default=None, help="text file (one input per line, TAB between A and B) or .conllu")
    p.add_argument("--conllu", default=None, help="a CoNLL-U treebank with gold trees, for the dependency heads")
    p.add_argument(
        "--train", default=None, help="a CoNLL-U treebank to train the attention probe on (tested on --conllu)"
    )
    p.add_argument("--epochs", type=positive_int, default=1, help="probe: passes over the training treebank")
    p.add_argument("--compare", default=None, metavar="M2", help="a second model: the same parts, side by side")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the HTML report")
    p.add_argument("--limit", type=positive_int, default=None, help="use at most this many inputs of each file")
    p.add_argument("--batch-size", type=positive_int, default=32, help="inputs per forward pass")
    p.add_argument("--all-punct", action="store_true", help="count every punctuation token, not only '.' and ','")
    p.add_argument("--no-head-map", action="store_true", help="leave out the JS-divergence head map (METHODS §4)")
    p.add_argument("--min-count", type=int, default=100, help="deps: relations with at least this many dependents")
    p.add_argument(
        "--probes", type=positive_int, default=DEFAULT_PROBES, help="positions: probes per token (estimate mode)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    add_model_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> dict:
    """Write the report; returns models, parts, seconds (per part and pass), corpora, output path and bytes."""
    if args.corpus is None and args.conllu is None:
        raise CorpusError("give --corpus, --conllu or both.")
    check_device(args.device)
    options = ReportOptions(
        limit=args.limit,
        batch_size=args.batch_size,
        all_punct=args.all_punct,
        head_map=not args.no_head_map,
        min_count=args.min_count,
        probes=args.probes,
        probe_epochs=args.epochs,
    )
    render_report = report_renderer()

    progress = None if args.quiet else terminal_progress()
    compare = None if args.compare is None else loaded(args, args.compare)
    report = run_report(
        loaded(args), args.corpus, args.conllu, compare, options, progress, args.device, train_path=args.train
    )
    out = Path(args.out)
    out.write_text(render_report(report), encoding="utf-8")
    return {**report.summary(), "out": str(out), "bytes": out.stat().st_size}
