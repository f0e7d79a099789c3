"""The host allocator while CPU points are timed: memory a launch frees stays with the process.

A launch that allocates its result or scratch (PyTorch's CPU convolutions do, every call) gets
fresh pages whenever glibc gave the previous launch's memory back to the kernel (an mmap'd block,
or a heap top trimmed away), and then pays page faults and the kernel's zeroing on top of the
convolution. Whether glibc gives memory back depends on what the process freed earlier (its
thresholds move with it), so one oneDNN point timed differently in different processes: on the
2-core Xeon VM (2026-11-25) DeepBench row 55 bwd_filter took 6.9-7.2 ms inside two sweeps (after
NumPy's frees) and 17-18 ms in runs of torch_cpu alone, its fwd 17.8 ms against 28.7-31.1 ms.
With this module's settings a run of torch_cpu alone took 6.7 and 5.9 ms there (and row 2's fwd
5.2 ms against 7.2-8.2).

So before the first CPU point is measured the process asks glibc to serve blocks up to MMAP_MAX_BYTES
from its heap and to keep TOP_PAD_BYTES beyond the heap's top when it shrinks: back-to-back
launches then reuse warm pages, which is what the measurement design calls warm, in every
process alike. The cost is memory held: the process keeps its peak heap, which is why a run of
GPU points only is left as it was. Elsewhere (no glibc) nothing changes and the environment
says so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (glibc's malloc.h)
_M_TOP_PAD, _M_MMAP_THRESHOLD = -2, -3
TOP_PAD_BYTES = 1 << 30
MMAP_MAX_BYTES = 1 << 30

_applied: list[str] = []


def keep_freed_memory() -> str:
    """Apply the settings once in this process (the runner does, before its first CPU point);
    returns what `policy` describes, or why nothing changed."""
    if not _applied:
        _applied.append(_apply())
    return _applied[0]


def policy() -> str:
    """What CPU points here are measured under, for the environment record: the applied result
    once applied, else what applying would set (GPU points are not affected either way)."""
    if _applied:
        return _applied[0]
    return _why_unchanged() or _DESCRIPTION


_DESCRIPTION = (f"glibc heap up to {MMAP_MAX_BYTES >> 20} MiB a block, top pad "
                f"{TOP_PAD_BYTES >> 20} MiB")


def _mallopt():
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return function


def _why_unchanged() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"unchanged ({sys.platform})"
    return None if _mallopt() is not None else "unchanged (no glibc mallopt)"


def _apply() -> str:
    why = _why_unchanged()
    if why is not None:
        return why
    mallopt = _mallopt()
    if not (mallopt(_M_MMAP_THRESHOLD, MMAP_MAX_BYTES) and mallopt(_M_TOP_PAD, TOP_PAD_BYTES)):
        return "unchanged (mallopt refused)"
    return _DESCRIPTION
