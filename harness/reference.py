"""The float64 oracle, the test data, and the tolerance an algorithm's error is judged by.

Written once against an array module `xp` (numpy on the CPU, cupy on the GPU), so the same code
checks every backend. It is deliberately plain: the forward pass accumulates one kernel tap at a
time as a batched matrix product over a strided view; the two backward passes are its exact
adjoints (scatter-add per tap, and a per-tap contraction). Tests check it against a brute-force
loop and the adjoint identities, so it does not share a bug with any algorithm under test.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.backends.base import ProblemData
from harness.problem import ConvProblem

# Unit roundoff of the operands each precision multiplies (tf32 keeps 10 mantissa bits, bf16 7).
OPERAND_ROUNDOFF = {"fp64": 2.0**-53, "fp32": 2.0**-24, "tf32": 2.0**-11, "fp16": 2.0**-11,
                    "bf16": 2.0**-8}
# Unit roundoff of the accumulator: float for every precision but fp64.
ACCUMULATOR_ROUNDOFF = {"fp64": 2.0**-53, "fp32": 2.0**-24, "tf32": 2.0**-24, "fp16": 2.0**-24,
                        "bf16": 2.0**-24}
# Rounding the operands and the result costs about one unit each; a few units of slack keep honest
# algorithms in, while any indexing bug (errors of order 1e-1) stays far out.
_OPERAND_UNITS = 8.0
# Sequential float accumulation of L terms drifts like sqrt(L) units (random-sign data).
_ACCUMULATION_UNITS = 2.0


def tolerance(precision: str, reduction_length: int, error_factor: float = 1.0) -> float:
    """Largest relative L2 error accepted for an algorithm run at `precision`."""
    bound = (_OPERAND_UNITS * OPERAND_ROUNDOFF[precision]
             + _ACCUMULATION_UNITS * ACCUMULATOR_ROUNDOFF[precision] * reduction_length**0.5)
    return bound * error_factor


def round_to_precision(array: np.ndarray, precision: str) -> np.ndarray:
    """float64 values that are exactly representable in the precision's storage type."""
    if precision == "fp64":
        return array
    if precision in ("fp32", "tf32"):
        return array.astype(np.float32).astype(np.float64)
    if precision == "fp16":
        return array.astype(np.float16).astype(np.float64)
    if precision == "bf16":
        return _round_to_bfloat16(array.astype(np.float32)).astype(np.float64)
    raise ValueError(f"unknown precision {precision!r}")


def _round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even to bfloat16, kept in float32 (NumPy has no bfloat16 type)."""
    bits = values.view(np.uint32).astype(np.uint64)
    rounding = 0x7FFF + ((bits >> 16) & 1)
    rounded = ((bits + rounding) >> 16 << 16).astype(np.uint32)
    return rounded.view(np.float32)


def make_data(problem: ConvProblem, precision: str, seed: int = 0) -> ProblemData:
    """Random normal data (never zeros: they hide unwritten outputs), rounded to the precision."""
    rng = np.random.default_rng(seed)
    x = round_to_precision(rng.standard_normal(problem.input_shape), precision)
    w = round_to_precision(rng.standard_normal(problem.weight_shape), precision)
    dy = round_to_precision(rng.standard_normal(problem.output_shape), precision)
    return ProblemData(x=x, w=w, dy=dy)


def reference(problem: ConvProblem, direction: str, data: ProblemData, xp: Any = np) -> Any:
    """The exact (float64) result of `direction` on `data`, computed with array module `xp`."""
    x, w, dy = (xp.asarray(a, dtype=xp.float64) for a in (data.x, data.w, data.dy))
    if direction == "fwd":
        return _forward(problem, x, w, xp)
    if direction == "bwd_data":
        return _backward_data(problem, w, dy, xp)
    if direction == "bwd_filter":
        return _backward_filter(problem, x, dy, xp)
    raise ValueError(f"unknown direction {direction!r}")


def relative_errors(result: Any, expected: Any, xp: Any = np) -> tuple[float, float]:
    """(relative L2 error, max absolute error); NaN anywhere makes both infinite."""
    result = xp.asarray(result, dtype=xp.float64)
    diff = result - expected
    if not bool(xp.all(xp.isfinite(result))):
        return float("inf"), float("inf")
    norm = float(xp.linalg.norm(expected.ravel()))
    rel = float(xp.linalg.norm(diff.ravel())) / (norm if norm > 0 else 1.0)
    return rel, float(xp.max(xp.abs(diff))) if diff.size else 0.0


# ---- the oracle ---------------------------------------------------------------------------------
def _contract(xp: Any, spec: str, a: Any, b: Any) -> Any:
    """A two-operand einsum routed to BLAS (NumPy needs optimize=True for that; CuPy does it)."""
    if xp is np:
        return np.einsum(spec, a, b, optimize=True)
    return xp.einsum(spec, a, b)


def _padded(problem: ConvProblem, x: Any, xp: Any) -> Any:
    pads = ((0, 0), (0, 0), (problem.pad_top, problem.pad_bottom),
            (problem.pad_left, problem.pad_right))
    return xp.pad(x, pads)


def _tap_window(problem: ConvProblem, r: int, s: int) -> tuple[slice, slice]:
    """Rows and columns of the padded input that kernel tap (r, s) reads for every output."""
    top, left = r * problem.dilation_h, s * problem.dilation_w
    rows = slice(top, top + (problem.out_h - 1) * problem.stride_h + 1, problem.stride_h)
    cols = slice(left, left + (problem.out_w - 1) * problem.stride_w + 1, problem.stride_w)
    return rows, cols


def _grouped(problem: ConvProblem, tensor: Any, per_group: int) -> Any:
    """(N, G*per_group, H, W) -> (N, G, per_group, H, W)."""
    n, _, h, w = tensor.shape
    return tensor.reshape(n, problem.groups, per_group, h, w)


def _forward(problem: ConvProblem, x: Any, w: Any, xp: Any) -> Any:
    g, cg, kg = problem.groups, problem.channels_per_group, problem.filters_per_group
    xpad = _grouped(problem, _padded(problem, x, xp), cg)
    wg = w.reshape(g, kg, cg, problem.kernel_h, problem.kernel_w)
    y = xp.zeros((problem.batch, g, kg, problem.out_h, problem.out_w), dtype=xp.float64)
    for r in range(problem.kernel_h):
        for s in range(problem.kernel_w):
            rows, cols = _tap_window(problem, r, s)
            y += _contract(xp, "ngcpq,gkc->ngkpq", xpad[:, :, :, rows, cols], wg[:, :, :, r, s])
    return y.reshape(problem.output_shape)


def _backward_data(problem: ConvProblem, w: Any, dy: Any, xp: Any) -> Any:
    g, cg, kg = problem.groups, problem.channels_per_group, problem.filters_per_group
    dyg = _grouped(problem, dy, kg)
    wg = w.reshape(g, kg, cg, problem.kernel_h, problem.kernel_w)
    dxpad = xp.zeros((problem.batch, g, cg, problem.padded_h, problem.padded_w), dtype=xp.float64)
    for r in range(problem.kernel_h):
        for s in range(problem.kernel_w):
            rows, cols = _tap_window(problem, r, s)
            dxpad[:, :, :, rows, cols] += _contract(xp, "ngkpq,gkc->ngcpq", dyg, wg[:, :, :, r, s])
    dx = dxpad[:, :, :, problem.pad_top:problem.pad_top + problem.in_h,
               problem.pad_left:problem.pad_left + problem.in_w]
    return xp.ascontiguousarray(dx.reshape(problem.input_shape))


def _backward_filter(problem: ConvProblem, x: Any, dy: Any, xp: Any) -> Any:
    g, cg, kg = problem.groups, problem.channels_per_group, problem.filters_per_group
    xpad = _grouped(problem, _padded(problem, x, xp), cg)
    dyg = _grouped(problem, dy, kg)
    dw = xp.zeros((g, kg, cg, problem.kernel_h, problem.kernel_w), dtype=xp.float64)
    for r in range(problem.kernel_h):
        for s in range(problem.kernel_w):
            rows, cols = _tap_window(problem, r, s)
            dw[:, :, :, r, s] = _contract(xp, "ngcpq,ngkpq->gkc", xpad[:, :, :, rows, cols], dyg)
    return dw.reshape(problem.weight_shape)
