"""Did a CPU point share the cores with other work while it was timed? (issues 16, 36)

Measured per sample, not inferred. Linux keeps, for every thread, the nanoseconds it spent
runnable but waiting for a core: the second field of /proc/self/task/<tid>/schedstat. The timer
(harness/timer.time_cpu) reads it for every thread of the process (NumPy's BLAS and OpenMP
workers included) around each sample; a sample whose threads waited, summed, more than
WAIT_SHARE of its wall time did not measure the algorithm alone. It is discarded and taken
again after a back-off pause (Retakes), a bounded number of times; a point that cannot
collect its sample floor clean keeps every sample and is `contended`: never ranked, planned or
called best (harness/analysis/points.verified), AMBIGUOUS in `compare`.
Alone, a two-thread GEMM's waits were under 1% of its wall time in 90% of samples; beside one
busy process, over half (evidence/notes/constants.md#contention-wait_share).

Why not CPU/wall or the load average (the check before issue 36, kept as the fallback where
schedstat cannot be read, with the row's `contention_check` saying which ran): a 2-thread point
that got one core still reads CPU/wall ~1.0 (it ran; one of its threads did not), and the load
average lags a neighbour that started seconds ago by a minute.

Two things the run queue does not show, judged as well:
- Tick-quantized samples: a sample that lands on a multiple of the scheduler tick (4 ms at
  HZ=250: 7.99, 15.99, 23.98 ms seen with no neighbour, CPU/wall 1.00) and lies far above the
  point's other samples is a thread pool's barrier wait for a worker that was not running
  (descheduled by the hypervisor, woken at the next tick). Such samples are retaken the same way.
- Steal time (/proc/stat): the hypervisor running something else on the machine's CPUs. A guest
  thread it stopped still reads as running. Over STEAL_FLOOR of the CPU time during the point's
  loop, the point is timed once more.
- The host's slow spells (host_probe_ms): for 10-30 s at a time a fixed matmul on both cores
  ran ~30% slower and every multi-threaded point with it, with no run-queue wait and no steal:
  the host not running both vCPUs at once, which stalls every fork/join
  (evidence/notes/constants.md#contention-host_slower). Nothing in the guest can wait it out
  sample by sample, so each CPU point records that probe, timed just before and after it, and
  `compare` does not call a multi-threaded row SLOWER (FASTER) where the new (base) run's
  probe read HOST_SLOWER slower and the row moved no more than the spell can move a point
  (SPELL_REACH).
"""
from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WAIT_SHARE = 0.05         # threads' summed run-queue wait over a sample's wall time: retaken
TICK_MS = 4.0             # the scheduler tick at HZ=250 (Debian's and Ubuntu's kernels)
TICK_TOLERANCE_MS = 0.05  # a sample this close to a multiple of the tick lies on it
TICK_OUTLIER = 1.3        # ... and this far above the point's median: a barrier wait
STEAL_FLOOR = 0.1         # the hypervisor took a tenth of the machine's CPU time
HOST_SLOWER = 0.15        # a probe this much slower in one run: the host was in a slow spell
# How far a spell can move a point: log(point's slowdown) / log(probe's). A 2-thread direct
# convolution read 1.9x while the probe read 1.3x (2.45); a row slower than its spell's reach
# stays SLOWER, so a lasting shift of the probe cannot hide a larger regression.
SPELL_REACH = 2.5
PROBE_SIZE, PROBE_REPEATS = 384, 5
# The fallback where schedstat cannot be read (module docstring):
RATIO_FLOOR = 0.8       # CPU/wall under this: >20% of the wall time runnable but not running
LOAD_MARGIN = 1.0       # a whole runnable thread beyond the cores, on average, before it counts
REMEASURE_DROP = 0.75   # a re-measurement whose CPU/wall fell by a quarter: sharing got worse

# The row's `contention_check`: how its samples were judged.
SCHEDSTAT = "schedstat"
FALLBACK = "cpu_wall_load"
FALLBACK_NOTE = ("per-thread run-queue waits (/proc/self/task/*/schedstat) cannot be read here: "
                 "contention was judged from CPU/wall and the load average, which miss a "
                 "multi-threaded point that got fewer cores than it has threads")


class ThreadWaits:
    """Run-queue wait, in ns, of every thread of this process (schedstat's second field)."""

    def __init__(self, tasks: str = "/proc/self/task"):
        self.tasks = tasks

    def read(self) -> dict[str, int] | None:
        """tid -> ns waited since the thread started; None where schedstat cannot be read."""
        try:
            tids = os.listdir(self.tasks)
        except OSError:
            return None
        waits = {}
        for tid in tids:
            try:
                with open(f"{self.tasks}/{tid}/schedstat", "rb") as f:
                    waits[tid] = int(f.read().split()[1])
            except (OSError, ValueError, IndexError):
                continue         # a thread that ended between the listing and the read
        return waits or None


def waited_ns(before: dict[str, int], after: dict[str, int]) -> int:
    """What every thread waited between two readings; a thread born in between counts whole."""
    return sum(max(0, wait - before.get(tid, 0)) for tid, wait in after.items())


def sample_waited(wall_ns: int, waited: int) -> bool:
    return waited > WAIT_SHARE * wall_ns


def tick_quantized(samples: Sequence[float]) -> list[int]:
    """Indices of samples (ms) that lie on a multiple of the scheduler tick and over
    TICK_OUTLIER times the median of all of them: barrier waits (module docstring)."""
    if len(samples) < 3:
        return []
    bar = TICK_OUTLIER * statistics.median(samples)
    return [i for i, s in enumerate(samples)
            if s > bar and s >= TICK_MS - TICK_TOLERANCE_MS
            and abs(s - TICK_MS * round(s / TICK_MS)) <= TICK_TOLERANCE_MS]


# A sample whose threads waited for a core (or that lay on a scheduler tick) is taken again, at
# most this many times per point beyond its sample floor, each after a pause that doubles from
# RETAKE_PAUSE_MS to RETAKE_PAUSE_MAX_MS: a neighbour's burst (a compiler, a test) often ends within
# it; one that never ends (a spinning process) costs a point at most MIN_RETAKES or min_samples
# pauses (under 0.4 s at the defaults) before it is called contended.
MIN_RETAKES = 5
RETAKE_PAUSE_MS, RETAKE_PAUSE_MAX_MS = 2.0, 64.0


class Retakes:
    """The retakes one point's timing loop may still spend (harness/timer.time_cpu)."""

    def __init__(self, min_samples: int):
        self.left = max(min_samples, MIN_RETAKES)
        self.taken = 0
        self.pause_ms = RETAKE_PAUSE_MS

    def take(self, launch: Callable[[], None], samples: int = 1) -> bool:
        """Pause, re-warm (the pause let library threads go to sleep) and say whether `samples`
        discarded samples may be taken again; False once the retakes ran out."""
        if self.left <= 0:
            return False
        self.left -= 1
        self.taken += samples
        time.sleep(self.pause_ms / 1e3)
        self.pause_ms = min(2 * self.pause_ms, RETAKE_PAUSE_MAX_MS)
        launch()
        return True


@dataclass(frozen=True)
class CpuUse:
    """What the process got over the timing loop of one CPU point (its samples and what runs
    between them: harness/timer.time_cpu says why the loop, not the samples)."""
    cpu_ms: float                 # process CPU time, every thread, user + system
    wall_ms: float                # wall time of the same loop
    load_before: float | None     # 1-minute load average (None where the OS has none)
    load_after: float | None
    cores: int                    # cores this process may run on
    steal_ms: float | None = None   # CPU time the hypervisor took, summed over the machine's CPUs
    machine_cpus: int = 1
    check: str = FALLBACK         # SCHEDSTAT: every sample judged by its threads' waits
    retaken: int = 0              # samples discarded for waiting (or a tick) and taken again
    waited: int = 0               # kept samples that waited: the retakes ran out first
    kept: int = 0                 # samples kept
    wait_ms: float | None = None  # the kept samples' threads' summed run-queue wait

    @property
    def steal(self) -> float | None:
        """The share of the machine's CPU time over the samples that the hypervisor took."""
        if self.steal_ms is None or self.wall_ms <= 0:
            return None
        return self.steal_ms / (self.wall_ms * self.machine_cpus)

    @property
    def ratio(self) -> float | None:
        return self.cpu_ms / self.wall_ms if self.wall_ms > 0 else None

    @property
    def load(self) -> float | None:
        """The higher of the two readings: a neighbour that came or went during the point."""
        readings = [v for v in (self.load_before, self.load_after) if v is not None]
        return max(readings) if readings else None


def host_probe_ms(cores: int, size: int = PROBE_SIZE, repeats: int = PROBE_REPEATS) -> float:
    """Median time of a fixed float32 matmul on `cores` BLAS threads (module docstring; other
    sizes: harness/host_cores.py). The thread count is set here, whatever the environment says
    (OPENBLAS_NUM_THREADS=1 is a change a regression check must see, not one its probe may
    absorb)."""
    import numpy as np
    from threadpoolctl import threadpool_limits
    a = np.ones((size, size), dtype=np.float32)
    times = []
    with threadpool_limits(cores):
        for _ in range(repeats):
            start = time.perf_counter_ns()
            a @ a
            times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


# `convbench check` judges a run against a stored baseline, so a slow spell of the host while
# it measures (or re-measures what it flagged) reads as a regression that the probe rule above
# cannot always undo: in one CI A/A check a direct convolution ran 1.85x slower, in the run and
# in its confirmation, while the probe read ~1.25x slower (beyond SPELL_REACH). Spells pass
# (10-30 s, at most minutes), so before each of its runs `check` waits, up to SPELL_WAIT_S, until
# the probe has read within QUIET_MARGIN of the baseline's QUIET_READS times in a row, POLL_S
# apart (the baseline's probes scatter ~3% around their median on a quiet host).
QUIET_MARGIN = 0.075
QUIET_READS = 3
POLL_S = 1.0
SPELL_WAIT_S = 90.0


@dataclass(frozen=True)
class HostWait:
    """What waiting for the host to leave a slow spell came to (wait_for_quiet_host)."""
    reference_ms: float     # the baseline's typical probe
    last_ms: float          # the last probe read
    reads: int              # probes read (QUIET_READS where the host was quiet at once)
    waited_s: float
    quiet: bool             # False: the time ran out first

    @property
    def slower(self) -> float:
        return self.last_ms / self.reference_ms - 1.0


def wait_for_quiet_host(reference_ms: float, cores: int, timeout_s: float = SPELL_WAIT_S,
                        probe: Callable[[int], float] | None = None,
                        clock: Callable[[], float] = time.monotonic) -> HostWait:
    """Probe the host until it reads within QUIET_MARGIN of `reference_ms` QUIET_READS times in
    a row, or `timeout_s` has passed (the comment above says why)."""
    probe = probe or host_probe_ms
    probe(cores)          # the first call in a process also starts the BLAS threads: not a read
    start, reads, in_a_row = clock(), 0, 0
    while True:
        last = probe(cores)
        reads += 1
        in_a_row = in_a_row + 1 if last <= reference_ms * (1.0 + QUIET_MARGIN) else 0
        waited = clock() - start
        if in_a_row >= QUIET_READS or waited >= timeout_s:
            return HostWait(reference_ms, last, reads, waited, in_a_row >= QUIET_READS)
        time.sleep(POLL_S)


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):     # not every OS keeps one
        return None


def stolen_ms(stat: str = "/proc/stat") -> float | None:
    """CPU time stolen from this machine since boot, all CPUs (the 8th field of the "cpu" line,
    in clock ticks); None off Linux or where the kernel does not count it."""
    try:
        with open(stat, encoding="ascii") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def shared_cores(use: CpuUse, first: CpuUse | None = None) -> str | None:
    """Why `use` shows the point shared the cores (module docstring), or None. `first` is the
    measurement a re-measurement repeats."""
    why = _waits(use) if use.check == SCHEDSTAT else _fallback(use, first)
    if use.steal is not None and use.steal > STEAL_FLOOR:
        why.append(f"the hypervisor took {use.steal:.0%} of the CPUs")
    return f"shared the CPU: {describe(use)} ({'; '.join(why)})" if why else None


def _waits(use: CpuUse) -> list[str]:
    if not use.waited:
        return []
    return [f"{use.waited} of {use.kept} samples waited for a core or a tick after "
            f"{use.retaken} were taken again"]


def _fallback(use: CpuUse, first: CpuUse | None) -> list[str]:
    ratio, load = use.ratio, use.load
    why = []
    if ratio is not None and ratio < RATIO_FLOOR:
        why.append(f"CPU/wall under {RATIO_FLOOR}")
    own = max(ratio or 0.0, 1.0)      # this process's share of the load: at least its caller
    if load is not None and load - own > use.cores - own + LOAD_MARGIN:
        why.append(f"others' load {load - own:.1f} over the {max(use.cores - own, 0.0):.1f} "
                   "cores left free")
    if first is not None and first.ratio and ratio is not None \
            and ratio < REMEASURE_DROP * first.ratio:
        why.append(f"CPU/wall fell from {first.ratio:.2f}")
    return why


def wait_share(use: CpuUse, samples: Sequence[float]) -> float | None:
    """The kept samples' threads' summed wait over their summed wall time (the `cpu_wait`
    column); None where it was not measured."""
    total = sum(samples)
    return None if use.wait_ms is None or total <= 0 else use.wait_ms / total


def describe(use: CpuUse) -> str:
    ratio = "n/a" if use.ratio is None else f"{use.ratio:.2f}"
    load = "n/a" if use.load is None else f"{use.load:.1f}"
    steal = "" if use.steal is None else f", steal {use.steal:.0%}"
    return f"load {load} on {use.cores} cores, CPU/wall {ratio}{steal}"
