"""The float64 oracle and the test data, and the scale of the oracle's terms (the tolerance an
algorithm's error is judged by lives in harness/precision.py, the judging in harness/verdict.py).

Written once against an array module `xp` (numpy on the CPU, cupy on the GPU), so the same code
checks every backend. It is deliberately plain: the forward pass accumulates one kernel tap at a
time as a batched matrix product over a strided view; the two backward passes are its exact
adjoints (scatter-add per tap, and a per-tap contraction). Tests check it against a brute-force
loop and the adjoint identities, so it does not share a bug with any algorithm under test.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from harness import draws, epilogue
from harness import precision as precision_table
from harness.problem import ConvProblem


@dataclass
class ProblemData:
    """Host float64 arrays in logical layout, already rounded to the point's storage precision, so
    the reference and the algorithm see exactly the same numbers. `dy` is the output gradient;
    `bias` (K,) and `residual` (output-shaped) are there when the point's op needs them."""
    x: Any
    w: Any
    dy: Any
    bias: Any = None
    residual: Any = None


def array_module(array: Any) -> Any:
    """NumPy or CuPy: the module of the array (outputs live on the device that computed them)."""
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy
        return cupy
    return np


def make_data(problem: ConvProblem, precision: str, seed: int = 0,
              op: str = epilogue.CONV) -> ProblemData:
    """Random normal data (never zeros: they hide unwritten outputs), rounded to the precision.
    The epilogue's operands are drawn after x, w, dy, so those are the same for every op; they
    are added to the result, so they take its precision (fp16 for an fp8 forward pass) and the
    scale of a product of two operands."""
    streams = np.random.SeedSequence(seed)     # one child a tensor, in the order drawn
    scale = precision_table.TABLE[precision].data_scale

    def draw(shape: tuple[int, ...], to: str = precision, times: float = scale) -> Any:
        return draws.normal(streams.spawn(1)[0], shape,
                            lambda block: precision_table.round_to(block * times, to))
    x, w, dy = draw(problem.input_shape), draw(problem.weight_shape), draw(problem.output_shape)
    result = precision_table.output_precision(precision, "fwd")
    bias = (draw((problem.out_channels,), result, scale**2) if epilogue.needs_bias(op)
            else None)
    residual = (draw(problem.output_shape, result, scale**2) if epilogue.needs_residual(op)
                else None)
    return ProblemData(x=x, w=w, dy=dy, bias=bias, residual=residual)


def reference(problem: ConvProblem, direction: str, data: ProblemData, xp: Any = np,
              op: str = epilogue.CONV) -> Any:
    """The exact (float64) result of `direction` (and, forward, the op's epilogue) on `data`,
    computed with array module `xp`."""
    x, w, dy = (xp.asarray(a, dtype=xp.float64) for a in (data.x, data.w, data.dy))
    if not epilogue.applies_to(op, direction):
        raise ValueError(f"op {op!r} exists for the forward direction only, not {direction!r}")
    if direction == "fwd":
        return epilogue.apply(op, _forward(problem, x, w, xp), data.bias, data.residual, xp)
    if direction == "bwd_data":
        return _backward_data(problem, w, dy, xp)
    if direction == "bwd_filter":
        return _backward_filter(problem, x, dy, xp)
    raise ValueError(f"unknown direction {direction!r}")


def term_spread(problem: ConvProblem, direction: str, data: ProblemData, expected: Any,
                xp: Any = np, op: str = epilogue.CONV) -> Any:
    """For every output, the root of the sum of the squares of the terms its exact result sums
    (the reference of the squared operands, by the same code): the scale of an honest float
    sum's rounding error, whatever the result. On random data it is the result's own size (so
    the tolerance's calibration holds at any reduction length); where the terms cancel it is far
    more (precision.condition). Outputs a ReLU zeroed (`expected` 0) carry no error: their
    spread is dropped, or it would read a ReLU's halved result as cancellation."""
    squared = ProblemData(*(None if a is None else np.square(a) for a in
                            (data.x, data.w, data.dy, data.bias, data.residual)))
    spread = xp.sqrt(reference(problem, direction, squared, xp, op))
    if direction == "fwd" and epilogue.has_relu(op):
        spread = spread * (expected > 0)
    return spread


@dataclass(frozen=True)
class TermScales:
    """How large the terms of a point's exact result are, for judging it where the result alone
    cannot say (harness/verdict.py): the norm of `term_spread`, and the product of the norms of
    the two operands multiplied (no output of theirs can exceed it, by Cauchy-Schwarz)."""
    spread_norm: float
    operand_norms: float


def term_scales(problem: ConvProblem, direction: str, data: ProblemData, expected: Any,
                xp: Any = np, op: str = epilogue.CONV) -> TermScales:
    first, second = {"fwd": (data.x, data.w), "bwd_data": (data.dy, data.w),
                     "bwd_filter": (data.x, data.dy)}[direction]
    return TermScales(l2_norm(term_spread(problem, direction, data, expected, xp, op), xp),
                      l2_norm(first, xp) * l2_norm(second, xp))


def l2_norm(array: Any, xp: Any = np) -> float:
    """The L2 norm of every element of `array`, in float64."""
    return float(xp.linalg.norm(xp.asarray(array, dtype=xp.float64).ravel()))


def relative_errors(result: Any, expected: Any, xp: Any = np,
                    norm: float | None = None) -> tuple[float, float]:
    """(relative L2 error, max absolute error); NaN anywhere makes both infinite. `norm`:
    expected's L2 norm where the caller has it already."""
    result = xp.asarray(result, dtype=xp.float64)
    diff = result - expected
    if not bool(xp.all(xp.isfinite(result))):
        return float("inf"), float("inf")
    norm = l2_norm(expected, xp) if norm is None else norm
    rel = l2_norm(diff, xp) / (norm if norm > 0 else 1.0)
    return rel, float(xp.max(xp.abs(diff))) if diff.size else 0.0


# ---- the oracle ---------------------------------------------------------------------------------
def _contract(xp: Any, spec: str, a: Any, b: Any) -> Any:
    """A two-operand einsum routed to BLAS (NumPy needs optimize=True for that; CuPy does it)."""
    if xp is np:
        return np.einsum(spec, a, b, optimize=True)
    return xp.einsum(spec, a, b)


# Spatial axes are `...` in the contractions and a tuple of slices in the windows, so the same
# code is the 2-D and the 3-D oracle (depth is just one more axis of `problem.spatial`).
def _padded(problem: ConvProblem, x: Any, xp: Any) -> Any:
    pads = ((0, 0), (0, 0), *((a.pad_begin, a.pad_end) for a in problem.spatial))
    return xp.pad(x, pads)


def _taps(problem: ConvProblem) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Every kernel tap with the window of the padded input it reads for every output."""
    return [(tap, tuple(a.window(t) for a, t in zip(problem.spatial, tap)))
            for tap in product(*(range(a.kernel) for a in problem.spatial))]


def _grouped(problem: ConvProblem, tensor: Any, per_group: int) -> Any:
    """(N, G*per_group, *spatial) -> (N, G, per_group, *spatial)."""
    n, _, *spatial = tensor.shape
    return tensor.reshape(n, problem.groups, per_group, *spatial)


def _grouped_weights(problem: ConvProblem, w: Any) -> Any:
    """(K, Cg, *kernel) -> (G, Kg, Cg, *kernel)."""
    return w.reshape(problem.groups, problem.filters_per_group, problem.channels_per_group,
                     *w.shape[2:])


def _forward(problem: ConvProblem, x: Any, w: Any, xp: Any) -> Any:
    xpad = _grouped(problem, _padded(problem, x, xp), problem.channels_per_group)
    wg = _grouped_weights(problem, w)
    out = tuple(a.out for a in problem.spatial)
    y = xp.zeros((problem.batch, problem.groups, problem.filters_per_group, *out),
                 dtype=xp.float64)
    for tap, window in _taps(problem):
        y += _contract(xp, "ngc...,gkc->ngk...", xpad[(..., *window)], wg[(..., *tap)])
    return y.reshape(problem.output_shape)


def _backward_data(problem: ConvProblem, w: Any, dy: Any, xp: Any) -> Any:
    cg = problem.channels_per_group
    dyg = _grouped(problem, dy, problem.filters_per_group)
    wg = _grouped_weights(problem, w)
    padded = tuple(a.padded for a in problem.spatial)
    dxpad = xp.zeros((problem.batch, problem.groups, cg, *padded), dtype=xp.float64)
    for tap, window in _taps(problem):
        dxpad[(..., *window)] += _contract(xp, "ngk...,gkc->ngc...", dyg, wg[(..., *tap)])
    interior = tuple(slice(a.pad_begin, a.pad_begin + a.size) for a in problem.spatial)
    return xp.ascontiguousarray(dxpad[(..., *interior)].reshape(problem.input_shape))


def _backward_filter(problem: ConvProblem, x: Any, dy: Any, xp: Any) -> Any:
    xpad = _grouped(problem, _padded(problem, x, xp), problem.channels_per_group)
    dyg = _grouped(problem, dy, problem.filters_per_group)
    kernel = tuple(a.kernel for a in problem.spatial)
    dw = xp.zeros((problem.groups, problem.filters_per_group, problem.channels_per_group, *kernel),
                  dtype=xp.float64)
    # CuPy's einsum cannot sum `...` away, so the spatial axes are flattened into one named axis.
    dy_flat = dyg.reshape(*dyg.shape[:3], -1)
    for tap, window in _taps(problem):
        x_window = xpad[(..., *window)]
        dw[(..., *tap)] = _contract(xp, "ngcs,ngks->gkc",
                                    x_window.reshape(*x_window.shape[:3], -1), dy_flat)
    return dw.reshape(problem.weight_shape)
