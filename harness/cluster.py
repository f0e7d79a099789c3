"""Dask glue for `--cluster`: one sweep over many GPUs and machines. Imported only when --cluster
is given, and it imports `distributed` only inside its functions, so the message for a missing
extra is ours.

The unit of work is a shard (runner.shards: the points of one problem at one precision). Each
runs in a Dask worker through a runner.Measurer kept warm in that worker: CPU points in the
worker, GPU points in its crash-isolated child process (harness.worker), which keeps the per-point
kill that a Dask task lacks. A shard's rows come back together when it finishes; a worker lost
mid-shard sent nothing for it, and Dask runs the shard again elsewhere, so no row is written twice.

Three forms: `local` (one worker per visible GPU, each pinned with CUDA_VISIBLE_DEVICES, or
--workers CPU workers), `tcp://HOST:PORT` (a scheduler the user started, workers with
`--resources GPU=1`), `slurm` (dask-jobqueue, from a [cluster] table).
"""
from __future__ import annotations

import importlib.util
import logging
import os
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import backends, cpu_memory
from harness.measurement import Measurement, Status
from harness.sweep import Point

CONNECT_TIMEOUT_S = 10
DEFAULT_CPU_WORKERS = 2
# Set for the cluster's lifetime (dask.config.set), and handed to the worker processes:
# - Dask workers are daemonic processes by default, and a daemonic process may not start the
#   crash-isolated child that runs GPU points;
# - Dask's NVML monitor reads CUDA_VISIBLE_DEVICES itself and fails to start the cluster
#   ("Invalid Argument") when that names a device this host lacks; we never use its GPU panel;
# - worker processes log every start and stop at INFO; our progress lines say what matters.
_CLUSTER_CONFIG = {"distributed.worker.daemon": False, "distributed.diagnostics.nvml": False,
                   "logging.distributed": "error"}
SLURM_KEYS = {"queue": str, "account": str, "walltime": str, "gpus_per_job": int, "jobs": int,
              "cores": int, "memory": str}


class ClusterError(ValueError):
    """Bad --cluster input or an unusable cluster: one line, exit 2."""


@dataclass(frozen=True)
class ShardResult:
    """What a worker sends back for one shard: who measured it, on what, the rows, and when
    each row's point finished (store.finished_now, taken in the worker)."""
    worker: str
    env: dict[str, Any]
    measurements: tuple[Measurement, ...]
    finished_at: tuple[str, ...]


# ---- in the Dask worker -------------------------------------------------------------------------
# One Measurer per worker process and seed, so test data stays cached and the GPU child process
# (CUDA context, cuDNN handles) starts once, not once per shard; the fingerprint is taken once
# too, as a run without --cluster takes it once. The lock keeps shards on one worker from
# overlapping: two timings at once on one device would measure each other.
_measurers: dict[int, tuple[Any, dict[str, Any]]] = {}
_worker_lock = threading.Lock()


def measure_shard(shard: list[Point], seed: int, registry: dict[str, str]) -> ShardResult:
    from distributed import get_worker
    from harness import env as envmod
    from harness import runner, store
    with _worker_lock:
        backends.register_all(registry)
        if seed not in _measurers:
            _measurers[seed] = runner.Measurer(seed), envmod.fingerprint()
        measurer, fingerprint = _measurers[seed]
        rows: list[Measurement] = []
        stamps: list[str] = []

        def keep(measurement: Measurement) -> None:
            rows.append(measurement)
            stamps.append(store.finished_now())
        measurer.run(shard, keep)
        return ShardResult(str(get_worker().name), fingerprint, tuple(rows), tuple(stamps))


def dask_setup(worker: Any) -> None:
    """Preload for workers that share one multi-GPU job (`--cluster slurm`, gpus_per_job > 1):
    worker NAME-i takes the i-th GPU the job was given, before anything starts CUDA."""
    index = str(worker.name).rsplit("-", 1)[-1]
    given = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if index.isdigit() and int(index) < len(given) and given[0]:
        os.environ["CUDA_VISIBLE_DEVICES"] = given[int(index)]


def release_measurers() -> None:
    """Run on every worker when the client is done: stops the GPU child processes, which would
    otherwise hold a CUDA context (and memory) on a user's long-lived worker until it exits."""
    with _worker_lock:
        for measurer, _ in _measurers.values():
            measurer.close()
        _measurers.clear()


def can_start_children() -> bool:
    """Run on a worker: whether it may start the crash-isolated GPU child (a daemonic process
    may not have children: `dask worker` makes daemonic ones unless told otherwise)."""
    import multiprocessing
    return not multiprocessing.current_process().daemon


# ---- in the client ------------------------------------------------------------------------------
def needs_gpu(points: list[Point]) -> bool:
    return any(backends.get(p.backend).device == "cuda" for p in points)


def needs_cpu(points: list[Point]) -> bool:
    return any(backends.get(p.backend).device != "cuda" for p in points)


def comparability_fields(cpu: bool) -> tuple[str, ...]:
    """What every worker of one run must share: env.COMPARABILITY_FIELDS, less the CPU model
    when no point is timed on a CPU (a GPU kernel's time does not depend on the host CPU)."""
    from harness.env import COMPARABILITY_FIELDS
    return tuple(f for f in COMPARABILITY_FIELDS if cpu or f != "cpu_model")


def difference(environments: list[dict[str, Any]], fields: tuple[str, ...]
               ) -> tuple[str, list[str]] | None:
    """The first field in which the environments differ and the values seen, or None."""
    for field in fields:
        seen = sorted({str(env.get(field)) for env in environments})
        if len(seen) > 1:
            return field, seen
    return None


class Cluster:
    """A connected Dask client (and the cluster it started, if any)."""

    def __init__(self, client: Any, owned: Any, config: Any):
        self.client = client
        self._owned = owned
        self._config = config
        # What every shard's worker must match (set once the workers were checked): the
        # fields and the environment of the workers seen at connect; None allows any.
        self.comparable: tuple[str, ...] | None = None
        self.reference_env: dict[str, Any] = {}

    def foreign_worker(self, result: ShardResult) -> str | None:
        """Why a shard's worker may not join this run's table (a worker that joined after
        connect on another GPU, driver or library), or None."""
        if self.comparable is None or not result.env or not self.reference_env:
            return None
        differs = difference([self.reference_env, result.env], self.comparable)
        if differs is None:
            return None
        field, seen = differs
        return (f"--cluster: worker {result.worker} differs in {field} ({', '.join(seen)}) "
                "from the workers checked at the start; its shard was not written. Pass "
                "--allow-mixed to keep it, or stop that worker and --resume")

    @property
    def dashboard(self) -> str | None:
        """The dashboard's address where it draws anything: a scheduler started here serves
        only a "please install bokeh" page without bokeh installed here."""
        services = self.client.scheduler_info().get("services", {})
        drawn = self._owned is None or importlib.util.find_spec("bokeh") is not None
        return self.client.dashboard_link if "dashboard" in services and drawn else None

    def worker_names(self) -> list[str]:
        workers = self.client.scheduler_info()["workers"].values()
        return sorted(str(w.get("name")) for w in workers)

    def environments(self) -> dict[str, dict[str, Any]]:
        """Each worker's fingerprint, measured where it runs."""
        from harness import env as envmod
        return self.client.run(envmod.fingerprint)

    def run(self, shards: list[list[Point]], seed: int) -> Iterator[ShardResult]:
        """Shards in the order given (largest first), results as they finish."""
        from distributed import KilledWorker, as_completed
        from harness import store
        registry = backends.registry()
        futures = {self.client.submit(measure_shard, shard, seed, registry, pure=False,
                                      priority=len(shards) - rank,
                                      resources={"GPU": 1} if needs_gpu(shard) else None): shard
                   for rank, shard in enumerate(shards)}
        try:
            for future in as_completed(futures):
                error = future.exception() if future.status == "error" else None
                # A shard that took down every worker that tried it (a crash the worker
                # process could not isolate) is `crashed` rows, as in a run without --cluster.
                if isinstance(error, KilledWorker):
                    lost = futures[future]
                    # No worker fingerprint: the client gives these rows the machine of the
                    # run's other rows (an empty one would read as a machine of its own).
                    yield ShardResult("(lost)", {}, tuple(
                        Measurement(p, Status.CRASHED,
                                    f"the Dask workers running it died ({error})")
                        for p in lost), (store.finished_now(),) * len(lost))
                else:
                    yield future.result()     # any other error is a harness bug: raised
                # Released at once: a held result whose worker dies would be computed again.
                future.release()
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def close(self) -> None:
        try:
            self.client.run(release_measurers)
        except Exception:  # a worker already gone holds nothing; close anyway
            pass
        try:
            self.client.close()
        finally:
            try:
                if self._owned is not None:       # stopped even when the client would not close
                    self._owned.close()
            finally:
                self._config.__exit__(None, None, None)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(target: str, workers: int | None, config_path: str | None,
            gpu: bool) -> Cluster:
    """A Cluster for `--cluster TARGET`; ClusterError (one line) for anything unusable."""
    if not (target == "local" or target == "slurm" or target.startswith("tcp://")):
        raise ClusterError(f"--cluster {target!r}: expected local, tcp://HOST:PORT or slurm")
    if workers is not None and target != "local":
        raise ClusterError("--workers is for --cluster local; the cluster's own workers run "
                           f"with --cluster {target}")
    if config_path is not None and target != "slurm":
        raise ClusterError(f"--cluster-config is for --cluster slurm; --cluster {target} "
                           "would ignore it")
    _require("distributed", "Dask distributed", "pip install 'convbench[cluster]'")
    import dask
    config = dask.config.set(_CLUSTER_CONFIG)
    logging.getLogger("distributed").setLevel(logging.ERROR)   # our one line says what matters
    cluster = None
    try:
        if target == "local":
            client, owned = _local(workers, gpu)
        elif target == "slurm":
            client, owned = _slurm(_slurm_options(config_path))
        else:
            client, owned = _remote(target), None
        cluster = Cluster(client, owned, config)
        _check_workers(cluster, target, gpu)
        return cluster
    except BaseException:
        if cluster is not None:
            cluster.close()                      # leaves dask's configuration as it was, too
        else:
            config.__exit__(None, None, None)
        raise


def _require(module: str, what: str, install: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ClusterError(f"--cluster needs {what}, which is not installed here: {install}")


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries: those it already names,
    else every device NVML sees (NVML, unlike CUDA, starts no context in this process)."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [d.strip() for d in named.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import pynvml
        pynvml.nvmlInit()
        return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # no NVML or no driver: no GPU to give a worker
        return []


def _local(workers: int | None, gpu: bool) -> tuple[Any, Any]:
    from distributed import Client, LocalCluster, Nanny, Scheduler, SpecCluster
    if not gpu:
        cluster = LocalCluster(n_workers=workers or DEFAULT_CPU_WORKERS, threads_per_worker=1,
                               processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR, env=dict(cpu_memory.WORKER_ENV))
        return Client(cluster), cluster
    gpus = visible_gpus()
    if not gpus:
        raise ClusterError("--cluster local: the sweep has GPU points and no GPU is visible")
    if workers is not None and workers > len(gpus):
        raise ClusterError(f"--workers {workers}: only {len(gpus)} GPU(s) visible, "
                           "and a GPU worker needs a GPU of its own")
    # The environment is set in each worker process before it starts, hence before CUDA does.
    # No nanny memory limit: a GPU worker's memory is held by its crash-isolated child, which
    # the nanny does not see, and each point's buffers are checked against free memory first
    # (harness.memory); a limit would only pause a worker that is merely waiting.
    spec = {f"gpu{device}": {"cls": Nanny, "options": {
        "nthreads": 1, "resources": {"GPU": 1}, "memory_limit": 0,
        "env": {"CUDA_VISIBLE_DEVICES": device, **cpu_memory.WORKER_ENV}}}
        for device in gpus[:workers or len(gpus)]}
    cluster = SpecCluster(workers=spec, silence_logs=logging.ERROR, scheduler={
        "cls": Scheduler, "options": {"dashboard_address": ":0"}})
    return Client(cluster), cluster


def _remote(address: str) -> Any:
    from distributed import Client
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as err:
        raise ClusterError(f"--cluster {address}: no Dask scheduler answered within "
                           f"{CONNECT_TIMEOUT_S} s ({type(err).__name__})") from None


def _check_workers(cluster: Cluster, target: str, gpu: bool) -> None:
    try:
        cluster.client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S if target != "slurm"
                                        else None)
    except TimeoutError:
        raise ClusterError(f"--cluster {target}: the scheduler has no workers "
                           f"(waited {CONNECT_TIMEOUT_S} s)") from None
    workers = cluster.client.scheduler_info()["workers"].values()
    if gpu and not any(w.get("resources", {}).get("GPU") for w in workers):
        raise ClusterError(f"--cluster {target}: the sweep has GPU points and no worker "
                           "offers a GPU (start workers with --resources GPU=1)")
    if gpu:
        daemonic = sorted(name for name, ok in cluster.client.run(can_start_children).items()
                          if not ok)
        if daemonic:
            raise ClusterError(
                f"--cluster {target}: worker(s) {', '.join(daemonic)} run as daemonic "
                "processes, which cannot start the process that times GPU points: start them "
                "with DASK_DISTRIBUTED__WORKER__DAEMON=False in their environment")


# ---- Slurm --------------------------------------------------------------------------------------
def _slurm_options(config_path: str | None) -> dict[str, Any]:
    """The [cluster] table of --cluster-config, checked; empty: dask's jobqueue config decides."""
    if config_path is None:
        return {}
    path = Path(config_path)
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8")).get("cluster")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ClusterError(f"--cluster-config {path}: {type(err).__name__}: {err}") from None
    if not isinstance(table, dict):
        raise ClusterError(f"--cluster-config {path}: no [cluster] table")
    for key, value in table.items():
        kind = SLURM_KEYS.get(key)
        if kind is None:
            raise ClusterError(f"--cluster-config {path}: unknown key {key!r} in [cluster]; "
                               f"known: {', '.join(SLURM_KEYS)}")
        if not isinstance(value, kind) or isinstance(value, bool) or (kind is int and value < 1):
            raise ClusterError(f"--cluster-config {path}: [cluster] {key} = {value!r} must be "
                               f"a {'positive integer' if kind is int else 'string'}")
    return table


def _env_name(key: str) -> str:
    """Dask's environment variable for a config key: DASK_ + dots as double underscores."""
    return "DASK_" + key.upper().replace(".", "__")


def _slurm(options: dict[str, Any]) -> tuple[Any, Any]:
    _require("dask_jobqueue", "dask-jobqueue for slurm", "pip install 'convbench[slurm]'")
    from dask_jobqueue import SLURMCluster
    from distributed import Client
    gpus = options.get("gpus_per_job", 1)
    settings = {key: options[key] for key in ("queue", "account", "walltime", "cores", "memory")
                if key in options}
    # One Dask worker per GPU of a job, each with one GPU (dask_setup above pins it).
    try:
        cluster = SLURMCluster(
            processes=gpus, job_extra_directives=[f"--gres=gpu:{gpus}"],
            worker_extra_args=["--resources", "GPU=1", "--preload", "harness.cluster"],
            job_script_prologue=[f"export {_env_name(key)}={value}"
                                 for key, value in _CLUSTER_CONFIG.items()], **settings)
    except ValueError as err:    # e.g. neither the config nor dask's jobqueue names cores/memory
        raise ClusterError(f"--cluster slurm: {err}") from None
    cluster.scale(jobs=options.get("jobs", 1))
    return Client(cluster), cluster
