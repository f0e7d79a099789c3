"""How many threads a CPU point may use: the `--threads` axis (issue 16).

Users of small devices ask how an algorithm behaves on one core; the default is every core this
process may run on (ALL, stored as 0): its affinity, capped by a cgroup CPU quota, which the
libraries' own default (the machine's cores) ignores. Each CPU row records the count it ran with
(`cpu_threads`). A count is set
for NumPy's BLAS and any OpenMP pool through threadpoolctl, and for PyTorch's intra-op pool with
torch.set_num_threads, around the verified runs and the timing of one point, then put back.
GPU points are planned at ALL only: the count would change nothing they time.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ALL = 0      # the libraries' own choice: every core this process may run on


def available_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may use: its affinity (a container or taskset may allow fewer than
    the machine has), capped by a cgroup v2 CPU quota (`docker --cpus 2` on a 16-core host:
    affinity says 16, the quota 2, and 16 BLAS threads on 2 cores' time would wait for them)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    quota = _cgroup_quota(cpu_max)
    return max(1, min(cores, quota)) if quota is not None else cores


def _cgroup_quota(cpu_max: str) -> int | None:
    """Whole cores a cgroup v2 `cpu.max` ("QUOTA PERIOD" or "max PERIOD") allows, rounded up;
    None without a quota or where the file cannot be read."""
    try:
        with open(cpu_max, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def cores_for(count: int) -> int:
    """Cores a point run at thread count `count` may use (ALL: every core available here): what
    a CPU algorithm sizes its per-thread scratch by when it prepares the point."""
    cores = available_cores()
    return cores if count == ALL else max(1, min(count, cores))


def label(count: int) -> str:
    return "all" if count == ALL else str(count)


def missing_library() -> str | None:
    """Why a thread count cannot be set here, or None."""
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return "setting a thread count needs threadpoolctl (pip install threadpoolctl)"
    return None


@contextmanager
def limited(count: int) -> Iterator[None]:
    """The body runs with at most `count` threads in BLAS, OpenMP and PyTorch (ALL: the cores
    this process may use, which the libraries' own default exceeds under a taskset or a cgroup
    quota: they count the machine's cores). PyTorch is set only where it is already imported: a
    backend that uses it imports it when it prepares a point, before the verified runs this
    wraps."""
    if count == ALL:
        count = available_cores()
        if count >= (os.cpu_count() or 1):
            yield         # the libraries' default already is every core
            return
    from threadpoolctl import threadpool_limits
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    with threadpool_limits(limits=count):
        if torch is not None:
            torch.set_num_threads(count)
        try:
            yield
        finally:
            if torch is not None:
                torch.set_num_threads(before)
