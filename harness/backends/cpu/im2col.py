"""im2col + GEMM: copy every receptive field into a column matrix, then one BLAS GEMM per block.

Speed comes from three choices (the naive sliding_window_view version spends 8x the GEMM's time
copying, shared/reference/gpu-findings.md):
- blocks of images and output rows (`BLOCK_BYTES`) big enough for an efficient GEMM yet small
  enough that the GEMM finds in cache what the copy just wrote;
- the operand order W (K, C*R*S) @ col (C*R*S, pixels) leaves each block in NCHW order, so
  the copy into y only drops the gap columns, with no transpose after the GEMM;
- at stride 1, a "flat" column matrix: the input is laid out as rows of [gap zeros | input
  row], so what a tap reads for a block of output rows is one contiguous run of the flattened
  plane (a run that leaves a row on either side lands in a gap, i.e. reads the padding), and
  one copy call per block fills the matrix with long memcpy-like runs. Each row yields W + gap
  outputs of which Q are kept (57 for 56 at ResNet's res2); used where that waste is small
  (`WIDE_MAX_WASTE`), per-tap window copies elsewhere.

Backward data at stride 1 reuses all of this: it is the forward correlation of dy with the
kernel rotated by 180 degrees (`_transposed`, `_rotated`); col2im remains for stride > 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from harness.reference import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate, interior, split,
                                          tap_cols, tap_rows, workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point

# Column-matrix block size, measured on the 2-core development VM (2 MiB L2 per core, shared
# L3): 4-8 MiB blocks ran the ResNet-50 3x3 layers fastest; 1 MiB blocks make the GEMMs too thin
# (about 400 columns) and lost 25%, 16 MiB and more lost 10-30% to memory traffic.
BLOCK_BYTES = 8 << 20
# Largest (W + gap)/Q ratio for which the flat column matrix pays. Measured with the full
# padding as the gap: 58/56 won by 25%, 30/28 broke even, 16/14 and 9/7 lost 10-20% to the
# exact windows; with the shared one-column gap (57/56, 29/28, 15/14, 8/7) the differences
# sat inside the machine's noise.
WIDE_MAX_WASTE = 1.1


@dataclass(frozen=True)
class _Plane:
    """The buffer a flat column matrix is copied from: `rows` x `width` per image and channel,
    the input at (top, left), and the flat offset of output (0, 0)'s first tap."""
    rows: int
    width: int
    top: int
    left: int
    start: int

    @classmethod
    def of(cls, p: ConvProblem) -> "_Plane | None":
        """The flat layout for this problem, or None where only per-tap windows work."""
        if (p.stride_h, p.stride_w) != (1, 1):
            return None
        # A gap of max(pad_left, pad_right) zeros serves as the right padding of one row and
        # the left padding of the next; it must also leave room for Q outputs per row.
        gap = max(p.pad_left, p.pad_right, p.out_w - p.in_w)
        if p.in_w + gap > WIDE_MAX_WASTE * p.out_w:
            return None
        # One spare zero row below takes the last tap's overrun into dropped columns.
        return cls(p.padded_h + 1, p.in_w + gap, p.pad_top, gap, gap - p.pad_left)

    def fill(self, p: ConvProblem, col: np.ndarray, xbuf: np.ndarray, n0: int, p0: int) -> None:
        """col (C, R, S, images, rows*width) <- one copy of contiguous runs."""
        item, plane = xbuf.itemsize, self.rows * self.width
        base = xbuf.reshape(-1)[(n0 * p.in_channels * plane + p0 * self.width + self.start):]
        runs = as_strided(base, shape=col.shape, writeable=False,
                          strides=(plane * item, p.dilation_h * self.width * item,
                                   p.dilation_w * item, p.in_channels * plane * item, item))
        np.copyto(col, runs)


def _blocks(p: ConvProblem, row_bytes: int, whole_rows: bool) -> tuple[list, list]:
    """Image blocks and output-row blocks whose column matrix fits BLOCK_BYTES."""
    rows = p.out_h if whole_rows else max(1, BLOCK_BYTES // row_bytes)
    if rows < p.out_h:
        return split(p.batch, 1), split(p.out_h, rows)
    images = max(1, BLOCK_BYTES // (row_bytes * p.out_h))
    return split(p.batch, images), split(p.out_h, p.out_h)


def _max_len(blocks: list[tuple[int, int]]) -> int:
    return max(length for _, length in blocks)


def _fill_windows(p: ConvProblem, col: np.ndarray, xpad: np.ndarray, n0: int, images: int,
                  p0: int, rows: int) -> None:
    """col (C, R, S, images, rows, Q) <- one strided copy per tap."""
    for r in range(p.kernel_h):
        row_slice = tap_rows(p, r, p0, rows)
        for s in range(p.kernel_w):
            window = xpad[n0:n0 + images, :, row_slice, tap_cols(p, s)]
            np.copyto(col[:, r, s], window.transpose(1, 0, 2, 3))


def _correlate(point: Point, p: ConvProblem, dtype: type, x: np.ndarray, w: np.ndarray,
               derived_w: bool = False
               ) -> tuple[np.ndarray, Callable[[], None], dict[str, np.ndarray]]:
    """Forward correlation of problem p: x (p.input_shape) with w -> (y, kernel, buffers).

    `w` holds p.weight_shape's elements in C order. With `derived_w` it is a view (bwd_data's
    rotated kernel) copied once, at prepare, into a buffer counted as workspace: it is scratch
    the algorithm made, and the GEMM wants a contiguous operand."""
    g, kg, k = p.groups, p.filters_per_group, p.out_channels
    crs = p.in_channels * p.kernel_h * p.kernel_w
    flat = _Plane.of(p)
    width = flat.width if flat else p.out_w
    images, row_blocks = _blocks(p, crs * width * np.dtype(dtype).itemsize, False)
    length = _max_len(images) * _max_len(row_blocks) * width
    y = np.empty(p.output_shape, dtype)
    xshape = ((p.batch, p.in_channels, flat.rows, flat.width) if flat else
              (p.batch, p.in_channels, p.padded_h, p.padded_w))
    shapes = {"x": xshape, "col": (crs * length,), "out": (k * length,)}
    buf = allocate(point, dtype, {**shapes, "w": p.weight_shape} if derived_w else shapes)
    if derived_w:
        np.copyto(buf["w"].reshape(w.shape), w)
    wmat = (buf["w"] if derived_w else w).reshape(g, kg, crs // g)
    xbuf, col_flat, out_flat = buf["x"], buf["col"], buf["out"]
    top, left = (flat.top, flat.left) if flat else (p.pad_top, p.pad_left)

    def kernel() -> None:
        xbuf[:, :, top:top + p.in_h, left:left + p.in_w] = x
        for n0, ni in images:
            for p0, pr in row_blocks:
                cols = ni * pr * width
                col = col_flat[:crs * cols]
                if flat:
                    flat.fill(p, col.reshape(p.in_channels, p.kernel_h, p.kernel_w, ni,
                                             pr * width), xbuf, n0, p0)
                else:
                    _fill_windows(p, col.reshape(p.in_channels, p.kernel_h, p.kernel_w, ni,
                                                 pr, width), xbuf, n0, ni, p0, pr)
                out = out_flat[:k * cols].reshape(g, kg, cols)
                np.matmul(wmat, col.reshape(g, crs // g, cols), out=out)
                block = out.reshape(k, ni, pr, width)[..., :p.out_w]
                np.copyto(y[n0:n0 + ni, :, p0:p0 + pr], block.transpose(1, 0, 2, 3))

    return y, kernel, buf


def _transposed(p: ConvProblem) -> tuple[ConvProblem, slice, slice]:
    """The stride-1 problem whose forward correlation is p's backward data, and the rows and
    columns of dy it reads.

    dy is padded by dilation*(k-1) - pad on each side. Where a pad exceeds the dilated kernel's
    reach that is negative: the outermost dy rows/columns then see only padding and feed no dx,
    so they are cropped instead."""
    reach_h, reach_w = p.effective_kernel_h - 1, p.effective_kernel_w - 1
    top, bottom = reach_h - p.pad_top, reach_h - p.pad_bottom
    left, right = reach_w - p.pad_left, reach_w - p.pad_right
    rows = slice(max(0, -top), p.out_h - max(0, -bottom))
    cols = slice(max(0, -left), p.out_w - max(0, -right))
    tp = ConvProblem(p.batch, p.out_channels, rows.stop - rows.start, cols.stop - cols.start,
                     p.in_channels, p.kernel_h, p.kernel_w, pad_top=max(0, top),
                     pad_left=max(0, left), pad_bottom=max(0, bottom), pad_right=max(0, right),
                     dilation_h=p.dilation_h, dilation_w=p.dilation_w, groups=p.groups,
                     name=p.name)
    return tp, rows, cols


def _rotated(p: ConvProblem, w: np.ndarray) -> np.ndarray:
    """W (K, Cg, R, S) -> view (G, Cg, Kg, R, S) flipped in R and S: the weights of the
    transposed problem, whose inputs are p's K filters and outputs p's C channels, per group."""
    w5 = w.reshape(p.groups, p.filters_per_group, p.channels_per_group, p.kernel_h, p.kernel_w)
    return w5[..., ::-1, ::-1].transpose(0, 2, 1, 3, 4)


def _col2im(point: Point, p: ConvProblem, w: np.ndarray, dy: np.ndarray, dtype: type
            ) -> CpuPrepared:
    """dcol = W^T dy per block of images, then one strided add per tap into padded dx."""
    g, kg = p.groups, p.filters_per_group
    crs = p.in_channels * p.kernel_h * p.kernel_w
    images, _ = _blocks(p, crs * p.out_w * np.dtype(dtype).itemsize, True)
    length = _max_len(images) * p.out_h * p.out_w
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
                row_slice = tap_rows(p, r, 0, p.out_h)
                for s in range(p.kernel_w):
                    target = dxpad[n0:n0 + ni, :, row_slice, tap_cols(p, s)]
                    target += taps[:, r, s].transpose(1, 0, 2, 3)
        np.copyto(dx, dxpad[:, :, rows_in, cols_in])

    return CpuPrepared(dx, kernel, workspace_of(buf))


class Im2col(CpuAlgorithm):
    name = "im2col"
    family = "gemm"
    description = "receptive fields copied into a column matrix, then one BLAS GEMM per block"

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        y, kernel, buf = _correlate(point, point.problem, dtype, data.x.astype(dtype),
                                    data.w.astype(dtype))
        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """Stride 1: dx is the forward correlation of dy, padded by dilation*(k-1) - pad, with
        W rotated by 180 degrees and its channel axes swapped per group, through fwd's im2col +
        GEMM: no col2im adds (they were a third of the time at ResNet-50 res2a).

        Stride > 1 keeps col2im (dcol = W^T dy, one strided add per tap): the transposed
        problem would need a zero-dilated dy. Splitting strides into phases is a later step.
        A 1x1 kernel keeps it too: its col2im is one add, and the correlation's extra copy of dy
        made it ~6% slower (ResNet-50 res3a_branch2c, 2-core VM)."""
        p = point.problem
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        if (p.stride_h, p.stride_w) != (1, 1) or (p.kernel_h, p.kernel_w) == (1, 1):
            return _col2im(point, p, w, dy, dtype)
        tp, rows, cols = _transposed(p)
        dx, kernel, buf = _correlate(point, tp, dtype, dy[:, :, rows, cols],
                                     _rotated(p, w), derived_w=True)
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
