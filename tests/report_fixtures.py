"""Synthetic results frames that look like real runs, for the report tests.

Rows go through the real contract (Point -> Measurement -> store.to_row -> store.frame), so a
report that renders these renders what the runner writes. The cost model is crude on purpose; what
matters is the shape of the data: every status, workspace limits that bite, heuristic and find
picks that are not always the best, wrong results that are fast, throttled rows, env columns.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np
import pandas as pd

from harness import store
from harness.measurement import Measurement
from harness.precision import element_bytes
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions

MIB = 1 << 20
# ResNet-50 v1's 20 unique layers and how often each occurs (shared/reference/shapes.md).
RESNET50 = [  # name, in_c, hw, out_c, kernel, stride, multiplicity
    ("conv1", 3, 224, 64, 7, 2, 1), ("res2a_branch1", 64, 56, 256, 1, 1, 4),
    ("res2a_branch2a", 64, 56, 64, 1, 1, 1), ("res2a_branch2b", 64, 56, 64, 3, 1, 3),
    ("res2b_branch2a", 256, 56, 64, 1, 1, 2), ("res3a_branch1", 256, 56, 512, 1, 2, 1),
    ("res3a_branch2a", 256, 56, 128, 1, 2, 1), ("res3a_branch2b", 128, 28, 128, 3, 1, 4),
    ("res3a_branch2c", 128, 28, 512, 1, 1, 4), ("res3b_branch2a", 512, 28, 128, 1, 1, 3),
    ("res4a_branch1", 512, 28, 1024, 1, 2, 1), ("res4a_branch2a", 512, 28, 256, 1, 2, 1),
    ("res4a_branch2b", 256, 14, 256, 3, 1, 6), ("res4a_branch2c", 256, 14, 1024, 1, 1, 6),
    ("res4b_branch2a", 1024, 14, 256, 1, 1, 5), ("res5a_branch1", 1024, 14, 2048, 1, 2, 1),
    ("res5a_branch2a", 1024, 14, 512, 1, 2, 1), ("res5a_branch2b", 512, 7, 512, 3, 1, 3),
    ("res5a_branch2c", 512, 7, 2048, 1, 1, 3), ("res5b_branch2a", 2048, 7, 512, 1, 1, 2),
]
# Peak rates measured on the H200 (shared/reference/gpu-findings.md), used for roofline_pct.
H200_PEAKS = {"fp32": 51.0, "tf32": 400.0, "fp16": 699.0, "bf16": 700.0, "fp64": 50.5,
              "bandwidth_gbps": 4220.0}
TOLERANCE = {"fp32": 1e-5, "tf32": 1e-3, "fp16": 1e-2, "bf16": 3e-2, "fp64": 1e-12}
BASE_ERROR = {"fp32": 4e-7, "tf32": 3e-4, "fp16": 2e-4, "bf16": 1.7e-3, "fp64": 1e-16}
GPU_ENV = {"hostname": "gpu-node-7", "os": "Linux 6.8", "python": "3.12.3",
           "cpu_model": "Intel Xeon Platinum 8480+", "cpu_cores": 16, "numpy": "2.5.2",
           "pandas": "3.0.6", "torch": "2.11.0+cu130", "cupy": "14.2.0", "cudnn": "91900",
           "cudnn_frontend": "1.16.0", "git_commit": "abc1234", "gpu_name": "NVIDIA H200",
           "gpu_sm_count": 132, "gpu_driver": "580.159", "cuda_runtime": "13.0",
           "gpu_max_sm_clock_mhz": 1980, "gpu_ecc": 1, "gpu_mig": 0}
CPU_ENV = {"hostname": "ci-runner", "os": "Linux 6.1", "python": "3.11.2",
           "cpu_model": "AMD EPYC 7B13", "cpu_cores": 2, "blas": "openblas 0.3.27",
           "blas_threads": 2, "numpy": "2.1.0", "pandas": "2.2.3", "git_commit": "abc1234"}


@dataclass(frozen=True)
class Algo:
    backend: str
    name: str
    family: str
    speed: float          # fraction of the precision's peak it reaches on a friendly layer


GPU_ALGOS = (
    Algo("cudnn", "IMPLICIT_GEMM", "gemm", 0.35),
    Algo("cudnn", "IMPLICIT_PRECOMP_GEMM", "gemm", 0.6),
    Algo("cudnn", "GEMM", "gemm", 0.3), Algo("cudnn", "FFT", "fft", 0.5),
    Algo("cudnn", "FFT_TILING", "fft", 0.45), Algo("cudnn", "WINOGRAD_NONFUSED", "winograd", 0.9),
    Algo("torch_gpu", "cudnn_benchmark", "auto", 0.62),
)
CPU_ALGOS = (Algo("cpu", "direct", "direct", 0.02), Algo("cpu", "im2col", "gemm", 0.12),
             Algo("cpu", "fft", "fft", 0.08), Algo("cpu", "winograd", "winograd", 0.15))


def problems(batch: int, count: int | None = None) -> list[ConvProblem]:
    chosen = RESNET50 if count is None else RESNET50[:count]
    return [ConvProblem(batch, c, hw, hw, k, r, r, s, s, r // 2, r // 2, r // 2, r // 2,
                        name=name, multiplicity=mult) for name, c, hw, k, r, s, mult in chosen]


def _unsupported(algo: Algo, p: ConvProblem, direction: str, precision: str) -> str | None:
    """Support rules in the spirit of what cuDNN reports on Hopper (gpu-findings.md)."""
    if algo.family == "winograd" and (p.kernel_h != 3 or p.stride_h != 1 or precision == "fp64"):
        return "CUDNN_STATUS_NOT_SUPPORTED: winograd needs 3x3 stride 1"
    if algo.family == "fft" and (precision in ("bf16", "fp64") or p.stride_h > 1):
        return "CUDNN_STATUS_NOT_SUPPORTED: fft needs stride 1, fp32/fp16"
    if algo.name == "FFT_TILING" and direction == "bwd_filter":
        return "CUDNN_STATUS_NOT_SUPPORTED"
    return None


def _workspace(algo: Algo, p: ConvProblem, precision: str) -> int:
    eb = element_bytes(precision)
    im2col = p.batch * p.in_channels * p.kernel_h * p.kernel_w * p.out_h * p.out_w * eb
    return {"IMPLICIT_GEMM": 0, "IMPLICIT_PRECOMP_GEMM": 0 if precision == "fp32" else im2col // 64,
            "GEMM": im2col, "FFT": 8 * im2col + 64 * MIB, "FFT_TILING": im2col + 16 * MIB,
            "WINOGRAD_NONFUSED": 3 * im2col // 2}.get(algo.name, 0)


def _stable_rng(*key: object) -> np.random.Generator:
    """The same draw for the same algorithm at the same point under every workspace limit, as a
    real GPU would give (Python's str hash is salted per process, crc32 is not)."""
    return np.random.default_rng(zlib.crc32("|".join(map(str, key)).encode()))


def _speed(algo: Algo, p: ConvProblem, precision: str, rng: np.random.Generator) -> float:
    speed = algo.speed * rng.uniform(0.7, 1.3)
    if algo.family in ("fft", "winograd") and precision != "fp32":
        speed *= 0.25        # tensor cores make the GEMM family win outside true fp32
    if p.kernel_h == 1 and algo.family == "gemm":
        speed *= 1.3
    return speed


_PLANTED_REASONS = {"failed": "CUDNN_STATUS_EXECUTION_FAILED", "crashed": "worker died: SIGSEGV",
                    "not_tried": "not tried: eng57_k2=1 of the same engine hung on this point"}


def _measure(algo: Algo, point: Point, rng: np.random.Generator, peaks: dict[str, float],
             plant: str | None) -> Measurement:
    p, prec = point.problem, point.precision
    reason = _unsupported(algo, p, point.direction, prec)
    ws = _workspace(algo, p, prec)
    if reason:
        return Measurement(point, "unsupported", reason=reason, family=algo.family)
    if point.workspace_limit is not None and ws > point.workspace_limit:
        return Measurement(point, "workspace_exceeded", family=algo.family, workspace_bytes=ws,
                           reason=f"needs {ws} bytes, limit {point.workspace_limit}")
    if plant in _PLANTED_REASONS:
        why = _PLANTED_REASONS[plant]
        return Measurement(point, plant, reason=why, family=algo.family, workspace_bytes=ws)
    return _timed(algo, point, rng, peaks, plant == "wrong", ws)


def _timed(algo: Algo, point: Point, rng: np.random.Generator, peaks: dict[str, float],
           wrong: bool, ws: int) -> Measurement:
    p, prec = point.problem, point.precision
    stable = _stable_rng(p.name, algo.name, point.direction, prec, point.layout)
    ms = p.flops / (peaks.get(prec, 1.0) * 1e12 * _speed(algo, p, prec, stable)) * 1e3 + 0.004
    ms *= 0.3 if wrong else 1.0     # a wrong result is often the fastest: it must never win
    samples = tuple(float(ms * f) for f in rng.lognormal(0.0, 0.01, size=12))
    winograd = 5.0 if algo.family == "winograd" else 1.0
    error = 0.4 if wrong else BASE_ERROR[prec] * winograd * stable.lognormal(0, 0.3)
    return Measurement(
        point, "wrong" if wrong else "ok", reason="rel error 0.4 > tolerance" if wrong else "",
        family=algo.family, samples_ms=samples,
        stop_reason="noise_target" if rng.random() < 0.8 else "budget",
        workspace_bytes=ws if algo.backend == "cudnn" else None, rel_error=error,
        max_abs_error=error * 10, tolerance=TOLERANCE[prec], setup_ms=float(rng.uniform(1, 30)),
        host_ms={"cudnn": 0.077, "torch_gpu": 0.030}.get(algo.backend, 0.001),
        effective_precision=prec, deterministic=algo.family != "fft",
        extras={} if algo.backend == "cpu" else _gpu_extras(p, prec, samples, peaks, rng))


def _gpu_extras(p: ConvProblem, prec: str, samples: tuple[float, ...], peaks: dict[str, float],
                rng: np.random.Generator) -> dict[str, Any]:
    """What the GPU runner adds: achieved rate, roofline share, clocks."""
    tflops = p.flops / (float(np.median(samples)) * 1e-3) / 1e12
    bandwidth_bound = p.arithmetic_intensity(element_bytes(prec)) * peaks["bandwidth_gbps"] / 1e3
    ceiling = min(peaks[prec], bandwidth_bound)
    return {"achieved_tflops": tflops, "roofline_pct": 100.0 * tflops / ceiling,
            "throttled": bool(rng.random() < 0.01), "sm_clock_mhz": 1980.0,
            "sm_clock_max_mhz": 1980.0}


def _flag_picks(ms: list[Measurement], rng: np.random.Generator) -> list[Measurement]:
    """cuDNN's heuristic picks PRECOMP_GEMM when it may (right or not); find picks the fastest
    verified, but now and then the runner-up (its own timing is noisy)."""
    cudnn = [m for m in ms if m.point.backend == "cudnn"]
    runnable = [m for m in cudnn if m.status not in ("unsupported", "workspace_exceeded")]
    order = ["IMPLICIT_PRECOMP_GEMM", "IMPLICIT_GEMM"]
    heuristic = next((m for name in order for m in runnable if m.point.algorithm == name), None)
    timed = sorted((m for m in cudnn if m.ok), key=lambda m: m.median_ms)
    find = timed[1] if len(timed) > 1 and rng.random() < 0.2 else (timed[0] if timed else None)
    out = []
    for m in ms:
        if m.point.backend == "cudnn":
            math = "TENSOR_OP_MATH" if m.point.precision != "fp32" else "DEFAULT_MATH"
            extras = {**m.extras, "heuristic_pick": m is heuristic, "find_pick": m is find,
                      "math_type": math}
            m = replace(m, extras=extras)
        out.append(m)
    return out


def synthetic_rows(probs: list[ConvProblem], algos: tuple[Algo, ...], directions: tuple[str, ...],
                   precisions: tuple[str, ...], layouts: tuple[str, ...],
                   limits: tuple[int | None, ...], env: dict[str, Any], seed: int = 0,
                   plants: dict[tuple[str, str, str], str] | None = None) -> list[dict[str, Any]]:
    """Every combination of the axes; `plants` maps (layer, algorithm, precision) to a forced
    status (wrong, failed or crashed) at every point of that combination."""
    rng = np.random.default_rng(seed)
    peaks = H200_PEAKS if any(a.backend != "cpu" for a in algos) else {"fp32": 0.36, "fp64": 0.17}
    timing = TimingOptions(budget_ms=50.0)
    rows = []
    for p, direction, prec, layout, limit in product(probs, directions, precisions, layouts,
                                                     limits):
        at_point = []
        for algo in algos:
            if algo.backend == "torch_gpu" and limit is not None:
                continue     # PyTorch manages its own workspace: one row per point
            pt = Point(p, direction, prec, layout, algo.backend, algo.name, limit, timing)
            plant = (plants or {}).get((p.name, algo.name, prec))
            at_point.append(_measure(algo, pt, rng, peaks, plant))
        rows += [store.to_row(m, "run-1", "resnet50", env, "2026-11-22T10:00:00")
                 for m in _flag_picks(at_point, rng)]
    return rows


def gpu_frame(size: str = "small", seed: int = 0) -> pd.DataFrame:
    """'small': 4 layers, 2 directions, fp32+fp16, NCHW, three workspace limits, every status.
    'resnet50': the full evidence sweep's shape, about 12,000 rows."""
    if size == "resnet50":
        rows = synthetic_rows(problems(32), GPU_ALGOS, ("fwd", "bwd_data", "bwd_filter"),
                              ("fp32", "tf32", "fp16", "bf16", "fp64"), ("NCHW", "NHWC"),
                              (0, 64 * MIB, None), GPU_ENV, seed,
                              plants={("res4a_branch2b", "FFT_TILING", "fp16"): "wrong",
                                      ("res2b_branch2a", "GEMM", "tf32"): "failed",
                                      ("res5a_branch2c", "IMPLICIT_GEMM", "bf16"): "crashed"})
        return store.frame(rows)
    probs = [problems(8)[i] for i in (1, 3, 7, 12)]
    rows = synthetic_rows(probs, GPU_ALGOS, ("fwd", "bwd_data"), ("fp32", "fp16"), ("NCHW",),
                          (0, 64 * MIB, None), GPU_ENV, seed,
                          plants={("res3a_branch2b", "WINOGRAD_NONFUSED", "fp32"): "wrong",
                                  ("res2a_branch1", "GEMM", "fp16"): "failed",
                                  ("res4a_branch2b", "FFT", "fp16"): "crashed",
                                  ("res2a_branch1", "IMPLICIT_GEMM", "fp32"): "not_tried"})
    return store.frame(rows)


def cpu_frame(seed: int = 1) -> pd.DataFrame:
    """What the CPU backend writes on a 2-core machine: fp32, two directions, no workspace limits,
    no picks, no GPU environment, no roofline columns."""
    probs = [problems(2)[i] for i in (0, 3, 4, 7, 13)]
    rows = synthetic_rows(probs, CPU_ALGOS, ("fwd", "bwd_data"), ("fp32",), ("NCHW",), (None,),
                          CPU_ENV, seed, plants={("res2a_branch2b", "fft", "fp32"): "wrong"})
    return store.frame(rows)


SHARED_REASON = ("shared the CPU: load 3.2 on 2 cores, CPU/wall 0.70 (4 of 12 samples waited "
                 "for a core or a tick after 3 were taken again)")


def checked_cpu_frame(contended: int | None = 2, retaken: int = 3) -> pd.DataFrame:
    """cpu_frame as a run with contention checks writes it: every ok row judged by schedstat,
    the first `contended` ok rows (None: every one) left contended after `retaken` samples were
    taken again, with the reason the timer gives; the other ok rows clean."""
    df = cpu_frame()
    ok = df.index[df["status"] == "ok"]
    shared = ok if contended is None else ok[:contended]
    df.loc[ok, "contention_check"] = "schedstat"
    df.loc[ok, ["contended", "samples_retaken", "cpu_wait", "cpu_threads"]] = [False, 0, 0.002, 2]
    df.loc[shared, ["contended", "samples_retaken", "cpu_wait"]] = [True, retaken, 0.3]
    df.loc[shared, "reason"] = SHARED_REASON
    return df


def expected_best(df: pd.DataFrame, layer: str, direction: str, precision: str,
                  layout: str = "NCHW", limit: int = store.UNLIMITED_BYTES) -> pd.Series:
    """The fastest verified row at a point, found without the report's code (for cross-checks)."""
    at = df[(df.layer == layer) & (df.direction == direction) & (df.precision == precision)
            & (df.layout == layout) & (df.workspace_limit == limit) & (df.status == "ok")]
    return at.sort_values("median_ms").iloc[0]


# ---- hand-made frames: a few rows whose every number a test can compute by hand ---------------
def row(layer="L1", backend="cudnn", algorithm="implicit_gemm", ms=1.0, precision="fp32",
        effective=None, status="ok", limit=-1, multiplicity=1, direction="fwd", **extras):
    """One results row (one sample of `ms` unless `samples_ms` is given); extras override."""
    return {"layer": layer, "batch": 32, "direction": direction, "precision": precision,
            "effective_precision": (effective or precision) if status == "ok" else None,
            "layout": "NCHW", "workspace_limit": limit, "timing_mode": "warm",
            "backend": backend, "algorithm": algorithm, "status": status,
            "median_ms": ms if status == "ok" else None, "multiplicity": multiplicity,
            "samples_ms": [ms] if status == "ok" else [], **extras}


def frame(*rows) -> pd.DataFrame:
    # int64 columns of the schema cannot hold missing values; 0 stands for "not part of the test"
    zeros = {name: 0 for name, dtype in store.COLUMNS.items() if dtype == "int64"}
    return store.frame([{**zeros, **r} for r in rows])
