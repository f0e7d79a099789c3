"""PyTorch on the GPU with `torch.backends.cudnn.benchmark = True`: what a PyTorch user gets when
they ask PyTorch to pick the fastest convolution itself (its cuDNN autotuner).

TF32 is allowed only for the tf32 precision (for convolutions and matmuls alike), so fp32 rows
are true fp32 as far as PyTorch's switches go. NHWC means channels_last tensors. The autotuner
runs on the first call of each shape, so `prepare` makes one warm call (its cost lands in
setup_ms) before anything is verified or timed. One more call then runs under PyTorch's profiler
to record which kernels the pick runs (`torch_kernels`): each worker process autotunes on its
own, and harness/process_split.py compares their picks.

Streams: every call runs on a private torch stream; the timer gets the same stream as a CuPy
ExternalStream, so its spin kernel and events bracket exactly PyTorch's work. Outputs are handed
to the runner as float64 CuPy arrays in logical layout through DLPack.

Asymmetric padding is unsupported: PyTorch takes one padding per axis, and the explicit-pad
workaround would time an extra copy no cuDNN row pays.

A 3-D problem runs conv3d and its gradients through the same calls as torch_cpu (5-D tensors;
NHWC means channels_last_3d).
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from harness import epilogue
from harness.backends.base import Algorithm, Backend, Prepared, Unsupported, padding_pairs
from harness.backends.torch import cpu as torch_cpu
from harness.backends.torch.cuda import (captured, cuda_refusal, load_torch, recorded_kernels,
                                        torch_for)
from harness.backends.torch.dtypes import TORCH_DTYPES, dtype
from harness.backends.torch.rnn_gpu import TorchGpuRnn, TorchGpuRnnLoop, TorchGpuRnnNative
from harness.reference import ProblemData
from harness.sweep import Point

_NO_PEER = {"fp8_e4m3": "no PyTorch peer: PyTorch has no fp8 convolution (torch._scaled_mm is "
                        "a matrix product, not a convolution)",
            "int8": "no PyTorch GPU peer: PyTorch's int8 convolution is a quantized CPU operator"}
_NO_PEER["fp8_e5m2"] = _NO_PEER["fp8_e4m3"]


def _build_refusal() -> str | None:
    """Why the installed torch cannot run on an NVIDIA GPU, read from its build record
    (torch/version.py, plain assignments of constants) without importing torch: a CPU build
    says `cuda = None`. Whether the driver serves it is left to the worker's full check."""
    spec = importlib.util.find_spec("torch")
    where = spec.submodule_search_locations if spec else None
    record = Path(where[0]) / "version.py" if where else None
    if record is None or not record.is_file():
        return None            # an unusual install: the worker's full check decides
    build = _constants(record.read_text())
    if "cuda" in build and not build["cuda"]:
        return f"torch {build.get('__version__', '?')} is a CPU-only build (no CUDA)"
    return None


def _constants(source: str) -> dict[str, Any]:
    """The module-level `name = constant` (annotated or not) assignments of Python source."""
    found: dict[str, Any] = {}
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    return found


class TorchGpuPrepared(Prepared):
    """PyTorch allocates its result on every call, as it does for users; `result` holds the latest
    one. poison() NaN-fills it, so a launch that failed to replace it shows."""
    device = "cuda"

    def __init__(self, torch: Any, torch_stream: Any, call: Callable[[], Any], result: Any,
                 workspace_bytes: int):
        import cupy
        self._torch = torch
        self._torch_stream = torch_stream
        self._call = call
        self.result = result
        self.workspace_bytes = workspace_bytes
        self.stream = cupy.cuda.ExternalStream(torch_stream.cuda_stream)
        self.extras: dict[str, Any] = {}
        self._graphs: list[Any] = []

    def launch(self) -> None:
        with self._torch.cuda.stream(self._torch_stream):
            self.result = self._call()

    def capture(self, calls: int) -> Callable[[], None]:
        """`calls` launches captured into a CUDA graph (cuda.captured); `result` is the last
        one's, in the graph's pool. Returns the replay (for the graph timer)."""
        def one() -> None:
            self.result = self._call()
        return captured(self._torch, self._torch_stream, calls, one, self._graphs)

    def poison(self) -> None:
        with self._torch.cuda.stream(self._torch_stream):
            self.result.fill_(float("nan"))

    def output(self) -> Any:
        import cupy
        with self._torch.cuda.stream(self._torch_stream):
            # to(float64) keeps channels_last; contiguous() makes it logical NCHW / KCRS.
            logical = self.result.to(self._torch.float64).contiguous()
        self._torch_stream.synchronize()
        return cupy.from_dlpack(logical)

    def release(self) -> None:
        self._call = None
        self.result = None
        self._graphs.clear()


class CudnnBenchmark(Algorithm):
    backend = "torch_gpu"
    name = "cudnn_benchmark"
    family = "library"
    description = "PyTorch with cudnn.benchmark = True: its autotuner picks the cuDNN kernel"
    runs_3d = True   # torch_cpu's calls: conv3d and its gradients, channels_last_3d for NHWC
    ops = epilogue.OPS  # and its eager epilogues (bias in the call, add and ReLU in place)

    def supports(self, point: Point) -> str | None:
        if point.precision not in TORCH_DTYPES:
            return _NO_PEER.get(point.precision, f"precision {point.precision} has no torch dtype")
        if not point.problem.symmetric_padding:
            return ("PyTorch convolutions take one padding per axis; asymmetric padding "
                    f"({padding_pairs(point.problem)}) would need an extra padded copy")
        return None

    def prepare(self, point: Point, data: ProblemData) -> TorchGpuPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        torch = torch_for(point)
        torch.backends.cudnn.benchmark = True
        stream = torch.cuda.Stream()
        element = dtype(torch, point.precision)
        fmt = torch_cpu.memory_format(torch, point)
        with torch.cuda.stream(stream):
            tensors = torch_cpu.operands(data, lambda a: torch.from_numpy(
                np.ascontiguousarray(a)).to(device="cuda", dtype=element))
            # The same calls as torch_cpu's (padding is symmetric here, so no padded copies).
            call, _ = torch_cpu.build_call(torch, point, tensors, fmt)
            result = call()           # the autotuner's search happens here, inside setup_ms
        stream.synchronize()
        workspace = _transient_bytes(torch, stream, call)
        prepared = TorchGpuPrepared(torch, stream, call, result, workspace)
        key = (point.problem, point.direction, point.precision, point.layout, point.op,
               point.output)
        if key not in _PICKS:   # the autotuner's cache keeps its pick for the process's life
            _PICKS[key] = recorded_kernels(torch, stream, call)[0]
        prepared.extras.update(_PICKS[key])
        return prepared


# The kernels each call's pick ran, recorded once per worker process: PyTorch's autotuner caches
# its pick per process, so a call prepared again (harness/runoff.py) runs the same, and the
# profiler (~0.3 s a call) need not say so again.
_PICKS: dict[tuple, dict[str, Any]] = {}


def _transient_bytes(torch: Any, stream: Any, call: Callable[[], Any]) -> int:
    """Memory a call allocates beyond its result (cuDNN's workspace comes from PyTorch's caching
    allocator), measured on a second, already autotuned call."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.cuda.stream(stream):
        out = call()
    stream.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    return max(0, peak - out.numel() * out.element_size())


class TorchGpuBackend(Backend):
    name = "torch_gpu"
    device = "cuda"
    description = ("PyTorch on the GPU: convolutions with cudnn.benchmark=True (its cuDNN "
                   "autotuner); recurrent layers through cuDNN, with cuDNN off, and a plain loop")

    def unavailable_reason(self) -> str | None:
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (pip install 'convbench[torch]')"
        if importlib.util.find_spec("cupy") is None:
            return "cupy is not installed (pip install 'convbench[gpu]'); the timer needs it"
        if "torch" not in sys.modules:
            # Importing torch costs the planning process 3-6 s (issue 38: 5-8% of the default
            # quick run) only to ask what its build says; a worker imports it anyway and makes
            # the full check before its first call (prepare).
            return _build_refusal()
        return cuda_refusal(load_torch())

    def algorithms(self) -> list[Algorithm]:
        return [CudnnBenchmark(), TorchGpuRnn(), TorchGpuRnnNative(), TorchGpuRnnLoop()]
