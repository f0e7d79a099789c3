"""Did a CPU point share the cores with other work while it was timed? (issue 16)

A CPU point timed beside other busy processes reads slow (one im2col point: 270 ms instead of
11 ms), and its samples can be tight all the same, so the row's noise does not show it. Two
numbers read around the timed samples do:

- CPU/wall: the process's CPU time (every thread: NumPy's and BLAS's count) over the wall time of
  the timing loop (the samples and the bookkeeping between them; harness/timer.time_cpu says why
  not the samples alone). The timed code never waits on anything but the CPU (no I/O, no sleeps; while BLAS
  workers compute, the calling thread computes too), so alone at least one of its threads is
  always running and the ratio is >= 1 (1.00-1.02 measured on the 2-core VM). Below RATIO_FLOOR
  the point spent more than a fifth of its wall time runnable but not running: the cores were
  busy with someone else (0.50-0.51 with two spinning processes on the 2 cores). A point whose
  many threads lose part of their share can stay above 1, so this signal alone misses some.
- The 1-minute load average (runnable threads, system-wide), read before and after: it counts
  this process's own threads too, about CPU/wall of them (at least one), so the others are
  load - own. When they outnumber the cores the point left free (cores - own) by more than
  LOAD_MARGIN, some thread waited, likely ours. This catches long-lived neighbours whatever the
  point's threading; it lags (a minute to rise, longer to fall), so it misses a neighbour that
  started seconds ago (CPU/wall catches that) and may flag a point just after one stopped
  (then the row is AMBIGUOUS in `compare`, the safe side: never a false SLOWER).

- Steal time (Linux /proc/stat, a virtual machine's CPUs): time the hypervisor ran something
  else on the CPUs this machine thinks it has. It is not in the load, and whether a stolen slice
  lowers CPU/wall depends on the kernel's steal accounting (not established on this VM), yet it
  slows the point the same way. On the 2-core VM: 0.06 s of steal in a 40 s quiet run, 598 s
  over 10 hours since boot; one cpu:im2col point read 565 ms in a sweep and 330-355 ms in five
  runs around it, CPU/wall 1.99, load 2.0 (whether steal was the cause is not known: the column
  is new). Over STEAL_FLOOR of the machine's CPU time during the samples, the point shared the
  cores.

A point judged contended is re-measured once; it stays contended when the re-measurement is too,
or when its CPU/wall fell below REMEASURE_DROP of the first (the neighbour got busier).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

RATIO_FLOOR = 0.8       # CPU/wall under this: >20% of the wall time runnable but not running
LOAD_MARGIN = 1.0       # a whole runnable thread beyond the cores, on average, before it counts
REMEASURE_DROP = 0.75   # a re-measurement whose CPU/wall fell by a quarter: sharing got worse
STEAL_FLOOR = 0.1       # the hypervisor took a tenth of the machine's CPU time


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
    ratio, load = use.ratio, use.load
    why = []
    if ratio is not None and ratio < RATIO_FLOOR:
        why.append(f"CPU/wall under {RATIO_FLOOR}")
    own = max(ratio or 0.0, 1.0)      # this process's share of the load: at least its caller
    if load is not None and load - own > use.cores - own + LOAD_MARGIN:
        why.append(f"others' load {load - own:.1f} over the {max(use.cores - own, 0.0):.1f} "
                   "cores left free")
    if use.steal is not None and use.steal > STEAL_FLOOR:
        why.append(f"the hypervisor took {use.steal:.0%} of the CPUs")
    if first is not None and first.ratio and ratio is not None \
            and ratio < REMEASURE_DROP * first.ratio:
        why.append(f"CPU/wall fell from {first.ratio:.2f}")
    return f"shared the CPU: {describe(use)} ({'; '.join(why)})" if why else None


def describe(use: CpuUse) -> str:
    ratio = "n/a" if use.ratio is None else f"{use.ratio:.2f}"
    load = "n/a" if use.load is None else f"{use.load:.1f}"
    steal = "" if use.steal is None else f", steal {use.steal:.0%}"
    return f"load {load} on {use.cores} cores, CPU/wall {ratio}{steal}"
