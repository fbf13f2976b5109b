"""The corpus engines: in-process or on Ray (one model per worker), on CPU or CUDA.

With Ray the corpus is cut into shards made of whole batches of the local engine, so every input runs in exactly the
padded batch it would run in locally; each worker fills the same accumulators over its shard and the driver merges
them. The result therefore equals the local one up to the order of floating-point sums.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import pickle
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnlib.core.batches import Progress, accumulate
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import LoadedModel, ModelFacts, load_model
from attnlib.core.runner import encode, run_batches

ENGINES = ("local", "ray")
SHARDS_PER_WORKER = 2  # a few shards per worker even out uneven batches without much merging
RUN_WINDOW = inspect.signature(run_batches).parameters["window"].default  # run_batches sorts windows of this size

MakeAccumulators = Callable[[LoadedModel], list]
Fill = Callable[[LoadedModel, Sequence[CorpusInput], list, int, "Progress | None"], list]


class ScaleError(Exception):
    """A user-facing problem with the device, Ray or the cluster (one line, exit 2 on the command line)."""


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


def numbered(item: CorpusInput, index: int) -> CorpusInput:
    """A copy of an input that knows its place in the corpus, for a worker that sees only its shard (a statistic
    drawn per input, such as the masks of METHODS §15, is seeded by that place)."""
    copied = copy.copy(item)
    copied.corpus_index = index  # type: ignore[attr-defined]
    return copied


def corpus_index(item: CorpusInput, position: int) -> int:
    """An input's place in its corpus: the one a Ray shard carries, else its position in the inputs at hand."""
    return getattr(item, "corpus_index", position)


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
    return {"py_modules": [str(Path(__file__).resolve().parents[1])]}


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


def _shard_dataset(ray, rows: list[dict], worker_args: dict, pool: int, cpus: float, gpus: float):
    """The Ray Data pipeline: one block per shard row, mapped by a pool of ShardWorkers (one shard each at a time)."""
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    return ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
        ShardWorker,
        batch_size=1,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=pool, max_tasks_in_flight_per_actor=1),
        fn_constructor_kwargs=worker_args,
        num_cpus=cpus,
        num_gpus=gpus,
    )


@contextlib.contextmanager
def _ray_session() -> Iterator:
    """Ray: the running one (ray.init(address=...) before calling), else one started here and shut down after (RAY_ADDRESS
    if set, else local)."""
    ray = _import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # RAY_ADDRESS joins an existing cluster, else Ray starts a local one; a Ray started by the caller needs
        # ray_runtime_env() (or attnlib installed on its nodes). Ray's note that it chose token authentication (its
        # default) is not shown: stderr carries the command line's one error line.
        quiet = logging.getLogger("ray._private.authentication.authentication_token_setup")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            ray.init(
                include_dashboard=False, log_to_driver=False, logging_level="WARNING", runtime_env=ray_runtime_env()
            )
        finally:
            quiet.setLevel(level)
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


@dataclass(frozen=True)
class Scale:
    """Where a run runs: in this process, or on Ray, `workers` at a time, on a device; for a corpus (accumulate) or
    for independent items such as a model's checkpoints (map)."""

    engine: str = "local"
    workers: int = 2
    cpus_per_worker: float = 1.0
    device: str = "cpu"

    def map(self, function: Callable, arguments: Sequence[tuple]) -> list:
        """function(*a) for each a, in order: here one after another, or on Ray as tasks, at most `workers` running."""
        if self.engine not in ENGINES:
            raise ScaleError(f"--engine {self.engine}: choose one of {', '.join(ENGINES)}.")
        if self.engine == "local":
            return [function(*a) for a in arguments]
        with _ray_session() as ray:
            gpus = 1.0 if self.device.startswith("cuda") else 0.0
            _check_cluster(ray, self.workers, self.cpus_per_worker, gpus)
            task = ray.remote(num_cpus=self.cpus_per_worker, num_gpus=gpus)(function)
            submitted: list = []
            running: list = []
            for a in arguments:
                if len(running) >= self.workers:
                    _, running = ray.wait(running, num_returns=1)
                submitted.append(task.remote(*a))
                running.append(submitted[-1])
            return ray.get(submitted)

    def accumulate(
        self,
        model: str | LoadedModel,
        inputs: Sequence[CorpusInput],
        make_accumulators: MakeAccumulators,
        fill: Fill = engine_fill,
        batch_size: int = 32,
        progress: Progress | None = None,
    ) -> CorpusRun:
        """run_accumulators over a corpus with this engine, device, workers and CPUs per worker."""
        return run_accumulators(model, inputs, make_accumulators, fill, self.engine, self.device, self.workers,
                                batch_size, self.cpus_per_worker, progress)  # fmt: skip


LOCAL = Scale()  # in this process


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
    with _ray_session() as ray:
        gpus = 1.0 if device.startswith("cuda") else 0.0
        _check_cluster(ray, workers, cpus_per_worker, gpus)
        batches = plan_batches(lm, inputs, batch_size)
        shards = shard_batches(batches, workers * SHARDS_PER_WORKER)
        rows = [
            {"shard": s, "payload": pickle.dumps([[numbered(inputs[i], i) for i in batch] for batch in shard])}
            for s, shard in enumerate(shards)
        ]
        worker_args = dict(
            model=model, device=device, make_accumulators=make_accumulators, fill=fill, batch_size=batch_size
        )
        dataset = _shard_dataset(ray, rows, worker_args, min(workers, len(rows)), cpus_per_worker, gpus)
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
    model: str | LoadedModel,
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

    A loaded model runs as it is locally; with Ray each worker loads it by its name. make_accumulators and fill go to
    the Ray workers, so they must pickle (module functions or functools.partial)."""
    if engine not in ENGINES:
        raise ScaleError(f"--engine {engine}: choose one of {', '.join(ENGINES)}.")
    start = time.perf_counter()
    if engine == "local":
        if isinstance(model, LoadedModel):
            lm, device = model, model.device
        else:
            check_device(device)
            lm = load_model(model, device=device)
        accumulators = fill(lm, inputs, make_accumulators(lm), batch_size, progress)
        return CorpusRun(lm.facts, accumulators, engine, device, 1, time.perf_counter() - start)
    if workers < 1:
        raise ScaleError("--workers must be 1 or more.")
    _import_ray()
    name = model.facts.name if isinstance(model, LoadedModel) else model
    # the driver only tokenizes (to plan batches) and reads the model's facts
    lm = model if isinstance(model, LoadedModel) else load_model(name, device="cpu")
    accumulators, info = run_on_ray(
        lm, name, device, inputs, make_accumulators, fill, batch_size, workers, cpus_per_worker, progress
    )
    return CorpusRun(lm.facts, accumulators, engine, device, workers, time.perf_counter() - start, info)
