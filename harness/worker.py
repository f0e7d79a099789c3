"""GPU points run in a worker process. An illegal address or launch failure poisons the CUDA
context for good (the executor makes such a point `crashed`, see backends.base.context_lost), and
a driver fault can kill the process: either way the point is `crashed` with the error text, the
worker is replaced, and the sweep goes on."""
from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Any

from harness import backends
from harness.measurement import Measurement, Status
from harness.sweep import Point

# A group that takes longer than this is declared hung; the worker is killed and replaced.
GROUP_TIMEOUT_S = 600.0


def _lost_context(measurements: list[Measurement]) -> Measurement | None:
    """The first row whose point took the CUDA context down, if any."""
    return next((m for m in measurements if m.status == Status.CRASHED), None)


def _worker_main(connection: Any, seed: int, registry: dict[str, str]) -> None:
    from harness import backends
    from harness.executor import PointExecutor
    backends.register_all(registry)
    executor = PointExecutor(seed)
    while True:
        group = connection.recv()
        if group is None:
            return
        results = executor.measure(group)
        lost = _lost_context(results)
        if lost is not None:
            # The rows after it ran on a dead context: the whole group is reported as the crash.
            # planned_point_id kept: --resume and the progress count go by planned points
            results = [Measurement(m.point, Status.CRASHED, lost.reason, m.family,
                                   planned_point_id=m.planned_point_id)
                       for m in results]
        connection.send(results)
        _return_cached_memory()
        if lost is not None:
            return  # the context is unusable: let the pool start a fresh process


# Cached, unused GPU memory a worker keeps for its next group; beyond it the pool's free blocks
# go back to the driver, so the sibling process timing the same point (harness.process_split)
# finds the memory free.
KEEP_CACHED_BYTES = 2 << 30


def _return_cached_memory() -> None:
    cupy = sys.modules.get("cupy")     # only where a backend already brought CUDA up
    if cupy is None:
        return
    pool = cupy.get_default_memory_pool()
    if pool.free_bytes() > KEEP_CACHED_BYTES:
        pool.free_all_blocks()


class WorkerPool:
    """One worker process at a time, restarted whenever it dies."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self._context = mp.get_context("spawn")
        self._process = None
        self._connection = None

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(
            target=_worker_main, args=(child, self.seed, backends.registry()), daemon=True)
        self._process.start()
        child.close()
        self._connection = parent

    def measure(self, group: list[Point]) -> list[Measurement]:
        if self._process is None or not self._process.is_alive():
            self._start()
        try:
            self._connection.send(group)
            if not self._connection.poll(GROUP_TIMEOUT_S):
                self._kill()
                return _crashed(group, f"no result within {GROUP_TIMEOUT_S:.0f} s: worker killed")
            results = self._connection.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = self._process.exitcode if self._process else None
            self._kill()
            return _crashed(group, f"worker process died (exit code {code})")
        if any(m.status == Status.CRASHED for m in results):
            self._kill()  # it is exiting on its own; do not hand it the next group
        return results

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(timeout=10)
        self._process = None

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._connection.send(None)
                self._process.join(timeout=30)
            except (BrokenPipeError, OSError):
                pass
        self._kill()


def _crashed(group: list[Point], reason: str) -> list[Measurement]:
    return [Measurement(p, Status.CRASHED, reason) for p in group]
