"""How many threads a CPU point may use: the `--threads` axis (issue 16).

Users of small devices ask how an algorithm behaves on one core; the default stays what the
libraries do on their own, every core this process may run on (ALL, stored as 0). A count is set
for NumPy's BLAS and any OpenMP pool through threadpoolctl, and for PyTorch's intra-op pool with
torch.set_num_threads, around the verified runs and the timing of one point, then put back.
GPU points are planned at ALL only: the count would change nothing they time.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

ALL = 0      # the libraries' own choice: every core this process may run on


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))   # a container or taskset may allow fewer
    except AttributeError:
        return os.cpu_count() or 1


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
    """The body runs with at most `count` threads in BLAS, OpenMP and PyTorch (ALL: unchanged).
    PyTorch is set only where it is already imported: a backend that uses it imports it when it
    prepares a point, before the verified runs this wraps."""
    if count == ALL:
        yield
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
