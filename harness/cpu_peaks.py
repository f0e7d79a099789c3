"""This CPU's ceilings (issue 42), as a run stores them: the fused multiply-add peak per precision
on one thread and on every core, and BLAS's SGEMM rate on a large product, measured once per CPU
and library versions (harness/backends/cpu/peaks.py measures them) and cached here. A run with CPU
points stores them in its environment columns (`env_cpu_fma_peak_gflops`,
`env_cpu_fma_peak_1t_gflops`), and every CPU row's `peak_gflops` / `peak_pct` say what its
precision and thread count may reach and how much of it the row reached, so a reader sees which
gap is the algorithm and which the machine. The numbers belong to the machine a run ran on: VMs
of one name differ (on two days the 2-core AMD EPYC VM ran oneDNN's train_02 at 348 and at 166
GF/s)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness import cache_dir
from harness.env import installed_version
from harness.threads import ALL

CACHE_KEY = ("cpu_model", "cpu_cores", "numpy", "blas")
PRECISIONS = {"fp32": "float32", "fp64": "float64"}


def cache_path(env: dict[str, Any], stem: str = "cpu-peaks") -> Path:
    """The cache file `stem` keeps for this CPU and its libraries (CACHE_KEY, numba's version)."""
    key = "|".join(str(env.get(k)) for k in CACHE_KEY) + f"|numba {installed_version('numba')}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir.folder() / f"{stem}-{digest}.json"


def load_cached(env: dict[str, Any]) -> dict[str, Any] | None:
    """The cached peaks, or None (none cached, or a file that is not peaks: measured again)."""
    try:
        peaks = json.loads(cache_path(env).read_text())
    except (OSError, ValueError):
        return None
    return peaks if isinstance(peaks, dict) and "fp32" in peaks else None


def save(env: dict[str, Any], peaks: dict[str, Any]) -> None:
    path = cache_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(peaks, indent=1))


def peak_gflops(peaks: dict[str, Any] | None, precision: str, threads: int) -> float | None:
    """The FMA peak a CPU point of `precision` at `threads` (ALL: every core) may reach; a count
    between one and all is taken as that many single cores. None where not measured."""
    rates = (peaks or {}).get(precision)
    if not rates:
        return None
    if threads == ALL or threads >= peaks["cores"]:
        return rates["all"]
    return rates["1"] * threads


def env_fields(peaks: dict[str, Any] | None) -> dict[str, Any]:
    """The run's environment columns for the fp32 peak (all cores, one thread)."""
    return {"cpu_fma_peak_gflops": peak_gflops(peaks, "fp32", ALL),
            "cpu_fma_peak_1t_gflops": peak_gflops(peaks, "fp32", 1)}


def describe(peaks: dict[str, Any]) -> str:
    parts = [f"{p} {peaks[p]['1']:.0f} on one thread, {peaks[p]['all']:.0f} on "
             f"{peaks['cores']}" for p in PRECISIONS if peaks.get(p)]
    fma = f"FMA peak GFLOP/s: {'; '.join(parts)}" if parts else peaks["how"]
    gemm = peaks["sgemm"]
    return (f"{fma}; BLAS SGEMM {peaks['gemm_size']}: {gemm['1']:.0f} on one thread, "
            f"{gemm['all']:.0f} on {peaks['cores']}")
