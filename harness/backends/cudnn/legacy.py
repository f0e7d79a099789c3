"""Every legacy cuDNN convolution algorithm (forward 8, backward data 6, backward filter 7) in
fp32 (FMA math: true fp32), tf32 (default math), fp16 and bf16 (float compute, tensor-op math),
fp64 and int8 (forward INT8_EXT_CONFIG: NHWC, int32 sums, fp32 y, or INT8_CONFIG with a scaled
int8 y; IMPLICIT_PRECOMP_GEMM only), NCHW and NHWC, through ctypes (lib.py) with CuPy for
memory and streams. The types of each
precision, and the refusals of fp8 (no legacy fp8 convolution) and of int8 problems outside
INT8_EXT_CONFIG, are in data_types.py.

cuDNN statuses become data: NOT_SUPPORTED from the workspace query is `unsupported` with the
status name and cuDNN's own last-error text; any failing call is `failed` with the same. For each
problem the backend also asks cuDNN what it would choose (the `_v7` heuristic list and a
`cudnnFind*Ex` run), so reports can say how often cuDNN's own pick is the fastest.

A 3-D problem gets the Nd descriptors (5-D tensors with explicit NCDHW / NDHWC strides, a 5-D
filter in NCHW / NHWC format, three pads, strides and dilations: `nd_arguments`); a 2-D problem
keeps the 4d / 2d calls. Asymmetric padding, which the legacy API cannot express, is refused.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.backends.base import (Algorithm, AlgorithmFailed, Backend, Prepared, Unsupported,
                                   padding_pairs, require_fits)
from harness.backends.cudnn import lib
from harness.backends.cudnn.choices import CudnnChoices
from harness.backends.cudnn.data_types import quantized_refusal, scalar_type, type_config
from harness.backends.cudnn.device_buffers import (DeviceTensors, element_strides, logical_view,
                                                   poison_value)
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

# Unlimited workspace for Find is capped so one huge FFT cannot take the whole card.
FIND_WORKSPACE_CAP = 4 << 30

FAMILIES = {"implicit_gemm": "implicit_gemm", "implicit_precomp_gemm": "implicit_gemm",
            "gemm": "gemm", "direct": "direct", "fft": "fft", "fft_tiling": "fft",
            "winograd": "winograd", "winograd_nonfused": "winograd", "algo_0": "implicit_gemm",
            "algo_1": "implicit_gemm", "algo_3": "implicit_gemm"}
# What each name is, with its cudnnConvolution*Algo_t enum per direction (lib.ALGOS).
DESCRIPTIONS = {
    "implicit_gemm": "fwd IMPLICIT_GEMM (0): GEMM without building the im2col matrix, "
                     "no workspace",
    "implicit_precomp_gemm": "fwd IMPLICIT_PRECOMP_GEMM (1): implicit GEMM with precomputed "
                             "indices in a small workspace",
    "gemm": "fwd GEMM (2): explicit im2col matrix in the workspace, then a GEMM",
    "direct": "fwd DIRECT (3): direct convolution (cuDNN rarely supports it)",
    "fft": "FFT (fwd 4, bwd_data 2, bwd_filter 2): whole-image FFTs, a large workspace",
    "fft_tiling": "FFT_TILING (fwd 5, bwd_data 3, bwd_filter 6): FFTs of input tiles, less "
                  "workspace than fft on large images",
    "winograd": "WINOGRAD (fwd 6, bwd_data 4; bwd_filter 4 is 'not implemented'): fused "
                "Winograd transforms",
    "winograd_nonfused": "WINOGRAD_NONFUSED (fwd 7, bwd_data 5, bwd_filter 5): Winograd with "
                         "separate transform kernels, a large workspace",
    "algo_0": "ALGO_0 (bwd_data 0, bwd_filter 0): implicit GEMM summing with atomic adds, "
              "non-deterministic",
    "algo_1": "ALGO_1 (bwd_data 1, bwd_filter 1): implicit GEMM, deterministic",
    "algo_3": "bwd_filter ALGO_3 (3): ALGO_0 with a small workspace, non-deterministic",
}


class CudnnAlgorithm(Algorithm):
    backend: ClassVar[str] = "cudnn"
    runs_3d = True     # through the Nd descriptors (nd_arguments); 2-D keeps the 4d/2d calls

    def __init__(self, name: str, owner: CudnnBackend):
        self.name = name
        self.family = FAMILIES[name]
        self.description = DESCRIPTIONS[name]
        self.directions = tuple(d for d, algos in lib.ALGOS.items() if name in algos)
        # Transform-based algorithms round in a transformed domain; measured on an H200 in fp32
        # Winograd (non-fused) errs ~5x and FFT ~1x a plain dot product, so 4x the dot-product
        # tolerance keeps them in while errors of an indexing bug (1e-1) stay far out.
        self.error_factor = 4.0 if self.family in ("fft", "winograd") else 1.0
        self._owner = owner

    def supports(self, point: Point) -> str | None:
        if point.direction not in self.directions:
            return f"cuDNN has no {point.direction} algorithm named {self.name}"
        if not point.problem.symmetric_padding:
            return ("cuDNN's legacy API cannot express asymmetric padding "
                    f"({padding_pairs(point.problem)})")
        return quantized_refusal(self.name, point)

    def prepare(self, point: Point, data: ProblemData) -> CudnnPrepared:
        return self._owner.prepare(self, point, data)

    def race_rank(self, point: Point) -> int | None:
        """Its place in cuDNN's _v7 heuristic list for the point (CudnnChoices)."""
        ranked = CudnnChoices(self._owner.session().heuristic(point), [])
        return ranked.heuristic_rank(lib.ALGOS[point.direction][self.name])


class CudnnFailed(AlgorithmFailed):
    """A cuDNN call failed with `status` (None where the library named no status we know)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status
        self.context_lost = status is not None and lib.is_execution_failed(status)


class DeviceOutput(Prepared):
    """poison / output / release for a Prepared that writes one device buffer on its stream;
    the class using it holds output_buffer, output_view, poison_value, stream and keepalive."""

    def poison(self) -> None:
        with self.stream:
            self.output_buffer.fill(self.poison_value)

    def output(self) -> Any:
        with self.stream:
            result = self.output_view(self.output_buffer)
        self.stream.synchronize()
        return result

    def release(self) -> None:
        self.keepalive.clear()


def cuda_unavailable_reason() -> str | None:
    """Why CuPy cannot reach a GPU here, or None when it can."""
    try:
        import cupy
    except ImportError:
        return "cupy is not installed (pip install 'convbench[gpu]')"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA GPU is visible"
    except Exception as err:  # any CUDA runtime failure means "no GPU here"
        return f"no usable CUDA GPU ({type(err).__name__}: {err})"
    return None


def cudnn_unavailable_reason(load: Callable[[], Any] | None = None) -> str | None:
    """Why a ctypes cuDNN backend cannot run here (no GPU, no cuDNN 9, or a cuDNN without the
    calls `load` declares; default lib.library), or None."""
    reason = cuda_unavailable_reason()
    if reason:
        return reason
    try:
        (load or lib.library)()
    except lib.CudnnUnavailable as err:
        return str(err)
    except AttributeError as err:       # a library lacking a call the backend declares
        return f"this cuDNN lacks a call convbench needs: {err}"
    return None


@dataclass
class CudnnPrepared(DeviceOutput):
    launch_args: tuple
    function: Any
    output_buffer: Any
    output_view: Any                   # callable: buffer -> float64 logical cupy array
    poison_value: Any
    stream: Any
    workspace_bytes: int
    choices: CudnnChoices
    algo_enum: int
    keepalive: list = field(default_factory=list)
    device: str = "cuda"
    extras: dict[str, Any] = field(default_factory=dict)

    def launch(self) -> None:
        code = self.function(*self.launch_args)
        if code != 0:
            raise CudnnFailed(f"{lib.status_name(code)} ({code}) from the convolution call: "
                              f"{lib.last_error()}", code)

    def extras_for_limit(self, limit: int | None) -> dict[str, Any]:
        return {"heuristic_pick": self.choices.heuristic_pick(limit) == self.algo_enum,
                "find_pick": self.choices.find_pick(limit) == self.algo_enum,
                "find_pick_warm": self.choices.find_pick(limit, warm=True) == self.algo_enum}


class CudnnBackend(Backend):
    name = "cudnn"
    device = "cuda"
    description = "cuDNN 9 legacy convolution algorithms (ctypes)"

    def __init__(self) -> None:
        self._algorithms = [CudnnAlgorithm(name, self) for name in FAMILIES]
        self._session: _Session | None = None

    def unavailable_reason(self) -> str | None:
        return cudnn_unavailable_reason()

    def algorithms(self) -> list[Algorithm]:
        return list(self._algorithms)

    def prepare(self, algo: CudnnAlgorithm, point: Point, data: ProblemData) -> CudnnPrepared:
        return self.session().prepare(algo, point, data)

    def session(self) -> _Session:
        if self._session is None:
            self._session = _Session()
        return self._session


def _problem_key(point: Point) -> tuple:
    """What cuDNN's picks for a point depend on (all but the algorithm and workspace limit)."""
    return (point.problem, point.direction, point.precision, point.output, point.layout)


# A later timing process's stand-in for cuDNN's picks (_Session._cached_choices).
NO_CHOICES = CudnnChoices(heuristic=[], found=[])


class _Session:
    """One stream, one handle, and device copies of the current problem's tensors, reused by
    every algorithm of that problem (uploading per algorithm would dominate a sweep)."""

    def __init__(self) -> None:
        import cupy
        self.cupy = cupy
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.handle = lib.Handle(self.stream.ptr)
        self.tensors = DeviceTensors(cupy)
        self._choices: dict[tuple, CudnnChoices] = {}
        self._heuristics: dict[tuple, list[tuple[int, int, int]]] = {}

    def prepare(self, algo: CudnnAlgorithm, point: Point, data: ProblemData) -> CudnnPrepared:
        tensors = self.tensors.get(point, data)
        descs = _Descriptors(point)
        algo_enum = lib.ALGOS[point.direction][algo.name]
        in_a, in_b, out = descs.in_order(point.direction)
        try:
            needed = lib.workspace_size(point.direction, self.handle, in_a, in_b, descs.conv,
                                        out, algo_enum)
        except lib.CudnnError as err:
            if lib.is_not_supported(err.code):
                raise Unsupported(str(err)) from None
            raise CudnnFailed(str(err), err.code) from None
        require_fits(needed, point.workspace_limit)
        choices = self._cached_choices(point, descs, tensors, needed)
        return self._bind(point, algo_enum, descs, tensors, needed, choices)

    def _bind(self, point, algo_enum, descs, tensors, needed, choices) -> CudnnPrepared:
        cp = self.cupy
        workspace = cp.empty(max(needed, 1), dtype=cp.uint8)
        types = type_config(point.precision, point.direction, point.output)
        alpha, beta = _scalars(types.output, point.result_scale)
        a_ptr, b_ptr, out_buffer = _operands(point.direction, tensors)
        in_a, in_b, out = descs.in_order(point.direction)
        args = (self.handle.ptr, alpha, in_a.ptr, a_ptr, in_b.ptr, b_ptr, descs.conv.ptr,
                algo_enum, lib.c_void_p(workspace.data.ptr), needed, beta, out.ptr,
                lib.c_void_p(out_buffer.data.ptr))
        extras = {"math_type": lib.MATH_NAMES[types.math],
                  "heuristic_rank": choices.heuristic_rank(algo_enum),
                  **choices.find_extras(algo_enum)}
        return CudnnPrepared(
            launch_args=args, function=lib.run_function(point.direction),
            output_buffer=out_buffer, output_view=logical_view(point, out_buffer),
            poison_value=poison_value(point.result_precision), stream=self.stream,
            workspace_bytes=needed, choices=choices, algo_enum=algo_enum,
            keepalive=[workspace, descs, alpha, beta], extras=extras)

    def _cached_choices(self, point: Point, descs: _Descriptors, tensors,
                        needed: int) -> CudnnChoices:
        """cuDNN's own picks, asked once a problem by the first timing process only: a merged
        row takes its policy columns from the first (process_split.merge), and a later
        process's Find (28 ms a problem on an H100, twice) would only delay its timing."""
        if point.timing.replicate > 0:
            return NO_CHOICES
        key = _problem_key(point)
        if key not in self._choices:
            self._choices[key] = self._ask_cudnn(point, descs, tensors, needed)
        return self._choices[key]

    def heuristic(self, point: Point, descs: _Descriptors | None = None
                  ) -> list[tuple[int, int, int]]:
        """cuDNN's _v7 list for the point, (algo, status, memory), likeliest fastest first,
        asked once a problem (by race_rank, or the first prepare); a configuration with none
        (int8 may have none) gets [], "no heuristic pick", as a failing Find; rows still run."""
        key = _problem_key(point)
        if key not in self._heuristics:
            descs = descs or _Descriptors(point)
            in_a, in_b, out = descs.in_order(point.direction)
            try:
                self._heuristics[key] = [
                    (p.algo, p.status, p.memory) for p in lib.heuristic(
                        point.direction, self.handle, in_a, in_b, descs.conv, out)]
            except lib.CudnnError as err:
                if err.context_lost:
                    raise
                self._heuristics[key] = []
        return self._heuristics[key]

    def _ask_cudnn(self, point: Point, descs: _Descriptors, tensors,
                   needed: int) -> CudnnChoices:
        """`needed`: the workspace of the algorithm being prepared, which Find gets when the
        heuristic names nothing that runs (int8's one algorithm, IMPLICIT_PRECOMP_GEMM, needs a
        small workspace: with none, Find would report it failed and leave no Find pick)."""
        in_a, in_b, out = descs.in_order(point.direction)
        heuristic = self.heuristic(point, descs)
        fitting = [m for _, status, m in heuristic if status == 0] or [needed]
        size = min(max(fitting), FIND_WORKSPACE_CAP)
        workspace = self.cupy.empty(max(size, 1), dtype=self.cupy.uint8)
        a_ptr, b_ptr, out_buffer = _operands(point.direction, tensors)
        call = (point.direction, self.handle, in_a, a_ptr, in_b, b_ptr, descs.conv, out,
                out_buffer.data.ptr, workspace.data.ptr, size)
        first = self._find(call)
        return CudnnChoices(heuristic, first, self._find(call) if first else [], size)

    def _find(self, call: tuple) -> list[tuple[int, int, int, float]]:
        try:
            found = [(p.algo, p.status, p.memory, p.time) for p in lib.find(*call)]
        except lib.CudnnError as err:
            if err.context_lost:
                raise    # the worker must be replaced, as after a failing heuristic call
            found = []   # Find itself failing leaves "no Find pick", which reports show as such
        self.stream.synchronize()
        return found


@dataclass(frozen=True)
class NdArguments:
    """What the Nd descriptor calls receive for one problem and layout (pure data, so it is
    checked without cuDNN): tensor dims in logical N, C, (D,) H, W order with the element
    strides of the layout, the filter's format and logical K, C, (T,) R, S dims, and one pad,
    stride and dilation per spatial axis, outermost first."""
    x_dims: tuple[int, ...]
    x_strides: tuple[int, ...]
    y_dims: tuple[int, ...]
    y_strides: tuple[int, ...]
    w_format: int
    w_dims: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]


def nd_arguments(problem: ConvProblem, layout: str) -> NdArguments:
    """The Nd calls' arguments; the pads are the begin pads (cuDNN pads both sides alike, and
    `supports` refuses asymmetric padding before any descriptor is made)."""
    spatial = problem.spatial
    return NdArguments(
        problem.input_shape, element_strides(problem.input_shape, layout),
        problem.output_shape, element_strides(problem.output_shape, layout),
        lib.NCHW if layout == "NCHW" else lib.NHWC, problem.weight_shape,
        tuple(a.pad_begin for a in spatial), tuple(a.stride for a in spatial),
        tuple(a.dilation for a in spatial))


class _Descriptors:
    """Tensor, filter and convolution descriptors of one point, in cuDNN's terms: the 4d / 2d
    calls for a 2-D problem, the Nd calls (5-D tensors, 3 spatial axes) for a 3-D one."""

    def __init__(self, point: Point):
        p = point.problem
        types = type_config(point.precision, point.direction, point.output)
        x_type, w_type, y_type = types.descriptor_types(point.direction)
        compute, math = types.compute, types.math
        if p.is_3d:
            a = nd_arguments(p, point.layout)
            self.x = lib.TensorNdDesc(x_type, a.x_dims, a.x_strides)
            self.y = lib.TensorNdDesc(y_type, a.y_dims, a.y_strides)
            self.w = lib.FilterNdDesc(w_type, a.w_format, a.w_dims)
            self.conv = lib.ConvNdDesc(a.pads, a.strides, a.dilations, compute, p.groups, math)
            return
        fmt = lib.NCHW if point.layout == "NCHW" else lib.NHWC
        self.x = lib.TensorDesc(fmt, x_type, *p.input_shape)
        self.y = lib.TensorDesc(fmt, y_type, *p.output_shape)
        self.w = lib.FilterDesc(w_type, fmt, *p.weight_shape)
        self.conv = lib.ConvDesc((p.pad_top, p.pad_left), (p.stride_h, p.stride_w),
                                 (p.dilation_h, p.dilation_w), compute, p.groups, math)

    def in_order(self, direction: str) -> tuple:
        """(first input, second input, output) as the direction's C functions order them."""
        return {"fwd": (self.x, self.w, self.y), "bwd_data": (self.w, self.y, self.x),
                "bwd_filter": (self.x, self.y, self.w)}[direction]

    def __del__(self) -> None:  # descriptors live as long as the Prepared that keeps them
        for desc in (self.x, self.y, self.w, self.conv):
            try:
                desc.close()
            except Exception:  # interpreter shutdown may have unloaded the library
                pass


def _operands(direction: str, tensors: dict[str, Any]) -> tuple[int, int, Any]:
    if direction == "fwd":
        return tensors["x"].data.ptr, tensors["w"].data.ptr, tensors["y"]
    if direction == "bwd_data":
        return tensors["w"].data.ptr, tensors["dy"].data.ptr, tensors["dx"]
    return tensors["x"].data.ptr, tensors["dy"].data.ptr, tensors["dw"]


def _scalars(output: int, alpha_value: float = 1.0) -> tuple[Any, Any]:
    """alpha, beta = 0 as host pointers of scalar_type(output). alpha is 1 but for an int8
    result (INT8_CONFIG), where it is the scale the int32 sums are multiplied by before they
    are rounded to int8 (Point.result_scale)."""
    import ctypes
    kind = scalar_type(output)
    alpha, beta = kind(alpha_value), kind(0.0)
    return ctypes.cast(ctypes.pointer(alpha), ctypes.c_void_p), ctypes.cast(
        ctypes.pointer(beta), ctypes.c_void_p)
