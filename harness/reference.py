"""The float64 oracle and the test data (the tolerance an algorithm's error is judged by lives in
harness/precision.py).

Written once against an array module `xp` (numpy on the CPU, cupy on the GPU), so the same code
checks every backend. It is deliberately plain: the forward pass accumulates one kernel tap at a
time as a batched matrix product over a strided view; the two backward passes are its exact
adjoints (scatter-add per tap, and a per-tap contraction). Tests check it against a brute-force
loop and the adjoint identities, so it does not share a bug with any algorithm under test.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import precision as precision_table
from harness.problem import ConvProblem

@dataclass
class ProblemData:
    """Host float64 arrays in logical layout, already rounded to the point's storage precision, so
    the reference and the algorithm see exactly the same numbers. `dy` is the output gradient."""
    x: Any
    w: Any
    dy: Any


def make_data(problem: ConvProblem, precision: str, seed: int = 0) -> ProblemData:
    """Random normal data (never zeros: they hide unwritten outputs), rounded to the precision."""
    rng = np.random.default_rng(seed)
    x = precision_table.round_to(rng.standard_normal(problem.input_shape), precision)
    w = precision_table.round_to(rng.standard_normal(problem.weight_shape), precision)
    dy = precision_table.round_to(rng.standard_normal(problem.output_shape), precision)
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
