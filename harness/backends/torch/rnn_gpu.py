"""PyTorch's recurrent layers on the GPU (issue 40): the three ways a PyTorch user can run an
LSTM / GRU / RNN there, each with the directions of harness/backends/torch/rnn.py (inference,
training forward, and autograd's two backward passes).

  nn_rnn         nn.LSTM / nn.GRU / nn.RNN as PyTorch runs them by default: through cuDNN, with
                 the RNN algorithm PyTorch chooses (`torch_kernels` names the kernels one call
                 ran, so a row shows whether a persistent kernel was used). The `pytorch` policy.
  nn_rnn_native  the same module with torch.backends.cudnn.enabled = False: PyTorch's own CUDA
                 path (a fused cell kernel per step and cuBLAS products), what a user gets where
                 cuDNN refuses a shape or is switched off. Not what PyTorch runs by default, so
                 no policy takes it (family CUDNN_OFF).
  plain_loop     the hand-written per-step loop (harness/backends/torch/rnn_loop.py) on the GPU:
                 the "vanilla LSTM" of the classic comparison.

TF32 is allowed only for the tf32 precision (cuDNN and matmul switches, as for convolutions), so
an fp32 row whose output shows TF32 accuracy says "asked fp32, delivered tf32": PyTorch's cuDNN
RNN computes in TF32 on an H100 with those switches off (shared/reference/rnn.md).

Every call runs on a private torch stream that the timer also holds (a CuPy ExternalStream), as
for torch_gpu's convolutions. The times are device times, like every GPU row's: the host's cost
of issuing one call, which a launch-bound loop of small kernels pays on every step, is the row's
`host_ms`.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from harness import families
from harness.backends.base import Algorithm, Unsupported
from harness.backends.torch.cuda import captured, recorded_kernels, torch_for
from harness.backends.torch.dtypes import TORCH_DTYPES
from harness.backends.torch.rnn import RnnPrepared, module_call
from harness.backends.torch.rnn_loop import loop_call
from harness.rnn.oracle import RnnData, flat
from harness.sweep import RNN_DIRECTIONS, Point

CUDNN_OFF = "cudnn_off"     # the family of PyTorch's path with cuDNN switched off


@contextmanager
def cudnn_switched(torch: Any, enabled: bool) -> Iterator[None]:
    """cuDNN on or off for what runs inside, as it was after."""
    was = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = enabled
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = was


class RnnGpuPrepared(RnnPrepared):
    """RnnPrepared on a private torch stream, with cuDNN on or off around every call."""
    device = "cuda"

    def __init__(self, torch: Any, stream: Any, call: Callable[[], tuple], cudnn: bool):
        import cupy
        super().__init__(call, "cuda")
        self._torch = torch
        self._torch_stream = stream
        self._cudnn = cudnn
        self.stream = cupy.cuda.ExternalStream(stream.cuda_stream)
        self._graphs: list[Any] = []

    @contextmanager
    def _calling(self) -> Iterator[None]:
        with cudnn_switched(self._torch, self._cudnn), self._torch.cuda.stream(self._torch_stream):
            yield

    def launch(self) -> None:
        with self._calling():
            super().launch()

    def capture(self, calls: int) -> Callable[[], None]:
        """`calls` launches captured into a CUDA graph (cuda.captured), cuDNN on or off as the
        algorithm runs; a call that cannot be captured (a packed sequence's lengths are read on
        the host) raises CaptureFailed and the held stream times it."""
        with cudnn_switched(self._torch, self._cudnn):
            return captured(self._torch, self._torch_stream, calls, super().launch, self._graphs)

    def poison(self) -> None:
        with self._calling():
            super().poison()

    def output(self) -> Any:
        """On the GPU (CuPy, as cudnn_rnn's): the float64 oracle and the verdict run there. On
        the host they took 16.6-19.3 s for an LSTM of hidden 4096 on an H200, cudnn_rnn's 0.8 s
        (evidence/logs/issue40-stop58-nvidia-h200-2026-11-28.txt)."""
        import cupy
        # PyTorch's copies and CuPy's reads in one stream (self.stream is it, seen by CuPy), done
        # before the next call or poison() on that stream reuses or fills the tensors read
        with self._torch.cuda.stream(self._torch_stream), self.stream:
            wide = [t.detach().double().contiguous() for t in self.result if t is not None]
            out = flat(*(cupy.from_dlpack(t) for t in wide), xp=cupy)
        self.stream.synchronize()
        return out

    def release(self) -> None:
        super().release()
        self._graphs.clear()


class TorchGpuRnn(Algorithm):
    backend = "torch_gpu"
    name = "nn_rnn"
    family = "library"
    description = "torch.nn.LSTM / GRU / RNN on the GPU through cuDNN (PyTorch's default)"
    problem_kinds = (families.RNN,)
    directions = RNN_DIRECTIONS
    cudnn = True

    def supports(self, point: Point) -> str | None:
        if point.precision not in TORCH_DTYPES:
            return f"precision {point.precision}: PyTorch has no recurrent layer in it"
        return None

    def prepare(self, point: Point, data: RnnData) -> RnnGpuPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        torch = torch_for(point)
        stream = torch.cuda.Stream()
        torch.cuda.synchronize()
        # the backward directions run their forward pass here, once: it must take the same
        # path (cuDNN on or off) as the timed calls, whose backward replays what it recorded
        with cudnn_switched(torch, self.cudnn), torch.cuda.stream(stream):
            call = self._call(torch, point, data)
        torch.cuda.synchronize()      # tensors and weights made, on whichever stream, are ready
        prepared = RnnGpuPrepared(torch, stream, call, self.cudnn)
        _profiled(torch, prepared, stream)
        return prepared

    def _call(self, torch: Any, point: Point, data: RnnData) -> Callable[[], tuple]:
        return module_call(torch, point, data, "cuda")


class TorchGpuRnnNative(TorchGpuRnn):
    name = "nn_rnn_native"
    family = CUDNN_OFF
    description = ("torch.nn.LSTM / GRU / RNN on the GPU with torch.backends.cudnn.enabled = "
                   "False (PyTorch's own CUDA kernels)")
    cudnn = False


class TorchGpuRnnLoop(TorchGpuRnn):
    name = "plain_loop"
    family = "loop"
    description = "a hand-written per-step loop of PyTorch tensor ops on the GPU + autograd"

    def _call(self, torch: Any, point: Point, data: RnnData) -> Callable[[], tuple]:
        return loop_call(torch, point, data, "cuda")


def _profiled(torch: Any, prepared: RnnGpuPrepared, stream: Any) -> None:
    """One warm call, then one under PyTorch's profiler that also gives the memory a call
    allocates beyond its results (cuDNN's workspace and reserve space come from PyTorch's
    caching allocator; the profiler's buffers do not): which kernels ran (`torch_kernels`), the
    time they kept the GPU busy (harness/call_bound.py) and the transient bytes, from the calls
    two readings once made apart (a plain loop of 750 steps costs 1.3 s a call on an H200)."""
    prepared.launch()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    columns, prepared.device_ms_at_least = recorded_kernels(torch, stream, prepared.launch)
    torch.cuda.synchronize()
    kept = sum(t.numel() * t.element_size() for t in prepared.result)
    prepared.workspace_bytes = max(0, torch.cuda.max_memory_allocated() - before - kept)
    prepared.extras.update(columns)
