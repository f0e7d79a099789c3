"""A convolution direction's GEMM floor on the CPU (issue 42): the time of the matrix product an
im2col convolution reduces to, on BLAS, with its operands ready, at the point's thread count.
An im2col row's `gemm_floor_ms` beside its own time tells what its gathers, copies and blocks
cost over the product they feed (the row over its floor), and the FMA peak (harness/cpu_peaks.py)
what the product itself leaves on the table.

Per group, with P the output pixels of every image (N x P x Q) and CRS a filter's taps:
  fwd         (K x CRS) @ (CRS x P)   -> y
  bwd_data    (CRS x K) @ (K x P)     -> the column matrix col2im folds into dx
  bwd_filter  (K x P) @ (P x CRS)     -> dW
Operands above FULL_BYTES are timed on a slice of the pixels and scaled up: a floor of the whole
VGG-16 conv2_1 forward would hold a 231 MB column matrix, and its time per pixel is the same.
fwd's product is y itself, whose channel rows lie an output plane (P x Q) apart in NCHW, so the
floor's result rows lie as far apart modulo SET_PERIOD (`result_row`): where the plane is a
multiple of 4 KiB (VGG-16 conv1_1's 224 x 224) every row of y starts at one offset of a page,
and the floor with rows so spaced read 36.2 ms against 25.4 with contiguous rows (one thread,
2-core AMD EPYC VM; 20.2 against 17.4 on two): im2col must write y so, and a GEMM into padded
scratch plus a copy into y gained 0-5% over writing y in place, so the dense slice was not a
floor this layer can reach (evidence/logs/im2col-floor-alias-cpu-amd-epyc-2026-11-28.txt).
Measured once per problem, direction, dtype and thread count in a process, outside the point's
timing (its prepare), the best of REPEATS products.
"""
from __future__ import annotations

import time
from functools import cache

import numpy as np

from harness.problem import ConvProblem
from harness.threads import limited

FULL_BYTES = 64 << 20       # the most a floor's operands and product take before it is sliced
REPEATS = 3
# Cache sets repeat every this many bytes (1 MiB, 8-way L2: 128 KiB; L1's and 4 KiB aliasing's
# periods divide it): rows as far apart modulo it meet the same set conflicts.
SET_PERIOD = 128 << 10


def operand_shapes(groups: int, kg: int, crs: int, direction: str,
                   pixels: int) -> tuple[tuple, tuple]:
    """The (groups, M, K) and (groups, K, N) operands of `direction`'s product over `pixels`,
    for `kg` filters and `crs` taps x channels a group."""
    return {"fwd": ((groups, kg, crs), (groups, crs, pixels)),
            "bwd_data": ((groups, crs, kg), (groups, kg, pixels)),
            "bwd_filter": ((groups, kg, pixels), (groups, pixels, crs))}[direction]


def result_row(direction: str, columns: int, plane: int, itemsize: int) -> int:
    """Elements between the floor's result rows for `columns` columns a row: fwd's congruent to
    an output plane of `plane` pixels modulo SET_PERIOD (y's channel rows); contiguous rows for
    the other directions, whose results (the column matrix, dW) are laid out as the algorithm
    chooses."""
    if direction != "fwd":
        return columns
    return columns + (plane - columns) % (SET_PERIOD // itemsize)


def floor_ms(p: ConvProblem, direction: str, dtype: type, threads: int) -> float:
    """The GEMM floor of `direction` for `p` in ms (module docstring)."""
    crs = p.channels_per_group * int(np.prod([a.kernel for a in p.spatial]))
    plane = int(np.prod([a.out for a in p.spatial]))
    return _floor_ms(p.groups, p.filters_per_group, crs, direction, np.dtype(dtype).name,
                     threads, p.batch * plane, plane)


@cache
def _floor_ms(groups: int, kg: int, crs: int, direction: str, dtype: str, threads: int,
              pixels: int, plane: int) -> float:
    item = np.dtype(dtype).itemsize
    # a pixel adds CRS values to one side of the product and K to the other (an operand, or
    # the result), whichever the direction
    per_pixel = item * groups * (crs + kg)
    taken = max(1, min(pixels, int(FULL_BYTES // per_pixel)))
    a_shape, b_shape = operand_shapes(groups, kg, crs, direction, taken)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    row = result_row(direction, b_shape[2], plane, item)
    out = np.empty((groups, a_shape[1], row), dtype)[..., :b_shape[2]]
    with limited(threads):
        np.matmul(a, b, out=out)
        best = float("inf")
        for _ in range(REPEATS):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    return best * 1e3 * pixels / taken
