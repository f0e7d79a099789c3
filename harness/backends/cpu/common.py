"""What every NumPy algorithm shares: precision and layout rules, scratch allocation under the
point's workspace limit, the padded-input buffer, tap windows, and the `Prepared` object.

Blocks of images are gathered channels-outermost ("CNHW") so that a grouped GEMM sees every
image of a block as one long matrix instead of one small GEMM per image.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.backends.base import Algorithm, Prepared, Unsupported, WorkspaceExceeded
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

COMPUTE_DTYPES = {"fp32": np.float32, "fp64": np.float64}
# Output columns of the compiled direct kernel's register tile (direct_compiled.py says why 64):
# here, apart from numba, so that the NumPy side can tell which layers fill the tiles.
TILE_W = 64
_PRECISION_REASONS = {
    "fp16": "NumPy has no fp16 arithmetic (it would compute in float32)",
    "bf16": "NumPy has no bfloat16 type",
    "tf32": "NumPy has no TF32 arithmetic (its float32 GEMM rounds like fp32)",
    "fp8_e4m3": "NumPy has no fp8 type (these are GPU tensor-core formats)",
    "fp8_e5m2": "NumPy has no fp8 type (these are GPU tensor-core formats)",
    "int8": "the NumPy algorithms compute in floating point; int8 with int32 sums is a GPU "
            "path here (cudnn, cudnn_graph)",
}


def common_reason(point: Point) -> str | None:
    """The reason no NumPy algorithm runs this point, or None."""
    if point.precision not in COMPUTE_DTYPES:
        return _PRECISION_REASONS.get(point.precision, f"precision {point.precision} unsupported")
    if point.layout != "NCHW":
        # A NumPy NHWC path would time a transpose around the same NCHW kernels, which says
        # nothing about the algorithm; the torch_cpu backend measures NHWC for real.
        return "the NumPy algorithms compute in NCHW only; NHWC would only time a transpose"
    return None


def compute_dtype(point: Point) -> type:
    return COMPUTE_DTYPES[point.precision]


def nbytes(dtype: Any, shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(math.prod(shape) for shape in shapes.values()) * np.dtype(dtype).itemsize


def allocate(point: Point, dtype: Any, shapes: dict[str, tuple[int, ...]],
             other_bytes: int = 0) -> dict[str, np.ndarray]:
    """Zeroed scratch buffers, refused with WorkspaceExceeded when they (plus `other_bytes` of
    scratch allocated separately, e.g. in another dtype) exceed the point's limit.

    Zeroed because several buffers keep zero borders (padding) that launch() never rewrites."""
    needed = nbytes(dtype, shapes) + other_bytes
    if point.workspace_limit is not None and needed > point.workspace_limit:
        raise WorkspaceExceeded(needed, point.workspace_limit)
    return {name: np.zeros(shape, dtype) for name, shape in shapes.items()}


def workspace_of(buffers: dict[str, np.ndarray]) -> int:
    """Bytes of scratch memory in preallocated buffers (operands and output not included)."""
    return sum(a.nbytes for a in buffers.values())


def tap_rows(p: ConvProblem, r: int, first: int = 0, count: int | None = None) -> slice:
    """Rows of the padded input that kernel row r reads for output rows first..first+count-1."""
    return p.axis_h.window(r, first, count)


def tap_cols(p: ConvProblem, s: int) -> slice:
    """Columns of the padded input that kernel column s reads for all output columns."""
    return p.axis_w.window(s)


def split(total: int, most: int) -> list[tuple[int, int]]:
    """(start, length) of near-equal blocks of at most `most` items covering `total`."""
    count = -(-total // max(1, min(most, total)))
    size = -(-total // count)
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def padded_shape(p: ConvProblem) -> tuple[int, ...]:
    """The input's shape with every spatial axis padded at both ends."""
    return (p.batch, p.in_channels, *(a.padded for a in p.spatial))


def interior(p: ConvProblem) -> tuple[slice, ...]:
    """Where the unpadded input sits inside the padded (volume or) plane, one slice per axis."""
    return tuple(slice(a.pad_begin, a.pad_begin + a.size) for a in p.spatial)


def tap_major_weights(p: ConvProblem, w: np.ndarray) -> np.ndarray:
    """(K, Cg, *kernel) -> view (*kernel, G, Kg, Cg): one GEMM operand per tap."""
    kernel = tuple(a.kernel for a in p.spatial)
    taps = tuple(range(3, 3 + len(kernel)))
    return w.reshape(p.groups, p.filters_per_group, p.channels_per_group,
                     *kernel).transpose(*taps, 0, 1, 2)


class CpuPrepared(Prepared):
    """One algorithm bound to one point: operands in the compute dtype, output and scratch
    preallocated. `kernel` computes into `result` (logical NCHW/KCRS, compute dtype)."""
    device = "cpu"
    stream = None

    def __init__(self, result: np.ndarray, kernel: Callable[[], None], workspace_bytes: int):
        self.result = result
        self._kernel = kernel  # a closure over the operands and scratch; release() drops it
        self.workspace_bytes = workspace_bytes
        self.extras: dict[str, Any] = {}

    def launch(self) -> None:
        self._kernel()

    def poison(self) -> None:
        self.result.fill(np.nan)

    def output(self) -> np.ndarray:
        return self.result.astype(np.float64)

    def release(self) -> None:
        self._kernel = _released
        self.result = np.empty(0)


def _released() -> None:
    raise RuntimeError("launch() after release()")


class CpuAlgorithm(Algorithm):
    """Base of the NumPy algorithms: subclasses add `shape_reason` and one builder per direction
    (`fwd`, `bwd_data`, `bwd_filter`), each returning a CpuPrepared."""
    backend = "cpu"

    def supports(self, point: Point) -> str | None:
        return common_reason(point) or self.shape_reason(point.problem, point.direction)

    def shape_reason(self, problem: ConvProblem, direction: str) -> str | None:
        return None

    def prepare(self, point: Point, data: ProblemData) -> CpuPrepared:
        reason = self.refusal(point)
        if reason:
            raise Unsupported(reason)
        dtype = compute_dtype(point)
        build: Callable[..., CpuPrepared] = getattr(self, point.direction)
        return build(point, data, dtype)
