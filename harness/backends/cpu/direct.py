"""Direct convolution: accumulate one kernel tap at a time, each tap a GEMM over a strided window.

No expanded copy of the input is built (unlike im2col): per tap, the window every output reads
is copied once (C*N*P*Q elements) and multiplied by that tap's (Kg x Cg) weight slice.
"""
from __future__ import annotations

import numpy as np

from harness.backends.base import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate, interior,
                                          nchw_to_cnhw, tap_major_weights, tap_window,
                                          workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point


def _taps(p: ConvProblem) -> list[tuple[int, int]]:
    return [(r, s) for r in range(p.kernel_h) for s in range(p.kernel_w)]


def _sizes(p: ConvProblem) -> tuple[int, int, int, int]:
    """(groups, channels per group, filters per group, output pixels of the whole batch)."""
    return p.groups, p.channels_per_group, p.filters_per_group, p.batch * p.out_h * p.out_w


class Direct(CpuAlgorithm):
    name = "direct"
    family = "direct"

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, cg, kg, npq = _sizes(p)
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)
        buf = allocate(point, dtype, {
            "xpad": (p.in_channels, p.batch, p.padded_h, p.padded_w),
            "window": (g, cg, npq), "acc": (g, kg, npq), "product": (g, kg, npq),
            "weights": (p.kernel_h, p.kernel_w, g, kg, cg)})
        xpad, window, acc, product, wt = (buf[k] for k in ("xpad", "window", "acc", "product",
                                                           "weights"))
        rows, cols = interior(p)
        window_cnhw = window.reshape(p.in_channels, p.batch, p.out_h, p.out_w)

        def kernel() -> None:
            xpad[:, :, rows, cols] = nchw_to_cnhw(x)
            np.copyto(wt, tap_major_weights(p, w))
            for i, (r, s) in enumerate(_taps(p)):
                tap_rows, tap_cols = tap_window(p, r, s)
                np.copyto(window_cnhw, xpad[:, :, tap_rows, tap_cols])
                np.matmul(wt[r, s], window, out=acc if i == 0 else product)
                if i:
                    np.add(acc, product, out=acc)
            np.copyto(y, nchw_to_cnhw(acc.reshape(p.out_channels, p.batch, p.out_h, p.out_w)))

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, cg, kg, npq = _sizes(p)
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        buf = allocate(point, dtype, {
            "dxpad": (p.in_channels, p.batch, p.padded_h, p.padded_w),
            "dy": (g, kg, npq), "product": (g, cg, npq),
            "weights": (p.kernel_h, p.kernel_w, g, cg, kg)})
        dxpad, dyt, product, wt = (buf[k] for k in ("dxpad", "dy", "product", "weights"))
        rows, cols = interior(p)
        product_cnhw = product.reshape(p.in_channels, p.batch, p.out_h, p.out_w)

        def kernel() -> None:
            np.copyto(dyt.reshape(p.out_channels, p.batch, p.out_h, p.out_w), nchw_to_cnhw(dy))
            np.copyto(wt, tap_major_weights(p, w).swapaxes(3, 4))
            dxpad.fill(0)
            for r, s in _taps(p):
                np.matmul(wt[r, s], dyt, out=product)
                tap_rows, tap_cols = tap_window(p, r, s)
                dxpad[:, :, tap_rows, tap_cols] += product_cnhw
            np.copyto(dx, nchw_to_cnhw(dxpad[:, :, rows, cols]))

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, cg, kg, npq = _sizes(p)
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)
        buf = allocate(point, dtype, {
            "xpad": (p.in_channels, p.batch, p.padded_h, p.padded_w),
            "window": (g, cg, npq), "dy": (g, kg, npq),
            "dw": (p.kernel_h, p.kernel_w, g, kg, cg)})
        xpad, window, dyt, dwt = (buf[k] for k in ("xpad", "window", "dy", "dw"))
        rows, cols = interior(p)
        window_cnhw = window.reshape(p.in_channels, p.batch, p.out_h, p.out_w)

        def kernel() -> None:
            xpad[:, :, rows, cols] = nchw_to_cnhw(x)
            np.copyto(dyt.reshape(p.out_channels, p.batch, p.out_h, p.out_w), nchw_to_cnhw(dy))
            for r, s in _taps(p):
                tap_rows, tap_cols = tap_window(p, r, s)
                np.copyto(window_cnhw, xpad[:, :, tap_rows, tap_cols])
                # (G, Kg, NPQ) @ (G, NPQ, Cg): the transposed view is a valid BLAS operand.
                np.matmul(dyt, window.swapaxes(1, 2), out=dwt[r, s])
            np.copyto(tap_major_weights(p, dw), dwt)

        return CpuPrepared(dw, kernel, workspace_of(buf))
