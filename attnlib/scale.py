"""Scale-out: the corpus engine in-process or on Ray (one model per worker), on CPU or CUDA, and result files.

With Ray the corpus is cut into shards made of whole batches of the local engine, so every input runs in exactly the
padded batch it would run in locally; each worker fills the same accumulators over its shard and the driver merges
them. The result therefore equals the local one up to the order of floating-point sums.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .corpus import CorpusInput
from .engine import Progress, accumulate
from .model import LoadedModel, ModelFacts, load_model
from .runner import encode, run_batches

ENGINES = ("local", "ray")
SHARDS_PER_WORKER = 2  # a few shards per worker even out uneven batches without much merging
RUN_WINDOW = inspect.signature(run_batches).parameters["window"].default  # run_batches sorts windows of this size
RESULT_FORMAT = "attnlib-result"
RESULT_FORMAT_VERSION = 1
MAX_RESULT_BYTES = 64 * 1024 * 1024
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
}  # argparse fields that are not options of the statistic

MakeAccumulators = Callable[[LoadedModel], list]
Fill = Callable[[LoadedModel, Sequence[CorpusInput], list, int, "Progress | None"], list]


class ScaleError(Exception):
    """A user-facing problem with the device, Ray or the cluster (one line, exit 2 on the command line)."""


class ResultFileError(ValueError):
    """A result file that is not JSON from `--out`, or not for this command."""


# ---------------------------------------------------------------------------------------------------------- devices


def check_device(device: str) -> None:
    """Raise ScaleError unless torch can use this device here (e.g. `cuda` on a machine without CUDA)."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ScaleError(f"--device {device}: not a torch device (use cpu or cuda).") from exc
    if parsed.type == "cpu":
        return
    if parsed.type != "cuda":
        raise ScaleError(f"--device {device}: only cpu and cuda are supported.")
    if not torch.cuda.is_available():
        why = "this torch build has no CUDA support" if torch.version.cuda is None else "torch sees no NVIDIA GPU"
        raise ScaleError(
            f"--device {device}: CUDA is not available on this machine ({why}, torch {torch.__version__}). "
            "Use --device cpu, or run on a GPU machine with a CUDA build of torch (see README)."
        )
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ScaleError(f"--device {device}: this machine has {torch.cuda.device_count()} GPU(s).")


# ------------------------------------------------------------------------------------------------------ the engines


def engine_fill(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    accumulators: list,
    batch_size: int,
    progress: Progress | None = None,
) -> list:
    """Fill accumulators with engine.accumulate; returns them (a Fill for statistics that follow the protocol)."""
    accumulate(lm, inputs, accumulators, batch_size=batch_size, progress=progress)
    return accumulators


def merge_all(parts: Sequence[list]) -> list:
    """Merge lists of accumulators element-wise, in order."""
    merged = list(parts[0])
    for part in parts[1:]:
        merged = [a.merge(b) for a, b in zip(merged, part)]
    return merged


def plan_batches(lm: LoadedModel, inputs: Sequence[CorpusInput], batch_size: int) -> list[list[int]]:
    """The batches (input indices) that run_batches forms: windows in input order, sorted by length, then cut."""
    lengths = [encode(lm, item.text_a, item.text_b).n for item in inputs]
    batches = []
    for start in range(0, len(inputs), RUN_WINDOW):
        window = range(start, min(start + RUN_WINDOW, len(inputs)))
        order = sorted(window, key=lambda i: lengths[i])  # stable, as in runner._run_window
        batches += [order[b : b + batch_size] for b in range(0, len(order), batch_size)]
    return batches


def shard_batches(batches: list[list[int]], n_shards: int) -> list[list[list[int]]]:
    """Deal batches round-robin into at most n_shards non-empty shards (long and short batches spread evenly)."""
    n_shards = max(1, min(n_shards, len(batches)))
    return [batches[s::n_shards] for s in range(n_shards)]


def fill_shard(
    lm: LoadedModel, make_accumulators: MakeAccumulators, fill: Fill, shard: list[list[CorpusInput]], batch_size: int
) -> list:
    """One shard's accumulators: each of its batches is run on its own, exactly as the local engine batches it."""
    accumulators = make_accumulators(lm)
    for batch in shard:
        accumulators = fill(lm, batch, accumulators, batch_size, None)
    return merge_all([accumulators, make_accumulators(lm)])  # merging with empty ones drops buffers before pickling


class ShardWorker:
    """Ray Data callable class: loads the model once per worker, then turns each shard row into pickled accumulators."""

    def __init__(
        self, model: str, device: str, make_accumulators: MakeAccumulators, fill: Fill, batch_size: int
    ) -> None:
        check_device(device)
        self.lm = load_model(model, device=device)
        self.make_accumulators, self.fill, self.batch_size = make_accumulators, fill, batch_size

    def __call__(self, rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        out: dict[str, list] = {"shard": [], "accumulators": [], "seconds": [], "threads": []}
        for shard_id, payload in zip(rows["shard"], rows["payload"]):
            start = time.perf_counter()
            accumulators = fill_shard(
                self.lm, self.make_accumulators, self.fill, pickle.loads(payload), self.batch_size
            )
            out["shard"].append(int(shard_id))
            out["accumulators"].append(pickle.dumps(accumulators))
            out["seconds"].append(time.perf_counter() - start)
            out["threads"].append(torch.get_num_threads())
        return {
            "shard": np.array(out["shard"]),
            "accumulators": np.array(out["accumulators"], dtype=object),
            "seconds": np.array(out["seconds"]),
            "threads": np.array(out["threads"]),
        }


def ray_runtime_env() -> dict:
    """The runtime_env that ships this attnlib to every Ray worker: ray.init(address=..., runtime_env=ray_runtime_env())."""
    return {"py_modules": [str(Path(__file__).resolve().parent)]}


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ScaleError("--engine ray needs Ray: pip install -r requirements-scale.txt") from exc
    return ray


def _check_cluster(ray, workers: int, cpus_per_worker: float, gpus_per_worker: float) -> None:
    """Refuse a job the cluster can never schedule (Ray would wait for it for ever)."""
    resources = ray.cluster_resources()
    cpus, gpus = resources.get("CPU", 0.0), resources.get("GPU", 0.0)
    if workers * cpus_per_worker > cpus:
        raise ScaleError(
            f"--workers {workers} with {cpus_per_worker:g} CPU each needs {workers * cpus_per_worker:g} CPUs; "
            f"the Ray cluster has {cpus:g}."
        )
    if gpus_per_worker and workers * gpus_per_worker > gpus:
        raise ScaleError(
            f"--device cuda with --workers {workers} needs {workers} GPUs (one per worker); "
            f"the Ray cluster has {gpus:g}."
        )


@dataclass
class RayRunInfo:
    """What the Ray workers reported, per shard in the order they finished: seconds and torch threads."""

    n_shards: int
    shard_seconds: list[float]
    threads: list[int]


def run_on_ray(
    lm: LoadedModel,
    model: str,
    device: str,
    inputs: Sequence[CorpusInput],
    make_accumulators: MakeAccumulators,
    fill: Fill = engine_fill,
    batch_size: int = 32,
    workers: int = 2,
    cpus_per_worker: float = 1.0,
    progress: Progress | None = None,
) -> tuple[list, RayRunInfo]:
    """Run the corpus on Ray Data, one model per worker; `lm` (any device) only plans the batches on the driver.

    Uses the running Ray (ray.init(address=...) before calling), else starts one: RAY_ADDRESS if set, else local."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # RAY_ADDRESS joins an existing cluster, else Ray starts a local one; a Ray started by the caller needs
        # ray_runtime_env() (or attnlib installed on its nodes)
        ray.init(include_dashboard=False, log_to_driver=False, logging_level="WARNING", runtime_env=ray_runtime_env())
    try:
        gpus = 1.0 if device.startswith("cuda") else 0.0
        _check_cluster(ray, workers, cpus_per_worker, gpus)
        batches = plan_batches(lm, inputs, batch_size)
        shards = shard_batches(batches, workers * SHARDS_PER_WORKER)
        rows = [
            {"shard": s, "payload": pickle.dumps([[inputs[i] for i in batch] for batch in shard])}
            for s, shard in enumerate(shards)
        ]
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        dataset = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
            ShardWorker,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(workers, len(rows)), max_tasks_in_flight_per_actor=1),
            fn_constructor_kwargs=dict(
                model=model, device=device, make_accumulators=make_accumulators, fill=fill, batch_size=batch_size
            ),
            num_cpus=cpus_per_worker,
            num_gpus=gpus,
        )
        parts: dict[int, list] = {}
        seconds, threads, done = [], [], 0
        for row in dataset.iter_rows():
            shard = int(row["shard"])
            parts[shard] = pickle.loads(row["accumulators"])
            seconds.append(float(row["seconds"]))
            threads.append(int(row["threads"]))
            done += sum(len(b) for b in shards[shard])
            if progress is not None:
                progress(done, len(inputs))
    finally:
        if started_here:
            ray.shutdown()
    # merge in shard order, so the same run gives the same floating-point sums
    return merge_all([parts[s] for s in sorted(parts)]), RayRunInfo(len(shards), seconds, threads)


@dataclass
class CorpusRun:
    """Merged accumulators of one corpus run, with the model's facts and how it ran."""

    facts: ModelFacts
    accumulators: list
    engine: str
    device: str
    workers: int
    seconds: float
    ray: RayRunInfo | None = None

    def describe(self) -> dict:
        """The `run` part of a result file."""
        out = {"engine": self.engine, "device": self.device, "workers": self.workers, "seconds": round(self.seconds, 3)}
        if self.ray is not None:
            out["shards"] = self.ray.n_shards
        return out


def run_accumulators(
    model: str,
    inputs: Sequence[CorpusInput],
    make_accumulators: MakeAccumulators,
    fill: Fill = engine_fill,
    engine: str = "local",
    device: str = "cpu",
    workers: int = 2,
    batch_size: int = 32,
    cpus_per_worker: float = 1.0,
    progress: Progress | None = None,
) -> CorpusRun:
    """The scale API: fill make_accumulators(lm) over the corpus with the chosen engine and device; returns them merged.

    make_accumulators and fill go to the Ray workers, so they must pickle (module functions or functools.partial)."""
    if engine not in ENGINES:
        raise ScaleError(f"--engine {engine}: choose one of {', '.join(ENGINES)}.")
    start = time.perf_counter()
    if engine == "local":
        check_device(device)
        lm = load_model(model, device=device)
        accumulators = fill(lm, inputs, make_accumulators(lm), batch_size, progress)
        return CorpusRun(lm.facts, accumulators, engine, device, 1, time.perf_counter() - start)
    if workers < 1:
        raise ScaleError("--workers must be 1 or more.")
    _import_ray()
    lm = load_model(model, device="cpu")  # the driver only tokenizes (to plan batches) and reads the model's facts
    accumulators, info = run_on_ray(
        lm, model, device, inputs, make_accumulators, fill, batch_size, workers, cpus_per_worker, progress
    )
    return CorpusRun(lm.facts, accumulators, engine, device, workers, time.perf_counter() - start, info)


# ----------------------------------------------------------------------------------------------- the command line


def positive_int(text: str) -> int:
    """argparse type: an integer of 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {value}")
    return value


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
        batch_size=getattr(args, "batch_size", 32),
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


# ------------------------------------------------------------------------------------------------- result files


@dataclass
class ResultFile:
    """A command's result with where it came from; written by --out, loaded by the corpus pages."""

    command: str
    model: str
    corpus: dict  # name, path, sha1, n_inputs
    options: dict
    library_version: str
    created: str  # ISO 8601, UTC
    result: dict
    run: dict = field(default_factory=dict)  # engine, device, workers, seconds
    state: dict | None = None  # accumulator counts a page needs beyond the result (deps)

    def provenance(self) -> str:
        """One line: computed by <command> on <corpus> with <model>, <date>."""
        try:
            when = datetime.fromisoformat(self.created).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            when = self.created
        engine = self.run.get("engine")
        how = f" ({engine}, {self.run.get('workers')} workers, {self.run.get('device')})" if engine == "ray" else ""
        return (
            f"computed by `python -m attnlib {self.command}` on {self.corpus.get('name', '?')} "
            f"({self.corpus.get('n_inputs', '?')} inputs) with {self.model}, {when}{how}; "
            f"attnlib {self.library_version}"
        )

    def options_text(self) -> str:
        """The statistic's options as `name=value, ...` (or "defaults")."""
        return ", ".join(f"{k}={v}" for k, v in self.options.items()) or "defaults"

    def to_json(self) -> dict:
        """The file's JSON object, with the format marker first."""
        return {"format": RESULT_FORMAT, "format_version": RESULT_FORMAT_VERSION, **asdict(self)}


def make_result_file(
    command: str,
    model: str,
    corpus_path: str,
    n_inputs: int,
    options: dict,
    result: dict,
    run: dict | None = None,
    state: dict | None = None,
) -> ResultFile:
    """A ResultFile stamped with this library's version and the current time; the corpus named by path and hash."""
    from . import __version__

    path = Path(corpus_path)
    corpus = {
        "name": path.name,
        "path": str(path),
        "n_inputs": n_inputs,
        "sha1": hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else None,
    }
    return ResultFile(
        command,
        model,
        corpus,
        options,
        __version__,
        datetime.now(UTC).isoformat(timespec="seconds"),
        result,
        run or {},
        state,
    )


def json_ready(value: Any) -> Any:
    """Lists, ints and floats for strict JSON: numpy converted, NaN and infinities written as null."""
    if isinstance(value, np.ndarray):
        return json_ready(value.tolist())
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_result_file(path: str | Path, record: ResultFile) -> None:
    """Write the record as strict JSON (NaN as null)."""
    text = json.dumps(json_ready(record.to_json()), allow_nan=False)
    Path(path).write_text(text + "\n", encoding="utf-8")


def read_result_file(data: bytes | str, command: str | None = None, max_bytes: int = MAX_RESULT_BYTES) -> ResultFile:
    """Parse and check a result file (JSON only, nothing executed); with command, it must be that command's."""
    if len(data) > max_bytes:
        raise ResultFileError(
            f"the file is {len(data) / 1e6:.1f} MB; a result file may be at most {max_bytes / 1e6:.0f} MB."
        )
    try:
        record = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultFileError(f"not a JSON file ({exc}).") from exc
    if not isinstance(record, dict) or record.get("format") != RESULT_FORMAT:
        raise ResultFileError('not a result file of `python -m attnlib ... --out` (no "format": "attnlib-result").')
    if record.get("format_version") != RESULT_FORMAT_VERSION:
        raise ResultFileError(
            f"result file format {record.get('format_version')!r}; this app reads {RESULT_FORMAT_VERSION}."
        )
    expected = {
        "command": str,
        "model": str,
        "corpus": dict,
        "options": dict,
        "library_version": str,
        "created": str,
        "result": dict,
        "run": dict,
    }
    for key, kind in expected.items():
        if not isinstance(record.get(key), kind):
            raise ResultFileError(f"the result file has no valid {key!r}.")
    if command is not None and record["command"] != command:
        raise ResultFileError(f"this file holds the result of `{record['command']}`; this page shows `{command}`.")
    state = record.get("state")
    if state is not None and not isinstance(state, dict):
        raise ResultFileError("the result file has no valid 'state'.")
    return ResultFile(**{f.name: record.get(f.name) for f in fields(ResultFile)})


# -------------------------------------------------------------------- reading results back into library objects


def _array(value: Any, name: str, ndim: int, dtype=float) -> np.ndarray:
    """A numeric array of the given rank from JSON lists (null read as NaN), or ResultFileError."""
    try:
        array = np.array(value, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ResultFileError(f"{name!r} is not a numeric array.") from exc
    if array.ndim != ndim:
        raise ResultFileError(f"{name!r} has {array.ndim} dimensions, not {ndim}.")
    return array


def special_from_json(result: dict):
    """(SpecialTokenResult, HeadMap or None) from the `special` command's JSON."""
    from .head_distances import HeadMap
    from .special import STAT_KEYS, SpecialTokenResult

    try:
        heads = {key: _array(result["heads"][key], key, 2) for key in STAT_KEYS}
        shape = heads["cls"].shape
        if any(v.shape != shape for v in heads.values()):
            raise ResultFileError("the per-head statistics have different shapes.")
        special = SpecialTokenResult(
            int(result["n_inputs"]),
            heads,
            float(result["uniform_entropy"]),
            result.get("punctuation") == "all",
            int(result.get("n_truncated", 0)),
        )
        hm = None
        if result.get("head_map") is not None:
            m = result["head_map"]
            coords = np.column_stack([_array(m["x"], "x", 1), _array(m["y"], "y", 1)])
            hm = HeadMap(
                coords,
                _array(m["layer"], "layer", 1, int),
                _array(m["head"], "head", 1, int),
                np.array([str(b) for b in m["behaviour"]], dtype=object),
                _array(m["js_divergence"], "js_divergence", 2),
            )
            k = shape[0] * shape[1]
            if coords.shape[0] != k or hm.divergence.shape != (k, k) or len(hm.labels) != k:
                raise ResultFileError("the head map does not match the number of heads.")
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"the `special` result is incomplete or malformed ({exc!r}).") from exc
    return special, hm


def special_norms_from_json(result: dict):
    """The NormShareResult of a `special --norms` JSON, or None when the run had no --norms."""
    from .norms import NORM_KEYS, NormShareResult

    if result.get("norm_heads") is None:
        return None
    try:
        heads = {key: _array(result["norm_heads"][key], key, 2) for key in NORM_KEYS}
        if len({v.shape for v in heads.values()}) != 1:
            raise ResultFileError("the per-head norm statistics have different shapes.")
        return NormShareResult(int(result["n_inputs"]), heads)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"the `special --norms` result is incomplete or malformed ({exc!r}).") from exc


DEPENDENCY_ARRAYS = {"totals": 2, "head_hits": 5, "offset_hits": 3, "n_sentences": 1, "n_words": 1}


def dependency_counts_to_json(counts) -> dict:
    """Every count of a DependencyCounts, so a page can rebuild its tables and grids."""
    return {f.name: getattr(counts, f.name) for f in fields(counts)}


def dependency_counts_from_json(state: dict):
    """The DependencyCounts written by dependency_counts_to_json, shapes checked."""
    from .deps import OFFSETS, DependencyCounts

    try:
        arrays = {name: _array(state[name], name, ndim, np.int64) for name, ndim in DEPENDENCY_ARRAYS.items()}
        relations = [str(r) for r in state["relations"]]
        layers, heads, r = int(state["n_layers"]), int(state["n_heads"]), len(relations)
        shapes = {
            "totals": (2, r),
            "head_hits": (2, r, layers, heads, 2),
            "offset_hits": (2, r, len(OFFSETS)),
            "n_sentences": (2,),
            "n_words": (2,),
        }
        for name, shape in shapes.items():
            if arrays[name].shape != shape:
                raise ResultFileError(f"{name!r} has shape {arrays[name].shape}, expected {shape}.")
        return DependencyCounts(
            layers, heads, str(state["rule"]), relations, n_skipped=int(state["n_skipped"]), **arrays
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"the `deps` counts are incomplete or malformed ({exc!r}).") from exc


def positions_from_json(result: dict):
    """The PositionsResult of the `positions` command's JSON."""
    from .positions import PositionsResult

    try:
        return PositionsResult.from_dict(result)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"the `positions` result is incomplete or malformed ({exc!r}).") from exc


def aggregation_from_json(result: dict):
    """The AggregationResult of the `aggregation` command's JSON."""
    from .aggregation import AggregationResult

    try:
        return AggregationResult.from_dict(result)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"the `aggregation` result is incomplete or malformed ({exc!r}).") from exc
