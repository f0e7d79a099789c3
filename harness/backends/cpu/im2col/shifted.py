"""Shifted GEMMs: im2col's correlation without a column matrix (algorithm.py chooses it
by `shifted_pays`).

In a flat phase plane (Columns: rows of [gap zeros | input row], images one after another per
channel) the rows of the column matrix that tap t of a channel owns are one contiguous run of the
plane, starting at `Columns.tap_offsets[t]`: at stride 1, tap (r, s) reads from r*width + s. So
y = sum over taps of W_t (K, C) @ plane[:, offset_t : offset_t + columns], one accumulating
GEMM per tap (blas.gemm_into, BLAS beta = 1) reading the plane in place. The column matrix's
copy goes: BLAS packs its operand anyway, and packing the plane's runs costs what packing the
column matrix did. What stays: each tap's GEMM is only C deep, a GEMM call per tap, group and
block, and the plane's waste computed and dropped (its gap columns, and the rows below out_h of
each image where a block spans several images).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness.backends.cpu.blas import gemm_into
from harness.backends.cpu.im2col.columns import Columns
from harness.problem import ConvProblem

# Shifted GEMMs pay from this many channels per group (each tap's GEMM depth) up: shallower
# GEMMs, one per tap, lose to the column matrix's one deep GEMM. Study:
# evidence/logs/im2col-issue16-cpu-intel-xeon-2026-11-24.txt
MIN_CHANNELS = 16
# ... and from this many GEMM columns a block up: below, a call per tap and group costs more
# than the copy it saves (same study).
MIN_COLUMNS = 512


def shifted_pays(p: ConvProblem, columns: Columns, dtype: type, block_columns: int) -> bool:
    """Deep and wide enough GEMMs per tap, little gap waste in the flat plane, a column matrix
    to save (a 1x1 kernel's plane may be one already: ResNet-50's 1x1 layers, fwd and bwd_data,
    ran 0.99-1.00x in geomean, 1.04-1.05x on two), and a BLAS to accumulate with."""
    return (p.channels_per_group >= MIN_CHANNELS and block_columns >= MIN_COLUMNS
            and columns.little_waste and not columns.plane_is_column_matrix
            and gemm_into(dtype) is not None)


def weights_shape(p: ConvProblem) -> tuple[int, ...]:
    """One (Kg, Cg) GEMM operand per tap (in the column matrix's tap order) and group."""
    return (p.kernel_h * p.kernel_w, p.groups, p.filters_per_group, p.channels_per_group)


def weights_into(columns: Columns, w: np.ndarray, target: np.ndarray) -> None:
    p = columns.p
    per_tap = np.reshape(w, (p.groups, p.filters_per_group, p.channels_per_group, -1))
    np.copyto(target, per_tap.transpose(3, 0, 1, 2)[columns.tap_order])


def span(columns: Columns, images: int, rows: int) -> int:
    """GEMM columns of a block of `images` whole planes, the last one's first `rows` rows."""
    return ((images - 1) * columns.rows + rows) * columns.width


def bind(columns: Columns, blocks: list[tuple[int, int, int, int]], x: np.ndarray,
         w_taps: np.ndarray, y: np.ndarray, planes: np.ndarray,
         out_flat: np.ndarray) -> Callable[[], None]:
    """The launch: y <- x (*) w, block by block ((n0, images, p0, rows) of y), through planes
    and out_flat (K x span of the largest block)."""
    p = columns.p
    kg, cg, k = p.filters_per_group, p.channels_per_group, p.out_channels
    gemm = gemm_into(y.dtype)
    width, image = columns.width, columns.rows * columns.width
    flat = planes.reshape(planes.shape[0], p.in_channels, p.batch * image)
    groups = [(slice(i * kg, (i + 1) * kg), slice(i * cg, (i + 1) * cg))
              for i in range(p.groups)]
    taps = list(enumerate(columns.tap_offsets))

    def kernel() -> None:
        columns.fill_planes(planes, x)
        for n0, ni, p0, pr in blocks:
            cols = span(columns, ni, pr)
            first = n0 * image + p0 * width
            out = out_flat[:k * cols].reshape(k, cols)
            for t, (index, offset) in taps:
                run = flat[index, :, first + offset:first + offset + cols]
                for i, (filters, channels) in enumerate(groups):
                    gemm(w_taps[t, i], run[channels], out[filters], t > 0)
            # The kept outputs: Q columns of the first pr rows of each image's plane.
            kept = as_strided(out, (k, ni, pr, p.out_w), (out.strides[0], image * out.itemsize,
                                                          width * out.itemsize, out.itemsize),
                              writeable=False)
            np.copyto(y[n0:n0 + ni, :, p0:p0 + pr], kept.transpose(1, 0, 2, 3))

    return kernel
