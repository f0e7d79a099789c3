"""PyTorch on the CPU (oneDNN for fp32, its native kernels for fp64): the peer a user would
otherwise pick. torch is imported lazily, inside prepare, so `import harness` never needs it.

Padding: torch convolutions take one padding per axis for both sides. Symmetric padding is
passed through; asymmetric padding is applied explicitly with F.pad in prepare (outside the
timed launch) for fwd and bwd_filter, and for bwd_data the gradient is taken with respect to
the padded input and its interior copied out inside launch, so the timed work is still exactly
what a PyTorch user with that padding would run.

A 3-D problem runs torch's conv3d (NCDHW; NHWC means channels_last_3d) through the same code:
every per-axis list below has one entry per spatial axis of `ConvProblem.spatial`.

Ops (harness.epilogue) run as an eager PyTorch user runs them: the bias inside the conv call (as
nn.Conv2d(bias=True) passes it), then the residual added and the ReLU applied in place on the
result (torchvision's ResNet blocks: `out += identity; out = relu(out)`, ReLU(inplace=True)).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import numpy as np

from harness import epilogue
from harness.backends.base import Algorithm, Backend, Prepared, Unsupported
from harness.backends.torch.cores import use_every_core
from harness.backends.torch.dtypes import ON_CPU, dtype
from harness.backends.torch.rnn import TorchRnn
from harness.backends.torch.rnn_loop import TorchRnnLoop
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

_MISSING = "torch is not installed (pip install 'convbench[torch]')"
_PRECISION_REASONS = {
    "tf32": "PyTorch has no TF32 arithmetic on the CPU",
    "fp16": "only fp32 and fp64 are measured on the CPU (torch's fp16 CPU convolution is not "
            "a path a user would pick)",
    "bf16": "only fp32 and fp64 are measured on the CPU here",
    "fp8_e4m3": "PyTorch has no fp8 convolution",
    "fp8_e5m2": "PyTorch has no fp8 convolution",
    "int8": "PyTorch's int8 CPU convolution is a quantized-model operator (packed weights, "
            "scales); convbench does not run it yet",
}


def _torch() -> Any:
    import torch  # lazy: heavy, optional
    return torch


class TorchPrepared(Prepared):
    """The library allocates its result on every call (as it does for users); `result` holds
    the latest one (an empty placeholder before the first launch). poison() NaN-fills it, so a
    launch that failed to replace it shows."""
    device = "cpu"
    stream = None

    def __init__(self, call: Callable[[], Any], result: Any, workspace_bytes: int):
        self._call = call
        self.result = result
        self.workspace_bytes = workspace_bytes
        self.extras: dict[str, Any] = {}

    def launch(self) -> None:
        self.result = self._call()

    def poison(self) -> None:
        self.result.fill_(float("nan"))

    def output(self) -> np.ndarray:
        return np.array(self.result.detach().numpy(), dtype=np.float64)  # logical NCHW/KCRS

    def release(self) -> None:
        self._call = None
        self.result = None


class Conv2d(Algorithm):
    backend = "torch_cpu"
    name = "conv2d"
    family = "library"
    description = "torch.nn.functional.conv2d / conv3d and its autograd (oneDNN for fp32)"
    runs_3d = True
    ops = epilogue.OPS

    def supports(self, point: Point) -> str | None:
        if point.precision not in ON_CPU:
            return _PRECISION_REASONS.get(point.precision,
                                          f"precision {point.precision} unsupported")
        if point.layout not in ("NCHW", "NHWC"):
            return f"layout {point.layout} unsupported"
        return None

    def prepare(self, point: Point, data: ProblemData) -> TorchPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        torch = _torch()
        use_every_core(torch)
        element = dtype(torch, point.precision)
        fmt = memory_format(torch, point)
        tensors = operands(data, lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(element))
        call, workspace = build_call(torch, point, tensors, fmt)
        placeholder = torch.empty(point.problem.result_shape(point.direction),
                                  dtype=element).contiguous(memory_format=fmt)
        return TorchPrepared(call, placeholder, workspace)


def operands(data: ProblemData, to_tensor: Callable[[Any], Any]) -> list[Any]:
    """x, w, dy, bias, residual as tensors (`to_tensor` converts one array); None where the
    point's op has no such operand."""
    return [None if a is None else to_tensor(a)
            for a in (data.x, data.w, data.dy, data.bias, data.residual)]


def build_call(torch: Any, point: Point, tensors: list[Any], fmt: Any) -> tuple[Callable, int]:
    """The call that runs `point` on `tensors` (operands' order), and its workspace bytes."""
    def laid_out(t: Any) -> Any:      # the bias is a vector: no layout to give it
        return t if t is None or t.dim() == 1 else t.contiguous(memory_format=fmt)
    x, w, dy, bias, residual = map(laid_out, tensors)
    if point.direction == "fwd":
        return _forward(torch, point.problem, x, w, fmt, point.op, bias, residual)
    build = {"bwd_data": _backward_data, "bwd_filter": _backward_filter}
    return build[point.direction](torch, point.problem, x, w, dy, fmt)


def memory_format(torch: Any, point: Point) -> Any:
    """NHWC is channels_last (channels_last_3d for a 3-D problem); NCHW is torch's default."""
    if point.layout != "NHWC":
        return torch.contiguous_format
    return torch.channels_last_3d if point.problem.is_3d else torch.channels_last


def _geometry(p: ConvProblem) -> dict[str, Any]:
    return {"stride": [a.stride for a in p.spatial], "dilation": [a.dilation for a in p.spatial],
            "groups": p.groups}


def _no_padding(p: ConvProblem) -> list[int]:
    return [0] * len(p.spatial)


def _explicit_pad(torch: Any, p: ConvProblem, x: Any, fmt: Any) -> tuple[Any, list[int], int]:
    """(input, padding for torch, bytes of the padded copy): asymmetric padding done by hand."""
    if p.symmetric_padding:
        return x, [a.pad_begin for a in p.spatial], 0
    # F.pad takes (begin, end) pairs from the last axis to the first.
    pairs = [pad for a in reversed(p.spatial) for pad in (a.pad_begin, a.pad_end)]
    padded = torch.nn.functional.pad(x, pairs).contiguous(memory_format=fmt)
    return padded, _no_padding(p), padded.numel() * padded.element_size()


def _forward(torch: Any, p: ConvProblem, x: Any, w: Any, fmt: Any, op: str = epilogue.CONV,
             bias: Any = None, residual: Any = None):
    xin, padding, workspace = _explicit_pad(torch, p, x, fmt)
    conv = torch.nn.functional.conv3d if p.is_3d else torch.nn.functional.conv2d
    g = _geometry(p)
    relu = epilogue.has_relu(op)

    def call() -> Any:
        y = conv(xin, w, bias, g["stride"], padding, g["dilation"], g["groups"])
        if residual is not None:
            y += residual
        return torch.relu_(y) if relu else y
    return call, workspace


def _backward(torch: Any, p: ConvProblem, dy: Any, xin: Any, w: Any, padding: list[int],
              mask: list[bool]) -> Any:
    g = _geometry(p)
    return torch.ops.aten.convolution_backward(
        dy, xin, w, None, g["stride"], padding, g["dilation"], False, _no_padding(p), g["groups"],
        mask)


def _backward_data(torch: Any, p: ConvProblem, x: Any, w: Any, dy: Any, fmt: Any):
    if p.symmetric_padding:
        padding = [a.pad_begin for a in p.spatial]

        def call() -> Any:
            return _backward(torch, p, dy, x, w, padding, [True, False, False])[0]
        return call, 0
    # The gradient w.r.t. the explicitly padded input, then its interior (a copy, timed).
    shape = (p.batch, p.in_channels, *(a.padded for a in p.spatial))
    xin = torch.empty(shape, dtype=x.dtype).contiguous(memory_format=fmt)
    interior = tuple(slice(a.pad_begin, a.pad_begin + a.size) for a in p.spatial)

    def call_padded() -> Any:
        dxpad = _backward(torch, p, dy, xin, w, _no_padding(p), [True, False, False])[0]
        return dxpad[(..., *interior)].contiguous(memory_format=fmt)
    return call_padded, xin.numel() * xin.element_size()


def _backward_filter(torch: Any, p: ConvProblem, x: Any, w: Any, dy: Any, fmt: Any):
    xin, padding, workspace = _explicit_pad(torch, p, x, fmt)

    def call() -> Any:
        return _backward(torch, p, dy, xin, w, padding, [False, True, False])[1]
    return call, workspace


class TorchCpuBackend(Backend):
    name = "torch_cpu"
    device = "cpu"
    description = ("PyTorch on the CPU, the library a user would otherwise call: convolutions "
                   "(oneDNN) and recurrent layers")

    def unavailable_reason(self) -> str | None:
        return None if importlib.util.find_spec("torch") is not None else _MISSING

    def algorithms(self) -> list[Algorithm]:
        return [Conv2d(), TorchRnn(), TorchRnnLoop()]
