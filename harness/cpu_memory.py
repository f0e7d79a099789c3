"""The host allocator while CPU points are timed: memory a launch frees stays with the process.

A launch that allocates its result or scratch (PyTorch's CPU convolutions do, every call) gets
fresh pages whenever glibc gave the previous launch's memory back to the kernel (an mmap'd block,
or a heap top trimmed away), and then pays page faults and the kernel's zeroing on top of the
convolution. Whether glibc gives memory back depends on what the process freed earlier (its
thresholds move with it), so one oneDNN point timed differently in different processes (one
took about 2.5x as long in a process of its own); with this module's settings it no longer does
(evidence/notes/constants.md#cpu_memory-mallopt-settings).

So before it measures anything a process asks glibc to serve blocks up to MMAP_MAX_BYTES from
its heap, to keep TOP_PAD_BYTES beyond the heap's top when it shrinks, and to use one arena for
every thread (a thread's own arena maps blocks over 64 MiB afresh whatever the threshold: Dask
runs points in worker threads, the CPU algorithms run chunks on threads): back-to-back launches
then reuse warm pages, which is what the measurement design calls warm, in every process alike.
After each group of points (`trim`) the process gives its free heap back, so that each point
starts from the same state and the free memory the next point is checked against is what the
machine really has. Elsewhere (no glibc) nothing changes and the environment says so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

# mallopt parameters (glibc's malloc.h)
_M_TOP_PAD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -2, -3, -8
TOP_PAD_BYTES = 1 << 30
MMAP_MAX_BYTES = 1 << 30
DEFAULT = "glibc default"
# What a worker process is started with (harness/cluster.py): its threads exist before it
# measures, and a thread that already has an arena of its own keeps it.
WORKER_ENV = {"MALLOC_ARENA_MAX": "1"}
_DESCRIPTION = (f"glibc: one arena, heap up to {MMAP_MAX_BYTES >> 20} MiB a block, top pad "
                f"{TOP_PAD_BYTES >> 20} MiB, trimmed after each group of points")

_applied: list[str] = []


def keep_freed_memory() -> str:
    """Apply the settings once in this process, before it measures (and before it takes the
    environment that its rows record); what `current` reports from then on."""
    if not _applied:
        _applied.append(_apply())
    return _applied[0]


def current() -> str:
    """What this process's allocator does with freed memory, for the environment record: what
    keep_freed_memory applied, or the allocator's default where it has not run."""
    return _applied[0] if _applied else DEFAULT


def trim() -> None:
    """Give the heap's free memory back to the kernel (after a group of points: the launches of
    one point stay warm, and every point starts alike)."""
    if _applied and _applied[0] == _DESCRIPTION:
        _libc().malloc_trim(0)


@functools.cache   # find_library runs `ldconfig -p`: 2.6 ms a call, after every group
def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _apply() -> str:
    if not sys.platform.startswith("linux"):
        return f"unchanged ({sys.platform})"
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt") or not hasattr(libc, "malloc_trim"):
        return "unchanged (no glibc mallopt)"
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    if not (mallopt(_M_ARENA_MAX, 1) and mallopt(_M_MMAP_THRESHOLD, MMAP_MAX_BYTES)
            and mallopt(_M_TOP_PAD, TOP_PAD_BYTES)):
        return "not all set (mallopt refused one)"   # those before it may have taken
    return _DESCRIPTION
