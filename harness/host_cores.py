"""Did the host give a multi-threaded CPU point the cores it runs on? (issue 42)

On the 2-core AMD EPYC VM, for a fraction of a second to tens of seconds at a time, the host does
not run both vCPUs at once, and every fork and join of a two-thread call waits for the other
vCPU's turn: no run-queue wait, no steal, nothing harness/contention.py can see per sample.
im2col's bwd_filter at res2a (per image a GEMM of 64 filters, which OpenBLAS splits into short
parallel steps) read 31-37 ms a launch in such spells against 14-21 ms, its buffers unchanged,
and whole rows were stored clean at 31-35 ms against 14-15 ms. A small matmul whose threads
join often shows the spells best: SYNC_PROBE's parallel speedup (its one-thread time over its
time at every core) read 1.52-1.82 (1st-90th percentile) outside the spells and 1.07-1.26 in
them, where contention's 384 probe overlapped (1.70-2.04 against 1.35-1.66) and a 576x3136x512
GEMM at two threads (few joins) hardly moved
(evidence/logs/host-withheld-cores-issue42-cpu-amd-epyc-2026-11-29.txt).

A multi-threaded CPU point reads that speedup, at its own thread count, just before and just
after it is timed. Both under WITHHELD_SHARE of the host's capacity (CAPACITY_QUANTILE of the
last READINGS_KEPT readings of this process, seeded by SEED_READS at its first point) say the
host withheld cores while the point ran: the point polls until a reading is over that share
again (at most WAIT_S; the polls do not count towards the capacity, or a long spell would
become it) and is timed once more; if the reading after the second timing finds the cores
withheld again, the row keeps the second timing, is `contended` (never ranked, AMBIGUOUS in
`compare`) and says why. `host_speedup` holds the higher reading. Both readings for the first
timing, because a single reading may catch a spell of milliseconds that the point does not
feel; a quantile, not the best, because one slow one-thread read makes an outlier.

Spells last up to tens of seconds, longer than a process of a few points, whose own readings
are then all low. So the capacity is also the highest of the last STORED_PROCESSES processes'
on this CPU and its libraries (each stores its own after STORE_AFTER readings, in the cache
folder: CapacityFile); a machine that became slower for good heals after that many processes.
A first process on a machine that starts inside a spell judges its first points by its own low
readings; `compare`'s probe rule (docs/regression-checks.md) still covers those rows.
"""
from __future__ import annotations

import contextlib
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness import cache_dir, contention

# The probe: a 256 x 256 float32 matmul, the median of this many (0.19 ms at two threads).
SYNC_PROBE_SIZE, SYNC_PROBE_REPEATS = 256, 9
WITHHELD_SHARE = 0.8
CAPACITY_QUANTILE = 0.8
READINGS_KEPT = 64
SEED_READS = 5
STORED_PROCESSES, STORE_AFTER = 5, 16
WAIT_S, POLL_S = 2.0, 0.05


@dataclass(frozen=True)
class Reading:
    probe_ms: float           # contention.host_probe_ms at every core (the row's host_probe_ms)
    speedup: float | None     # the sync probe's one-thread time over its time now (None: unread)


def sync_probe_ms(cores: int) -> float:
    """contention's probe matmul at SYNC_PROBE_SIZE (its threads join often), at `cores`."""
    return contention.host_probe_ms(cores, SYNC_PROBE_SIZE, SYNC_PROBE_REPEATS)


class CapacityFile:
    """The capacities earlier processes read, per core count: {"2": [1.78, 1.81, ...]}, the last
    STORED_PROCESSES. A file that cannot be read or holds anything else counts as empty and is
    written afresh."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> dict[int, list[float]]:
        try:
            raw = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(raw, dict):
            return {}
        return {int(cores): [float(v) for v in values][-STORED_PROCESSES:]
                for cores, values in raw.items()
                if cores.isascii() and cores.isdigit() and isinstance(values, list)
                and all(type(v) in (int, float) and 0 < v < math.inf for v in values)}

    def add(self, cores: int, capacity: float) -> None:
        stored = self.load()
        stored[cores] = (stored.get(cores, []) + [round(capacity, 4)])[-STORED_PROCESSES:]
        with contextlib.suppress(OSError):     # a read-only cache folder: nothing remembered
            cache_dir.replace_text(self.path, json.dumps({str(k): v for k, v in stored.items()}))


class HostCores:
    """The host's parallel capacity as this process has read it, and each point's readings."""

    def __init__(self, probe: Callable[[int], float] = contention.host_probe_ms,
                 sync: Callable[[int], float] = sync_probe_ms,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, store: CapacityFile | None = None):
        self._probe, self._sync, self._clock, self._sleep = probe, sync, clock, sleep
        self._store = store
        self._stored: dict[int, list[float]] | None = None     # read at the first reading
        self._speedups: dict[int, deque[float]] = {}
        self._count: dict[int, int] = {}

    def capacity(self, cores: int) -> float:
        """CAPACITY_QUANTILE of the speedups read at `cores` (read first), or the highest an
        earlier process stored, whichever is higher."""
        return max([self._own_capacity(cores), *(self._stored or {}).get(cores, [])])

    def _own_capacity(self, cores: int) -> float:
        kept = sorted(self._speedups[cores])
        return kept[int(CAPACITY_QUANTILE * (len(kept) - 1))]

    def read(self, cores: int, speed_cores: int) -> Reading:
        """contention's probe at `cores` threads (the row's host_probe_ms) and, where
        `speed_cores` > 1, the sync probe's speedup at that many threads, which counts towards
        the capacity."""
        if speed_cores <= 1:
            return Reading(self._probe(cores), None)
        reading = Reading(self._probe(cores), self._speedup_at(speed_cores))
        self._record(speed_cores, reading.speedup)
        return reading

    def _speedup_at(self, cores: int) -> float:
        """The sync probe's speedup at `cores` threads (seeding the capacity at the first)."""
        if self._stored is None:
            self._stored = self._store.load() if self._store is not None else {}
        if cores not in self._speedups:
            self._speedups[cores] = deque((self._fresh_speedup(cores) for _ in range(SEED_READS)),
                                          maxlen=READINGS_KEPT)
        return self._fresh_speedup(cores)

    def _fresh_speedup(self, cores: int) -> float:
        return self._sync(1) / max(self._sync(cores), 1e-9)

    def _record(self, cores: int, speedup: float) -> None:
        self._speedups[cores].append(speedup)
        self._count[cores] = self._count.get(cores, 0) + 1
        if self._count[cores] == STORE_AFTER and self._store is not None:
            self._store.add(cores, self._own_capacity(cores))

    def withheld(self, cores: int, *readings: Reading) -> str | None:
        """Why the readings say the host withheld cores (every one under WITHHELD_SHARE of the
        capacity), or None."""
        speedups = [r.speedup for r in readings if r.speedup is not None]
        if cores <= 1 or not speedups:
            return None
        high, capacity = max(speedups), self.capacity(cores)
        if high >= WITHHELD_SHARE * capacity:
            return None
        return (f"the host withheld cores: {cores} threads ran a small matmul at most {high:.2f}x "
                f"one thread's speed around the point, where this machine reads {capacity:.2f}x")

    def wait(self, speed_cores: int) -> None:
        """Poll the sync probe until its speedup at `speed_cores` is back over WITHHELD_SHARE of
        the capacity (or WAIT_S has passed). The polls do not count towards the capacity: a
        long spell would become it."""
        deadline = self._clock() + WAIT_S
        while (self._speedup_at(speed_cores) < WITHHELD_SHARE * self.capacity(speed_cores)
               and self._clock() < deadline):
            self._sleep(POLL_S)


_PROCESS: HostCores | None = None


def this_process() -> HostCores:
    """The process's one HostCores (its capacity is the process's, whichever executor reads),
    remembering in the cache folder's file for this CPU and its libraries."""
    global _PROCESS
    if _PROCESS is None:
        from harness import cpu_peaks, env
        path = cpu_peaks.cache_path(env.fingerprint(include_gpu=False), "host-cores")
        _PROCESS = HostCores(store=CapacityFile(path))
    return _PROCESS
