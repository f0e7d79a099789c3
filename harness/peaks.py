"""This GPU's ceilings: dense matrix rate per precision (cuBLAS GemmEx through CuPy) and device
memory bandwidth (a device-to-device copy), measured once and cached per environment, and the
roofline position of every GPU row computed from them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from harness import cache_dir

# cudaDataType_t and cublasComputeType_t values (CUDA 12/13 headers).
_CUDA_R = {"fp32": 0, "tf32": 0, "fp64": 1, "fp16": 2, "bf16": 14}
_COMPUTE = {"fp32": 68, "tf32": 77, "fp16": 68, "bf16": 68, "fp64": 70}  # 32F, 32F_FAST_TF32, 64F
_ELEMENT = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "uint16",
            "fp64": "float64"}
MATRIX_SIZE = {"fp64": 4096}   # fp64 is slow: a smaller product still fills the GPU
DEFAULT_SIZE = 8192


# The fingerprint fields a peaks cache entry is keyed by: measured peaks belong to one GPU,
# driver, CUDA runtime and CuPy.
CACHE_KEY = ("gpu_name", "gpu_driver", "cuda_runtime", "cupy")


def cache_path(env: dict[str, Any]) -> Path:
    key = "|".join(str(env.get(k)) for k in CACHE_KEY)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir.folder() / f"peaks-{digest}.json"


def load_cached(env: dict[str, Any]) -> dict[str, float] | None:
    path = cache_path(env)
    return json.loads(path.read_text()) if path.exists() else None


def measure(env: dict[str, Any], repeats: int = 10) -> dict[str, float]:
    """TFLOP/s per precision (median of `repeats` products) and copy bandwidth in GB/s; cached."""
    peaks: dict[str, float] = {p: _gemm_tflops(p, repeats) for p in _CUDA_R}
    peaks["bandwidth_gbps"] = _copy_gbps(repeats)
    path = cache_path(env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(peaks, indent=1))
    return peaks


def _gemm_tflops(precision: str, repeats: int) -> float:
    import cupy
    import numpy as np
    from cupy.cuda import cublas
    n = MATRIX_SIZE.get(precision, DEFAULT_SIZE)
    rng = cupy.random.default_rng(0)
    a, b = (_random_matrix(rng, n, precision) for _ in range(2))
    c = cupy.empty((n, n), dtype=_ELEMENT[precision])
    scalar = np.float64 if precision == "fp64" else np.float32
    alpha, beta = np.array(1, dtype=scalar), np.array(0, dtype=scalar)
    handle = cupy.cuda.device.get_cublas_handle()
    dtype = _CUDA_R[precision]

    def product() -> None:
        cublas.gemmEx(handle, 0, 0, n, n, n, alpha.ctypes.data, a.data.ptr, dtype, n,
                      b.data.ptr, dtype, n, beta.ctypes.data, c.data.ptr, dtype, n,
                      _COMPUTE[precision], -1)
    seconds = _median_seconds(product, repeats)
    return 2 * n**3 / seconds / 1e12


def _random_matrix(rng, n: int, precision: str):
    """Random normal data (zeros would run faster than real data)."""
    import cupy
    values = rng.standard_normal((n, n), dtype=cupy.float32)
    if precision == "bf16":
        return (values.view(cupy.uint32) >> 16).astype(cupy.uint16)
    return values.astype(_ELEMENT[precision])


def _copy_gbps(repeats: int) -> float:
    import cupy
    source = cupy.ones(1 << 28, dtype=cupy.float32)   # 1 GiB
    target = cupy.empty_like(source)
    seconds = _median_seconds(lambda: target.__setitem__(slice(None), source), repeats)
    return 2 * source.nbytes / seconds / 1e9       # bytes read plus bytes written


def _median_seconds(work, repeats: int) -> float:
    import cupy
    work()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return sorted(times)[len(times) // 2]


def annotate_by_machine(df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Roofline columns for each GPU's rows from the peaks measured on that GPU (as cached on
    this machine): a cluster run's rows from other GPU models never take this GPU's ceilings.
    Also the GPU names whose peaks are not cached here (their rows keep no roofline)."""
    if "env_gpu_name" not in df.columns or df["env_gpu_name"].isna().all():
        return df, []
    keys = [f"env_{k}" for k in CACHE_KEY if f"env_{k}" in df.columns]
    parts, missing = [], []
    for values, part in df.groupby(keys, dropna=False, sort=False):
        env = {c.removeprefix("env_"): (None if pd.isna(v) else v)
               for c, v in zip(keys, values if isinstance(values, tuple) else (values,))}
        measured = load_cached(env) if env.get("gpu_name") else None
        if env.get("gpu_name") and measured is None:
            missing.append(str(env["gpu_name"]))
        parts.append(annotate(part, measured) if measured else part)
    return pd.concat(parts).loc[df.index], sorted(set(missing))


def annotate(df: pd.DataFrame, peaks: dict[str, float]) -> pd.DataFrame:
    """Achieved TFLOP/s and GB/s, and the percentage of the roofline bound
    min(peak rate, arithmetic intensity x bandwidth), for rows with a GPU time."""
    out = df.copy()
    gpu = out["env_gpu_name"].notna() & out["median_ms"].notna() & (out["backend"] != "cpu")
    seconds = out.loc[gpu, "median_ms"] / 1e3
    out.loc[gpu, "achieved_tflops"] = out.loc[gpu, "flops"] / seconds / 1e12
    out.loc[gpu, "achieved_gbps"] = out.loc[gpu, "bytes_moved"] / seconds / 1e9
    peak = out.loc[gpu, "precision"].map(peaks).astype(float)
    memory_bound = out.loc[gpu, "arithmetic_intensity"] * peaks["bandwidth_gbps"] / 1e3
    # a precision whose peak was not measured (fp8, int8) gets no percentage, rather than one
    # against the bandwidth roof alone
    bound = pd.concat([peak, memory_bound], axis=1).min(axis=1, skipna=False)
    out.loc[gpu, "roofline_pct"] = 100 * out.loc[gpu, "achieved_tflops"] / bound
    return out


def describe(peaks: dict[str, float]) -> str:
    rates = ", ".join(f"{p} {peaks[p]:.1f}" for p in _CUDA_R if p in peaks)
    return f"matrix TFLOP/s: {rates}; copy bandwidth {peaks['bandwidth_gbps']:.0f} GB/s"

