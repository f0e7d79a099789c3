"""Direct convolution: accumulate one kernel tap at a time, each tap a GEMM over a strided window.

No expanded copy of the input is built (unlike im2col): per tap, the window that every output
reads is copied (C values per output pixel) and multiplied by that tap's (K/g x C/g) weights,
and the product is added into the output. Work goes in blocks of images and output rows small
enough (`BLOCK_BYTES`) that the window, the product and the accumulator stay in cache across the
R*S taps: unblocked, a 1-channel 5x20 DeepSpeech layer spends its time streaming a 27 MB
accumulator through memory 100 times (0.6 GFLOP/s).
"""
from __future__ import annotations

import numpy as np

from harness.reference import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate, interior, split,
                                          tap_cols, tap_major_weights, tap_rows, workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point

# Window + product + accumulator of one block: about half the 2 MiB per-core L2.
BLOCK_BYTES = 1 << 20


def _taps(p: ConvProblem) -> list[tuple[int, int]]:
    return [(r, s) for r in range(p.kernel_h) for s in range(p.kernel_w)]


Block = tuple[int, int, int, int]  # first image, images, first output row, rows


def _blocks(p: ConvProblem, bytes_per_pixel: int, whole_rows: bool) -> list[Block]:
    """(first image, images, first output row, rows) blocks of about BLOCK_BYTES."""
    row_bytes = bytes_per_pixel * p.out_w
    rows = p.out_h if whole_rows else max(1, BLOCK_BYTES // row_bytes)
    if rows < p.out_h:
        return [(n0, 1, p0, pr) for n0, _ in split(p.batch, 1) for p0, pr in split(p.out_h, rows)]
    images = max(1, BLOCK_BYTES // (row_bytes * p.out_h))
    return [(n0, ni, 0, p.out_h) for n0, ni in split(p.batch, images)]


def _largest(blocks: list[Block], p: ConvProblem) -> int:
    return max(ni * pr for _, ni, _, pr in blocks) * p.out_w


def _gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b per group; with one input channel per group an outer product, done by
    broadcasting: BLAS threads cost more than a K=1 GEMM's arithmetic (1.6 s -> 0.1 s on
    DeepSpeech layer 1)."""
    if a.shape[-1] == 1:
        np.multiply(a, b, out=out)
    else:
        np.matmul(a, b, out=out)


def _window(p: ConvProblem, xpad: np.ndarray, block: Block, r: int, s: int) -> np.ndarray:
    """(C, images, rows, Q) view of what tap (r, s) reads for the block's outputs."""
    n0, ni, p0, pr = block
    return xpad[n0:n0 + ni, :, tap_rows(p, r, p0, pr), tap_cols(p, s)].transpose(1, 0, 2, 3)


class Direct(CpuAlgorithm):
    name = "direct"
    family = "direct"
    description = "one GEMM per kernel tap over a strided window, no expanded copy of the input"

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        item = np.dtype(dtype).itemsize
        blocks = _blocks(p, (p.in_channels + 2 * p.out_channels) * item, False)
        cols = _largest(blocks, p)
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)
        buf = allocate(point, dtype, {
            "xpad": (p.batch, p.in_channels, p.padded_h, p.padded_w),
            "window": (p.in_channels * cols,), "acc": (p.out_channels * cols,),
            "product": (p.out_channels * cols,), "weights": (p.kernel_h, p.kernel_w, g, kg, cg)})
        xpad, wt = buf["xpad"], buf["weights"]
        rows, cols_in = interior(p)

        def kernel() -> None:
            xpad[:, :, rows, cols_in] = x
            np.copyto(wt, tap_major_weights(p, w))
            for block in blocks:
                _, ni, p0, pr = block
                size = ni * pr * p.out_w
                window = buf["window"][:p.in_channels * size]
                acc = buf["acc"][:p.out_channels * size].reshape(g, kg, size)
                product = buf["product"][:p.out_channels * size].reshape(g, kg, size)
                for i, (r, s) in enumerate(_taps(p)):
                    np.copyto(window.reshape(p.in_channels, ni, pr, p.out_w),
                              _window(p, xpad, block, r, s))
                    _gemm(wt[r, s], window.reshape(g, cg, size), acc if i == 0 else product)
                    if i:
                        np.add(acc, product, out=acc)
                n0 = block[0]
                np.copyto(y[n0:n0 + ni, :, p0:p0 + pr],
                          acc.reshape(p.out_channels, ni, pr, p.out_w).transpose(1, 0, 2, 3))

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """Per block of images: dy block times each tap's transposed weights, added into the
        input positions that tap read."""
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        item = np.dtype(dtype).itemsize
        blocks = _blocks(p, (p.in_channels + p.out_channels) * item, True)
        cols = _largest(blocks, p)
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        buf = allocate(point, dtype, {
            "dxpad": (p.batch, p.in_channels, p.padded_h, p.padded_w),
            "dy": (p.out_channels * cols,), "product": (p.in_channels * cols,),
            "weights": (p.kernel_h, p.kernel_w, g, cg, kg)})
        dxpad, wt = buf["dxpad"], buf["weights"]
        rows, cols_in = interior(p)

        def kernel() -> None:
            np.copyto(wt, tap_major_weights(p, w).swapaxes(3, 4))
            dxpad.fill(0)
            for block in blocks:
                n0, ni, _, _ = block
                size = ni * p.out_h * p.out_w
                dyb = buf["dy"][:p.out_channels * size]
                np.copyto(dyb.reshape(p.out_channels, ni, p.out_h, p.out_w),
                          dy[n0:n0 + ni].transpose(1, 0, 2, 3))
                product = buf["product"][:p.in_channels * size]
                for r, s in _taps(p):
                    np.matmul(wt[r, s], dyb.reshape(g, kg, size), out=product.reshape(g, cg, size))
                    target = _window(p, dxpad, block, r, s)
                    target += product.reshape(p.in_channels, ni, p.out_h, p.out_w)
            np.copyto(dx, dxpad[:, :, rows, cols_in])

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        """Per block of images and tap: dW[tap] += dy block @ window^T."""
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        item = np.dtype(dtype).itemsize
        blocks = _blocks(p, (p.in_channels + p.out_channels) * item, True)
        cols = _largest(blocks, p)
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)
        buf = allocate(point, dtype, {
            "xpad": (p.batch, p.in_channels, p.padded_h, p.padded_w),
            "window": (p.in_channels * cols,), "dy": (p.out_channels * cols,),
            "dw": (p.kernel_h, p.kernel_w, g, kg, cg), "part": (g, kg, cg)})
        xpad, dwt, part = buf["xpad"], buf["dw"], buf["part"]
        rows, cols_in = interior(p)

        def kernel() -> None:
            xpad[:, :, rows, cols_in] = x
            for b, block in enumerate(blocks):
                n0, ni, _, _ = block
                size = ni * p.out_h * p.out_w
                dyb = buf["dy"][:p.out_channels * size]
                np.copyto(dyb.reshape(p.out_channels, ni, p.out_h, p.out_w),
                          dy[n0:n0 + ni].transpose(1, 0, 2, 3))
                window = buf["window"][:p.in_channels * size]
                for r, s in _taps(p):
                    np.copyto(window.reshape(p.in_channels, ni, p.out_h, p.out_w),
                              _window(p, xpad, block, r, s))
                    # (G, Kg, pixels) @ (G, pixels, Cg): the transposed view is a BLAS operand.
                    np.matmul(dyb.reshape(g, kg, size), window.reshape(g, cg, size).swapaxes(1, 2),
                              out=dwt[r, s] if b == 0 else part)
                    if b:
                        np.add(dwt[r, s], part, out=dwt[r, s])
            np.copyto(tap_major_weights(p, dw), dwt)

        return CpuPrepared(dw, kernel, workspace_of(buf))
