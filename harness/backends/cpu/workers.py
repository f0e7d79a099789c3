"""Running a launch's independent chunks on several Python threads at once.

NumPy's copies and elementwise passes run on one core; only BLAS spreads over all of them. A
pipeline of copies and mid-sized GEMMs per chunk (Winograd's tiles) on a 2-core VM therefore
left a core idle for over half of its launch. Here the chunks run concurrently on as many
Python threads as BLAS may use (NumPy releases the GIL in copies and in matmul), with BLAS set
to one thread meanwhile, so the threads do not oversubscribe the cores, and put back after.

The count is read from BLAS at every launch: convbench's `--threads` axis limits BLAS through
threadpoolctl around a point, and a launch then uses that many threads, no more. Where NumPy's
BLAS is not the bundled OpenBLAS (no thread control here), chunks run one after another on the
calling thread with BLAS as it is.
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache

from harness.backends.cpu.blas import symbol

_GET, _SET = "scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"


@cache
def _thread_calls() -> tuple[Callable[[], int], Callable[[int], None]] | None:
    get, put = symbol(_GET), symbol(_SET)
    if get is None or put is None:
        return None
    get.restype, get.argtypes = ctypes.c_int, []
    put.restype, put.argtypes = None, [ctypes.c_int]
    return get, put


def blas_threads() -> int:
    """Threads BLAS may use now (1 where it cannot be read: chunks then run in turn)."""
    calls = _thread_calls()
    return max(1, calls[0]()) if calls else 1


@cache
def _pool(size: int, process: int) -> ThreadPoolExecutor:
    """One pool per size and process: a forked child inherits the parent's pool object but not
    its threads, and would wait forever on work given to it."""
    return ThreadPoolExecutor(max_workers=size, thread_name_prefix="convbench-cpu")


def run_chunks(chunks: Sequence[object], work: Callable[[int, object], None],
               most: int) -> None:
    """work(slot, chunk) for every chunk; slot (0 .. threads-1) names the scratch the call may
    use, and no two calls run with the same slot at once. Up to `most` threads (the scratch
    slots allocated), never more than BLAS's count; chunk i goes to slot i mod threads (chunks
    are near-equal, so a static share balances)."""
    threads = min(most, blas_threads(), len(chunks))
    if threads <= 1:
        for chunk in chunks:
            work(0, chunk)
        return
    get, put = _thread_calls()
    before = get()
    put(1)
    try:
        def share(slot: int) -> None:
            for chunk in chunks[slot::threads]:
                work(slot, chunk)

        pool = _pool(threads, os.getpid())
        futures = [pool.submit(share, slot) for slot in range(1, threads)]
        share(0)    # the calling thread takes a share rather than waiting idle
        for future in futures:
            future.result()   # re-raises a worker's exception here
    finally:
        put(before)


def run_tasks(tasks: Sequence[Callable[[], None]], most: int) -> None:
    """Independent zero-argument tasks, on up to `most` threads as run_chunks shares chunks."""
    run_chunks(tasks, lambda _, task: task(), most)
