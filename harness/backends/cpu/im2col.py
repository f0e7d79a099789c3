"""im2col + GEMM: copy every receptive field into a column matrix, then one BLAS GEMM per block.

Speed comes from three choices (the naive sliding_window_view version spends 8x the GEMM's time
copying, shared/reference/gpu-findings.md):
- blocks of images and output rows whose column matrix stays in cache (`BLOCK_BYTES`), so the
  GEMM reads what the copy just wrote instead of going back to memory;
- the operand order W (K, C*R*S) @ col (C*R*S, pixels) writes each block straight into NCHW
  order, with no transpose after the GEMM;
- at stride 1 a "wide" column matrix over the padded width: with every padded row kept, the
  rows a tap reads are one contiguous run of the flattened plane, so one copy call per block
  fills the matrix with long memcpy-like runs. The GEMM does Wp/Q more work and the extra
  columns are dropped; used only where that waste is small (`WIDE_MAX_WASTE`).
"""
from __future__ import annotations

import math
from typing import Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness.backends.base import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate, interior,
                                          workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point

# Column-matrix block size. Half the 2 MiB per-core L2 of the development machine measured
# best; a block much larger spills to memory, much smaller makes GEMMs too thin to be efficient.
BLOCK_BYTES = 8 << 20
# Largest padded-width/width ratio for which the wide column matrix pays (measured: 58/56 and
# 30/28 win clearly, 9/7 loses to the exact windows).
WIDE_MAX_WASTE = 1.2


def _wide(p: ConvProblem) -> bool:
    return p.stride_h == 1 and p.stride_w == 1 and p.padded_w <= WIDE_MAX_WASTE * p.out_w


def _split(total: int, per_block: int) -> list[tuple[int, int]]:
    """(start, length) of near-equal blocks of at most `per_block` items covering `total`."""
    count = -(-total // max(1, min(per_block, total)))
    size = -(-total // count)
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def _blocks(p: ConvProblem, row_bytes: int, whole_rows: bool) -> tuple[list, list]:
    """Image blocks and output-row blocks whose column matrix fits BLOCK_BYTES."""
    rows = p.out_h if whole_rows else max(1, BLOCK_BYTES // row_bytes)
    if rows < p.out_h:
        return _split(p.batch, 1), _split(p.out_h, rows)
    images = max(1, BLOCK_BYTES // (row_bytes * p.out_h))
    return _split(p.batch, images), _split(p.out_h, p.out_h)


def _max_len(blocks: list[tuple[int, int]]) -> int:
    return max(length for _, length in blocks)


def _row_slice(p: ConvProblem, r: int, p0: int, rows: int) -> slice:
    top = p0 * p.stride_h + r * p.dilation_h
    return slice(top, top + (rows - 1) * p.stride_h + 1, p.stride_h)


def _col_slice(p: ConvProblem, s: int) -> slice:
    left = s * p.dilation_w
    return slice(left, left + (p.out_w - 1) * p.stride_w + 1, p.stride_w)


def _fill_windows(p: ConvProblem, col: np.ndarray, xpad: np.ndarray, n0: int, images: int,
                  p0: int, rows: int) -> None:
    """col (C, R, S, images, rows, Q) <- one strided copy per tap."""
    for r in range(p.kernel_h):
        row_slice = _row_slice(p, r, p0, rows)
        for s in range(p.kernel_w):
            window = xpad[n0:n0 + images, :, row_slice, _col_slice(p, s)]
            np.copyto(col[:, r, s], window.transpose(1, 0, 2, 3))


def _fill_wide(p: ConvProblem, col: np.ndarray, xpad: np.ndarray, n0: int, images: int,
               p0: int, rows: int) -> None:
    """col (C, R, S, images, rows*Wp) <- one copy of contiguous runs (stride 1 only).

    xpad carries one spare zero row per image: the last tap's run overruns the last padded row
    by (S-1)*dilation_w elements, which land in the dropped columns."""
    item = xpad.itemsize
    plane = xpad.shape[2] * xpad.shape[3]
    wp = p.padded_w
    runs = as_strided(xpad[n0:, :, p0:], shape=col.shape,
                      strides=(plane * item, p.dilation_h * wp * item, p.dilation_w * item,
                               p.in_channels * plane * item, item), writeable=False)
    np.copyto(col, runs)


class Im2col(CpuAlgorithm):
    name = "im2col"
    family = "gemm"

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, kg = p.groups, p.filters_per_group
        crs = p.in_channels * p.kernel_h * p.kernel_w
        wide = _wide(p)
        width = p.padded_w if wide else p.out_w
        images, row_blocks = _blocks(p, crs * width * np.dtype(dtype).itemsize, False)
        length = _max_len(images) * _max_len(row_blocks) * width
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        wmat = w.reshape(g, kg, crs // g)
        y = np.empty(p.output_shape, dtype)
        buf = allocate(point, dtype, {
            "xpad": (p.batch, p.in_channels, p.padded_h + int(wide), p.padded_w),
            "col": (crs * length,), "out": (p.out_channels * length,)})
        xpad, col_flat, out_flat = buf["xpad"], buf["col"], buf["out"]
        rows_in, cols_in = interior(p)
        fill = _fill_wide if wide else _fill_windows

        def kernel() -> None:
            xpad[:, :, rows_in, cols_in] = x
            for n0, ni in images:
                for p0, pr in row_blocks:
                    cols = ni * pr * width
                    col = col_flat[:crs * cols]
                    shape = ((p.in_channels, p.kernel_h, p.kernel_w, ni, pr * width) if wide else
                             (p.in_channels, p.kernel_h, p.kernel_w, ni, pr, width))
                    fill(p, col.reshape(shape), xpad, n0, ni, p0, pr)
                    out = out_flat[:p.out_channels * cols].reshape(g, kg, cols)
                    np.matmul(wmat, col.reshape(g, crs // g, cols), out=out)
                    block = out.reshape(p.out_channels, ni, pr, width)[..., :p.out_w]
                    np.copyto(y[n0:n0 + ni, :, p0:p0 + pr], block.transpose(1, 0, 2, 3))

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """col2im: dcol = W^T dy per block of images, then one strided add per tap."""
        p = point.problem
        g, kg, cg = p.groups, p.filters_per_group, p.channels_per_group
        crs = p.in_channels * p.kernel_h * p.kernel_w
        images, _ = _blocks(p, crs * p.out_w * np.dtype(dtype).itemsize, True)
        length = _max_len(images) * p.out_h * p.out_w
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        wmat_t = w.reshape(g, kg, crs // g).swapaxes(1, 2)
        dx = np.empty(p.input_shape, dtype)
        buf = allocate(point, dtype, {
            "dxpad": (p.batch, p.in_channels, p.padded_h, p.padded_w),
            "dcol": (crs * length,), "dy": (p.out_channels * length,)})
        dxpad, dcol_flat, dy_flat = buf["dxpad"], buf["dcol"], buf["dy"]
        rows_in, cols_in = interior(p)

        def kernel() -> None:
            dxpad.fill(0)
            for n0, ni in images:
                cols = ni * p.out_h * p.out_w
                dyb = dy_flat[:p.out_channels * cols]
                np.copyto(dyb.reshape(p.out_channels, ni, p.out_h, p.out_w),
                          dy[n0:n0 + ni].transpose(1, 0, 2, 3))
                dcol = dcol_flat[:crs * cols]
                np.matmul(wmat_t, dyb.reshape(g, kg, cols), out=dcol.reshape(g, crs // g, cols))
                taps = dcol.reshape(p.in_channels, p.kernel_h, p.kernel_w, ni, p.out_h, p.out_w)
                for r in range(p.kernel_h):
                    row_slice = _row_slice(p, r, 0, p.out_h)
                    for s in range(p.kernel_w):
                        target = dxpad[n0:n0 + ni, :, row_slice, _col_slice(p, s)]
                        target += taps[:, r, s].transpose(1, 0, 2, 3)
            np.copyto(dx, dxpad[:, :, rows_in, cols_in])

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """dW = dy col^T, accumulated over blocks of images."""
        p = point.problem
        g, kg = p.groups, p.filters_per_group
        crs = p.in_channels * p.kernel_h * p.kernel_w
        images, _ = _blocks(p, crs * p.out_w * np.dtype(dtype).itemsize, True)
        length = _max_len(images) * p.out_h * p.out_w
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)
        buf = allocate(point, dtype, {
            "xpad": (p.batch, p.in_channels, p.padded_h, p.padded_w),
            "col": (crs * length,), "dy": (p.out_channels * length,),
            "partial": (g, kg, crs // g)})
        xpad, col_flat, dy_flat, partial = buf["xpad"], buf["col"], buf["dy"], buf["partial"]
        dw_mat = dw.reshape(g, kg, crs // g)
        rows_in, cols_in = interior(p)

        def kernel() -> None:
            xpad[:, :, rows_in, cols_in] = x
            for i, (n0, ni) in enumerate(images):
                cols = ni * p.out_h * p.out_w
                col = col_flat[:crs * cols]
                _fill_windows(p, col.reshape(p.in_channels, p.kernel_h, p.kernel_w, ni,
                                             p.out_h, p.out_w), xpad, n0, ni, 0, p.out_h)
                dyb = dy_flat[:p.out_channels * cols]
                np.copyto(dyb.reshape(p.out_channels, ni, p.out_h, p.out_w),
                          dy[n0:n0 + ni].transpose(1, 0, 2, 3))
                np.matmul(dyb.reshape(g, kg, cols), col.reshape(g, crs // g, cols).swapaxes(1, 2),
                          out=dw_mat if i == 0 else partial)
                if i:
                    np.add(dw_mat, partial, out=dw_mat)

        return CpuPrepared(dw, kernel, workspace_of(buf))
