"""Make every shipped result in data/precomputed/ (of the default model, and the trained decoder's roles), so each corpus
page opens at once.

Run from anywhere: python scripts/precompute.py [--only PATTERN ...] [--check] [--restamp] [--list] [--readme]
Each job runs `python -m attnlib <command> ... --out FILE` in this process (attnlib.cli.entry.main), so the shipped files
are genuine result files (floats rounded to 6 significant digits), then the same command on the first CHECK_INPUTS
inputs into check/ (tests/results/test_precomputed.py and --check recompute that slice and compare). The index.json written
last lists every file with its analysis, model, corpus (repository-relative path, SHA-1, inputs), options (as the
analysis's options dataclass writes them), --limit and arguments. A job whose command or flags this attnlib does not
have yet is skipped with a note.
--check recomputes each job's slice and compares it with the shipped check file, and checks that every shipped file
is still for the current corpus file and the analysis's current options; it writes nothing.
--restamp, after an analysis gains an option: each file whose slice, recomputed, gives the same numbers gets the new
options in its headers and index entry (the rest are named, to be recomputed).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.cli import entry as cli  # noqa: E402
from attnlib.cli.entry import command_options, parse_command  # noqa: E402
from attnlib.core.model import DEFAULT_MODEL, TRAINED_MODEL, checkpoints_of  # noqa: E402
from attnlib.results.files import ResultFile, read_result_file, text_pair_sha1, write_result_file  # noqa: E402
from attnlib.results.precomputed import (  # noqa: E402
    EXAMPLE_COMMAND,
    TOLERANCES,
    ShippedEntry,
    read_index,
    result_differences,
    round_floats,
    stale_reasons,
    write_index,
)
from attnlib.results.shipped import (  # noqa: E402
    CLASSROOM_PAIRS,
    CLASSROOM_SINGLE,
    EWT_DEV,
    EWT_TEST,
    PRECOMPUTED,
    PUD_TEST,
    TUTORIAL_A,
    TUTORIAL_B,
)

CHECK_INPUTS = 5
UD_LIMIT = 100  # the corpus pages' default limit for slow statistics on a treebank
IMPORTANCE_LIMIT = (
    UD_LIMIT  # head importance replays every head three times (app_pages/importance/page.py: SHIPPED_LIMIT)
)
ROLES_LIMIT = 20  # the Head roles page's detection corpus: its first 20 inputs (app_pages/roles/probe.py: DETECT_LIMIT)
CHECK_DIR = "check"


def rel(path: Path) -> str:
    """Repository-relative path, as the result files record it (the script runs from the repository root)."""
    return str(path.relative_to(ROOT))


CLASSROOM = {"classroom-single": rel(CLASSROOM_SINGLE), "classroom-pairs": rel(CLASSROOM_PAIRS)}
TREEBANKS = {"ewt-dev": rel(EWT_DEV), "ewt-test": rel(EWT_TEST), "pud-test": rel(PUD_TEST)}
ALL_CORPORA = {**CLASSROOM, **TREEBANKS}


@dataclass(frozen=True)
class Job:
    """One shipped file: its name (the file is <name>.json), the CLI arguments that make it (model and --out added)
    and its model."""

    name: str
    argv: tuple[str, ...]
    model: str = DEFAULT_MODEL


# The table of jobs: one line each. Commands or options this attnlib lacks are skipped (norms, aggregation, probe are
# being added by other branches).
# No `gradient` job: gradient importance (METHODS §5) needs a trained masked-LM head, which the default model (a
# sentence encoder) lacks; `attnlib gradient` refuses it in one line (attnlib.stats.gradient.unavailable_reason).
JOBS = [
    *[
        Job(f"special_{key}", ("special", "--corpus", path, "--head-map", "--norms"))
        for key, path in ALL_CORPORA.items()
    ],
    *[Job(f"deps_{key}", ("deps", "--conllu", path)) for key, path in TREEBANKS.items()],
    *[Job(f"positions_{key}", ("positions", "--corpus", path)) for key, path in CLASSROOM.items()],
    *[
        Job(f"positions-drop-special_{key}", ("positions", "--corpus", p, "--drop-special"))
        for key, p in CLASSROOM.items()
    ],
    *[Job(f"positions_{key}", ("positions", "--corpus", p, "--limit", str(UD_LIMIT))) for key, p in TREEBANKS.items()],
    *[Job(f"aggregation_{key}", ("aggregation", "--corpus", path)) for key, path in CLASSROOM.items()],
    Job("probe_ewt", ("probe", "--train", TREEBANKS["ewt-dev"], "--test", TREEBANKS["ewt-test"])),
    *[
        Job(f"importance_{key}", ("importance", "--corpus", path, "--knockout", "--prune"))
        for key, path in CLASSROOM.items()
    ],
    Job(
        "importance_ewt-dev",
        ("importance", "--corpus", TREEBANKS["ewt-dev"], "--knockout", "--prune", "--limit", str(IMPORTANCE_LIMIT)),
    ),
    Job("qk_classroom-single", ("qk", "--corpus", CLASSROOM["classroom-single"], "--all-heads")),
    Job("example_live-default", (EXAMPLE_COMMAND, "--text", TUTORIAL_A, "--pair", TUTORIAL_B, "--mode", "exact")),
    # Head roles opens drawn: the probe, causal check and detection on its default corpus; the trained decoder's with
    # its checkpoints' lines (the Over training tab and the Tour's step)
    Job("roles_classroom-single", ("roles", "--corpus", CLASSROOM["classroom-single"], "--limit", str(ROLES_LIMIT))),
    Job(
        f"roles_{TRAINED_MODEL}",
        (
            "roles",
            "--corpus",
            CLASSROOM["classroom-single"],
            "--limit",
            str(ROLES_LIMIT),
            "--checkpoints",
            *checkpoints_of(TRAINED_MODEL),
        ),
        TRAINED_MODEL,
    ),
]


def with_limit(argv: list[str], limit: int) -> list[str]:
    """The arguments with --limit set to `limit` (replaced when present)."""
    if "--limit" in argv:
        i = argv.index("--limit")
        return [*argv[:i], "--limit", str(limit), *argv[i + 2 :]]
    return [*argv, "--limit", str(limit)]


def run_cli(argv: list[str]) -> dict:
    """attnlib.cli.entry.main on these arguments, its JSON output returned (a user error stops the script)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli.main(argv)
    if status != 0:
        raise SystemExit(f"python -m attnlib {' '.join(argv)} failed with status {status}")
    return json.loads(out.getvalue())


def make(argv: list[str], path: Path) -> ResultFile:
    """Run the command with --out into `path`, then round the file's floats; returns the record."""
    run_cli([*argv, "--out", str(path)])
    record = read_result_file(path.read_bytes())
    record.result = round_floats(record.result)
    record.state = round_floats(record.state)
    write_result_file(path, record)
    return record


def run_job(job: Job, model: str, folder: Path) -> ShippedEntry:
    """Make a job's file and its check file in `folder`; returns its index entry."""
    argv = [*job.argv, "--model", model]
    check_argv = [] if job.argv[0] == EXAMPLE_COMMAND else with_limit(argv, CHECK_INPUTS)
    start = time.perf_counter()
    record = make(argv, folder / f"{job.name}.json")
    check_file = None
    if check_argv:
        (folder / CHECK_DIR).mkdir(exist_ok=True)
        check_file = f"{CHECK_DIR}/{job.name}.json"
        make(check_argv, folder / check_file)
    args = parse_command(argv)
    return ShippedEntry(
        name=job.name,
        file=f"{job.name}.json",
        command=record.command,
        model=record.model,
        corpus=record.corpus,
        options=record.options,
        argv=argv,
        limit=getattr(args, "limit", None),
        check_file=check_file,
        check_argv=check_argv,
        seconds=round(time.perf_counter() - start, 1),
    )


def argv_problems(entry: ShippedEntry) -> list[str]:
    """Why a shipped file no longer answers the arguments that made it: the command, its options or its texts."""
    args = parse_command(entry.argv)
    if args is None:
        return [f"this attnlib cannot run {' '.join(entry.argv)}"]
    problems = []
    options = asdict(command_options(args))
    if options != entry.options:
        problems.append(f"the command's options are now {options}, the file has {entry.options}")
    if hasattr(args, "text") and entry.corpus.get("sha1") != text_pair_sha1(args.text, args.pair):
        problems.append("the example's texts changed")
    return problems


def check_job(entry: ShippedEntry, folder: Path) -> list[str]:
    """What is wrong with a shipped file: stale corpus or options, or a slice that no longer computes the same."""
    problems = argv_problems(entry) + stale_reasons(entry)
    if problems:
        return [f"{entry.name}: {p}" for p in problems]
    with tempfile.TemporaryDirectory() as tmp:  # the example has no slice: it is recomputed whole
        fresh = make(entry.check_argv or entry.argv, Path(tmp) / "fresh.json")
    shipped = read_result_file((folder / (entry.check_file or entry.file)).read_bytes())
    tolerance = TOLERANCES.get(entry.command, {})
    return [f"{entry.name}: {p}" for p in result_differences(shipped.to_json(), fresh.to_json(), **tolerance)]


def restamp(entry: ShippedEntry, folder: Path) -> tuple[ShippedEntry, str]:
    """A shipped file whose analysis has gained options since: when its job's slice, recomputed now, gives the same
    numbers (the new options' defaults keep the old behaviour), its headers and index entry get the options as the
    analysis writes them now, without recomputing the whole file. Returns the entry and what was done."""
    args = parse_command(entry.argv)
    if args is None:
        return entry, f"this attnlib cannot run {' '.join(entry.argv)}"
    options = asdict(command_options(args))
    if options == entry.options:
        return entry, "current"
    if any(options.get(key, object()) != value for key, value in entry.options.items()):
        return entry, f"options changed ({entry.options} -> {options}): recompute it"
    with tempfile.TemporaryDirectory() as tmp:  # the example has no slice: it is recomputed whole
        fresh = make(entry.check_argv or entry.argv, Path(tmp) / "fresh.json")
    shipped = read_result_file((folder / (entry.check_file or entry.file)).read_bytes())
    numbers = ({"result": stamped(r.result, options), "state": r.state} for r in (shipped, fresh))
    differences = result_differences(*numbers, **TOLERANCES.get(entry.command, {}))
    if differences:
        return entry, f"the numbers changed ({differences[0]}, ...): recompute it"
    for file in [entry.file, entry.check_file]:
        if file is not None:
            record = read_result_file((folder / file).read_bytes())
            record.options, record.result = options, stamped(record.result, options)
            write_result_file(folder / file, record)
    return replace(entry, options=options), f"restamped with {options}"


def stamped(result: dict, options: dict) -> dict:
    """A result with the options it names itself (positions and aggregation print theirs) set to these."""
    return {**result, "options": options} if "options" in result else result


def readme_table(entries: list[ShippedEntry]) -> str:
    """The markdown table of shipped files for data/README.md."""
    rows = ["| File | Command | Corpus | Inputs | Options | Size | Made in |", "|---|---|---|--:|---|--:|--:|"]
    for e in sorted(entries, key=lambda e: e.name):
        options = ", ".join(f"{k}={v}" for k, v in e.options.items() if v not in (None, False, [])) or "defaults"
        size = (PRECOMPUTED / e.file).stat().st_size
        corpus = e.corpus.get("path") or e.corpus.get("name")
        if "train" in e.corpus:  # the probe: trained on one treebank, scored on the other
            corpus = f"{e.corpus['train']['path']} → {corpus}"
        rows.append(
            f"| `{e.file}` | {e.command} | {corpus} | {e.corpus['n_inputs']} | {options} | {size / 1e3:.0f} kB "
            f"| {e.seconds or 0:.0f} s |"
        )
    return "\n".join(rows)


def update_readme(entries: list[ShippedEntry]) -> None:
    """Replace the table between the shipped-table markers of data/README.md."""
    readme = ROOT / "data" / "README.md"
    text = readme.read_text(encoding="utf-8")
    start, end = "<!-- shipped-table: start -->\n", "<!-- shipped-table: end -->"
    head, rest = text.split(start, 1)
    readme.write_text(head + start + readme_table(entries) + "\n" + end + rest.split(end, 1)[1], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", metavar="PATTERN", help="jobs whose name matches (fnmatch; repeat)")
    parser.add_argument("--check", action="store_true", help="verify the shipped files instead of writing them")
    parser.add_argument("--list", action="store_true", help="list the jobs and whether this attnlib can run them")
    parser.add_argument("--readme", action="store_true", help="only rewrite data/README.md's table from the index")
    parser.add_argument(
        "--restamp",
        action="store_true",
        help="give shipped files the options their analysis gained, where a recomputed slice gives the same numbers",
    )
    args = parser.parse_args(argv)
    if args.readme:
        update_readme(read_index())
        return 0
    os.chdir(ROOT)  # result files record the corpus path as given: repository-relative
    jobs = [j for j in JOBS if not args.only or any(fnmatch.fnmatch(j.name, p) for p in args.only)]
    if not jobs:
        parser.error(f"no job matches {args.only}; names: {', '.join(j.name for j in JOBS)}")
    runnable = [j for j in jobs if parse_command(list(j.argv)) is not None]
    for job in jobs:
        if job not in runnable or args.list:
            print(f"{job.name}: {'ok' if job in runnable else 'skipped (not in this attnlib)'}: {' '.join(job.argv)}")
    if args.list:
        return 0
    if args.restamp:
        entries = {e.name: e for e in read_index()}
        for job in [j for j in runnable if j.name in entries]:
            entries[job.name], said = restamp(entries[job.name], PRECOMPUTED)
            print(f"{job.name}: {said}", flush=True)
        write_index(list(entries.values()), PRECOMPUTED)
        update_readme(read_index())
        return 0
    if args.check:
        entries = {e.name: e for e in read_index()}
        problems = []
        for i, job in enumerate(runnable, 1):
            if job.name not in entries:
                problems.append(f"{job.name}: not shipped")
                continue
            start = time.perf_counter()
            found = check_job(entries[job.name], PRECOMPUTED)
            print(
                f"[{i}/{len(runnable)}] {job.name}: {'ok' if not found else 'FAILED'} ({time.perf_counter() - start:.1f} s)"
            )
            problems += found
        print("\n".join(problems) or "every shipped file checked")
        return 1 if problems else 0
    PRECOMPUTED.mkdir(parents=True, exist_ok=True)
    made: dict[str, ShippedEntry] = {}
    total = time.perf_counter()
    for i, job in enumerate(runnable, 1):
        print(f"[{i}/{len(runnable)}] {job.name}: {' '.join(job.argv)}", end=" ... ", flush=True)
        entry = run_job(job, job.model, PRECOMPUTED)
        size = (PRECOMPUTED / entry.file).stat().st_size
        print(f"{entry.corpus['n_inputs']} inputs, {entry.seconds:.1f} s, {size / 1e3:.0f} kB", flush=True)
        made[job.name] = entry
        # the index on disk, re-read each time (another run may have added to it), with this run's entries
        entries = {e.name: e for e in read_index()} | made
        write_index([e for e in entries.values() if (PRECOMPUTED / e.file).is_file()], PRECOMPUTED)
    update_readme(read_index())
    print(f"done in {time.perf_counter() - total:.0f} s; index: {rel(PRECOMPUTED)}/index.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
