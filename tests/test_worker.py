"""A lost CUDA context is known by the error's type and status number where it is raised
(backends.base.context_lost), never by words in a row's reason: the executor makes the point
`crashed`, and the worker process reports its whole group crashed and is replaced. The planted
faults (tests/planted_backends.py) raise the typed errors the real backends raise; the real
fault, an illegal address on a GPU, is tests/test_cudnn_gpu.py's."""
from __future__ import annotations

import sys
import types

import pytest

from harness import backends
from harness.backends import cudnn_lib
from harness.backends.base import CONTEXT_LOST_CODES, AlgorithmFailed, context_lost
from harness.backends.cudnn import CudnnFailed
from harness.backends.cudnn_graph import _frontend_status
from harness.executor import PointExecutor
from harness.measurement import Status
from harness.problem import ConvProblem
from harness.sweep import Point, TimingOptions
from harness.worker import WorkerPool

PROBLEM = ConvProblem(1, 4, 6, 6, 4, 3, 3, name="w")
FAST = TimingOptions(min_samples=3, max_samples=3, budget_ms=10.0)
LOST = ("CUDA context lost: CUDNN_STATUS_EXECUTION_FAILED (5000) from the convolution call: "
        "planted")
QUOTED_NAMES = ("cudaErrorIllegalAddress: an illegal memory access was encountered",
                "CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure",
                "CUDNN_STATUS_EXECUTION_FAILED (5000) from the convolution call")


@pytest.fixture(autouse=True)
def faulty_gpu():
    backends.register("faulty_gpu", "planted_backends:FaultyGpuBackend")


def _point(algorithm: str, limit: int | None = None) -> Point:
    return Point(PROBLEM, "fwd", "fp32", "NCHW", "faulty_gpu", algorithm, limit, FAST)


# ---- classification -------------------------------------------------------------------------
@pytest.mark.parametrize("text", QUOTED_NAMES)
def test_a_message_that_merely_names_a_context_losing_error_is_a_plain_failure(text):
    assert not context_lost(AlgorithmFailed(text))
    assert not context_lost(RuntimeError(text))
    assert not context_lost(CudnnFailed(text, None))       # no status the library named


def test_cudnn_errors_lose_the_context_by_their_execution_failed_status():
    assert context_lost(CudnnFailed("any text", 5000))
    assert context_lost(CudnnFailed("any text", 5003))    # EXECUTION_FAILED_CUDART
    assert context_lost(cudnn_lib.CudnnError(5001, "cudnnGetConvolutionForwardAlgorithm_v7"))
    assert not context_lost(CudnnFailed("CUDNN_STATUS_EXECUTION_FAILED in a log", 3000))
    assert not context_lost(cudnn_lib.CudnnError(4000, "cudnnConvolutionForward"))


def _library_error(monkeypatch, module: str, name: str, attribute: str, code: int):
    """An error of a CUDA library that is 'loaded' (a stand-in module), carrying `code`."""
    kind = type(name, (RuntimeError,), {})
    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    setattr(sys.modules[module], name, kind)
    err = kind(f"code {code}")
    setattr(err, attribute, code)
    return err


@pytest.mark.parametrize("module, name, attribute", [
    ("cupy_backends.cuda.api.runtime", "CUDARuntimeError", "status"),
    ("cupy_backends.cuda.api.driver", "CUDADriverError", "status"),
    ("torch", "AcceleratorError", "error_code"),
], ids=["cupy_runtime", "cupy_driver", "torch"])
def test_cuda_library_errors_lose_the_context_by_their_status_number(monkeypatch, module, name,
                                                                     attribute):
    for code in CONTEXT_LOST_CODES:
        assert context_lost(_library_error(monkeypatch, module, name, attribute, code)), code
    # out of memory, invalid value, launch out of resources, unknown: the context survives
    for code in (2, 1, 701, 999):
        assert not context_lost(_library_error(monkeypatch, module, name, attribute, code)), code


def test_torch_cudnn_failures_without_a_number_are_known_by_their_fixed_text(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    assert context_lost(RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))
    assert not context_lost(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error "
                                         "may appear if you passed in a non-contiguous input."))
    assert not context_lost(RuntimeError("a log: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"))


def test_the_graph_frontend_status_is_read_back_as_cudnn_numbers():
    def frontend(code: str) -> RuntimeError:
        return RuntimeError("cudnnBackendExecute(...) failed with message: CUDNN_STATUS_BAD_PARAM "
                            f"seen earlier, and code: {code}")
    assert _frontend_status(frontend("CUDNN_STATUS_EXECUTION_FAILED_CUDART")) == 5003
    assert _frontend_status(frontend("CUDNN_STATUS_NOT_SUPPORTED_SHAPE")) == 3002
    assert _frontend_status(frontend("CUDNN_STATUS_EXECUTION_FAILED_SOMETHING_NEW")) == 5000
    assert _frontend_status(RuntimeError("no status here")) is None


# ---- executor and worker --------------------------------------------------------------------
def test_the_executor_makes_a_lost_context_crashed_and_a_quoted_name_failed():
    executor = PointExecutor()
    (lost,) = executor.measure([_point("context_lost")])
    assert (lost.status, lost.reason, lost.family) == (Status.CRASHED, LOST, "gemm")
    (quoted,) = executor.measure([_point("quotes_a_fault")])
    assert quoted.status == Status.FAILED and "cudaErrorIllegalAddress" in quoted.reason


def test_a_worker_that_lost_its_context_reports_the_group_crashed_and_is_replaced():
    pool = WorkerPool()
    try:
        (quoted,) = pool.measure([_point("quotes_a_fault")])
        assert quoted.status == Status.FAILED
        first = pool._process
        assert first is not None and first.is_alive()      # a failure keeps the worker

        group = [_point("plans"), _point("plans", 0)]
        rows = pool.measure(group)
        # plan_ok measured fine before plan_lost lost the context: every row is the crash
        assert sorted(m.point.algorithm for m in rows) == ["plan_lost"] * 2 + ["plan_ok"] * 2
        assert {(m.status, m.reason) for m in rows} == {(Status.CRASHED, LOST)}
        assert {m.planned_point_id for m in rows} == {p.point_id for p in group}
        assert not first.is_alive() and pool._process is None

        (again,) = pool.measure([_point("quotes_a_fault")])   # in a fresh process
        assert again.status == Status.FAILED and pool._process.pid != first.pid
    finally:
        pool.close()
