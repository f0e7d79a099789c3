"""Measuring this CPU's ceilings (issue 42; what they are and how a run stores them:
harness/cpu_peaks.py): the FMA peak from numba kernels with their accumulators in registers
(fma_peak.py), on one thread and on every core at once, and NumPy's BLAS on a GEMM_SIZE-square
SGEMM. About half a second, once per machine; the best of REPEATS runs each, as a peak is what
the cores do when left alone."""
from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from harness import backends, cpu_peaks
from harness.backends.cpu import compiled
from harness.threads import available_cores, limited

STEPS = 1_000_000           # ~2-5 ms a run at fp32 on one core of the 2-core VM
REPEATS = 5
GEMM_SIZE = 1024


def measure(env: dict[str, Any]) -> dict[str, Any]:
    """GF/s per precision at one thread ("1") and every core ("all"), SGEMM's likewise, the core
    count and how the peak was measured (or why it was not); cached (cpu_peaks.save)."""
    cores = available_cores()
    peaks: dict[str, Any] = {"cores": cores, "gemm_size": GEMM_SIZE,
                             "sgemm": {"1": _gemm(1), "all": _gemm(cores)}}
    reason = compiled.unavailable_reason()
    if reason is None:
        from harness.backends.cpu import fma_peak
        for precision, dtype in cpu_peaks.PRECISIONS.items():
            peaks[precision] = {"1": _fma(fma_peak, dtype, 1), "all": _fma(fma_peak, dtype, cores)}
        peaks["how"] = f"{compiled.label().split(',')[0]}: FMA chains in registers"
    else:
        peaks.update({p: None for p in cpu_peaks.PRECISIONS})
        peaks["how"] = f"FMA peak not measured: {reason}"
    cpu_peaks.save(env, peaks)
    return peaks


def for_run(env: dict[str, Any], points: Iterable, say) -> dict[str, Any] | None:
    """The peaks a run with CPU points stores (cached, else measured now, saying so); None for a
    run without CPU points."""
    if all(backends.get(p.backend).device == "cuda" for p in points):
        return None
    peaks = cpu_peaks.load_cached(env)
    if peaks is None:
        reason = compiled.unavailable_reason()
        what = ("FMA peak and SGEMM rate" if reason is None else
                f"SGEMM rate (not its FMA peak: {reason})")
        say(f"measuring this CPU's {what} (once per machine, cached)")
        peaks = measure(env)
    return peaks


def row_columns(row: dict[str, Any], peaks: dict[str, Any] | None) -> dict[str, Any]:
    """A CPU row's `peak_gflops` and `peak_pct` (cpu_peaks.peak_gflops); none for a GPU row."""
    if peaks is None or backends.get(row["backend"]).device == "cuda":
        return {}
    peak = cpu_peaks.peak_gflops(peaks, row["precision"], row["threads"])
    gflops = row.get("gflops")
    return {"peak_gflops": peak,
            "peak_pct": None if peak is None or gflops is None else 100 * gflops / peak}


def _fma(kernel: Any, dtype: str, threads: int) -> float:
    """GF/s of `threads` copies of the FMA loop at once, each on its own Python thread (the
    kernel releases the GIL): the best of REPEATS."""
    import numpy as np
    like = np.ones(1, dtype)
    scale, add = like.dtype.type(0.999), like.dtype.type(1e-3)
    kernel.fma_loop(like, 10, scale, add)          # compile or load the cache
    with ThreadPoolExecutor(max_workers=threads) as pool:
        best = float("inf")
        for _ in range(REPEATS):
            start = time.perf_counter()
            list(pool.map(lambda _: kernel.fma_loop(like, STEPS, scale, add), range(threads)))
            best = min(best, time.perf_counter() - start)
    return round(threads * 2 * kernel.CHAINS * STEPS / best / 1e9, 1)


def _gemm(threads: int) -> float:
    """GF/s of NumPy's BLAS on a GEMM_SIZE-square fp32 product at `threads` threads."""
    import numpy as np
    a = np.random.default_rng(0).standard_normal((GEMM_SIZE, GEMM_SIZE), dtype=np.float32)
    out = np.empty_like(a)
    with limited(threads):
        np.matmul(a, a, out=out)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            np.matmul(a, a, out=out)
            best = min(best, time.perf_counter() - start)
    return round(2 * GEMM_SIZE**3 / best / 1e9, 1)
