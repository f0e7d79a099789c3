"""This CPU's ceilings (issue 42, harness/cpu_peaks.py and harness/backends/cpu/peaks.py): the
FMA kernel computes what it says, the peaks are measured, cached and read back, a count of
threads takes the right ceiling, a broken cache is measured again, and CPU rows carry their
share of the peak."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from harness import cpu_peaks, schema
from harness.backends.cpu import peaks
from harness.measurement import Measurement
from harness.problem import ConvProblem
from harness.sweep import Point
from harness.threads import ALL

needs_numba = pytest.mark.skipif(importlib.util.find_spec("numba") is None,
                                 reason="numba is not installed (the [compiled] extra)")
PEAKS = {"cores": 4, "fp32": {"1": 100.0, "all": 380.0}, "fp64": {"1": 50.0, "all": 190.0},
         "sgemm": {"1": 90.0, "all": 350.0}, "how": "test"}
ENV = {"cpu_model": "test CPU", "cpu_cores": 4, "numpy": "x", "blas": "y"}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVBENCH_CACHE_DIR", str(tmp_path))


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fma_kernel_computes_its_chains(dtype) -> None:
    from harness.backends.cpu import fma_peak
    like = np.ones(1, dtype)
    scale, add = like.dtype.type(0.5), like.dtype.type(2.0)
    chains = like[0] + np.arange(fma_peak.CHAINS, dtype=dtype)
    for _ in range(3):
        chains = chains * scale + add
    assert fma_peak.fma_loop(like, 3, scale, add) == pytest.approx(chains.sum(), rel=1e-6)


@needs_numba
def test_peaks_are_measured_cached_and_read_back(monkeypatch) -> None:
    monkeypatch.setattr(peaks, "STEPS", 20_000)
    monkeypatch.setattr(peaks, "GEMM_SIZE", 128)
    measured = peaks.measure(ENV)
    for rates in (measured["fp32"], measured["fp64"], measured["sgemm"]):
        assert rates["1"] > 0 and rates["all"] > 0
    assert measured["how"].startswith("numba ")
    assert cpu_peaks.load_cached(ENV) == measured
    assert "fp32" in cpu_peaks.describe(measured) and "SGEMM 128" in cpu_peaks.describe(measured)


def test_without_numba_the_peak_says_why(monkeypatch) -> None:
    from harness.backends.cpu import compiled
    monkeypatch.setattr(compiled, "unavailable_reason", lambda: compiled.MISSING)
    monkeypatch.setattr(peaks, "GEMM_SIZE", 64)
    measured = peaks.measure(ENV)
    assert measured["fp32"] is None and compiled.MISSING in measured["how"]
    assert cpu_peaks.peak_gflops(measured, "fp32", ALL) is None
    assert compiled.MISSING in cpu_peaks.describe(measured)


def test_a_broken_cache_file_is_measured_again() -> None:
    path = cpu_peaks.cache_path(ENV)
    path.parent.mkdir(parents=True, exist_ok=True)
    for text in ("{not json", "[1, 2]", '{"cores": 2}'):
        path.write_text(text)
        assert cpu_peaks.load_cached(ENV) is None


def test_a_thread_count_takes_its_own_ceiling() -> None:
    assert cpu_peaks.peak_gflops(PEAKS, "fp32", ALL) == 380.0
    assert cpu_peaks.peak_gflops(PEAKS, "fp32", 1) == 100.0
    assert cpu_peaks.peak_gflops(PEAKS, "fp64", 2) == 100.0      # two single cores
    assert cpu_peaks.peak_gflops(PEAKS, "fp32", 4) == 380.0      # every core
    assert cpu_peaks.peak_gflops(PEAKS, "fp16", 1) is None       # not measured
    assert cpu_peaks.env_fields(PEAKS) == {"cpu_fma_peak_gflops": 380.0,
                                           "cpu_fma_peak_1t_gflops": 100.0}


def _row(backend: str, algorithm: str, threads: int, measured) -> dict:
    problem = ConvProblem(1, 8, 8, 8, 8, 3, 3)
    point = Point(problem, "fwd", "fp32", "NCHW", backend, algorithm, threads=threads)
    m = Measurement(point, "ok", samples_ms=(0.01, 0.01, 0.01))
    row = schema.to_row(m, "run", "suite", dict(ENV), "now")
    row.update(peaks.row_columns(row, measured))
    return row


def test_cpu_rows_carry_their_share_of_the_peak() -> None:
    row = _row("cpu", "im2col", 1, PEAKS)
    assert row["peak_gflops"] == 100.0
    assert row["peak_pct"] == pytest.approx(100 * row["gflops"] / 100.0)
    assert _row("cpu", "im2col", ALL, PEAKS)["peak_gflops"] == 380.0
    assert _row("cpu", "im2col", 1, None)["peak_pct"] is None      # a run without peaks
    assert _row("cudnn", "implicit_gemm", ALL, PEAKS)["peak_pct"] is None  # a GPU row
