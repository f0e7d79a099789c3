"""The compiled direct convolution (issue 42): numba kernels for the three directions, on
unpadded NCDHW tensors (a 2-D problem is depth 1), any groups, stride, dilation and asymmetric
padding. Imported only through harness/backends/cpu/compiled.py, which sets numba up first.

No padded copy is made: for each kernel tap the range of outputs that reads real input is
computed once (`_valid`), so the innermost loop, over output columns, has no bounds test and
vectorizes (contiguous at stride 1). fastmath is limited to `contract` (fused multiply-adds:
one rounding where two would be) and `reassoc` (sums reordered into vector lanes); the float64
check holds these to the same tolerance as every algorithm.

    fwd:        y[n, k, o]  = sum_{c, t} w[k, c, t] x[n, g*Cg + c, o*s + t*d - p]
    bwd_data:   dx[n, c, i] = sum_{k in group, t, o: o*s + t*d - p = i} w[k, c', t] dy[n, k, o]
    bwd_filter: dw[k, c, t] = sum_{n, o} dy[n, k, o] x[n, g*Cg + c, o*s + t*d - p]
"""
from __future__ import annotations

import numba
import numpy as np

FLAGS = {"contract", "reassoc"}
# Output channels computed together in fwd: each input value loaded once feeds this many
# accumulators (more would spill the vector registers a row of them needs).
BLOCK_K = 4


@numba.njit(cache=True, inline="always")
def _valid(out: int, size: int, stride: int, tap_offset: int) -> tuple:
    """[lo, hi): the outputs o with 0 <= o*stride + tap_offset < size."""
    lo = 0
    if tap_offset < 0:
        lo = (-tap_offset + stride - 1) // stride
    hi = out
    last = size - 1 - tap_offset
    if last < 0:
        return 0, 0
    hi = min(out, last // stride + 1)
    return lo, max(lo, hi)


@numba.njit(parallel=True, cache=True, fastmath=FLAGS)
def forward(x, w, y, stride, dilation, pad, groups):
    n_images, channels, depth, height, width = x.shape
    filters, cg, kd_n, kh_n, kw_n = w.shape
    _, _, out_d, out_h, out_w = y.shape
    kg = filters // groups
    blocks_per_group = (kg + BLOCK_K - 1) // BLOCK_K
    jobs = n_images * groups * blocks_per_group * out_d
    for job in numba.prange(jobs):
        od = job % out_d
        rest = job // out_d
        block = rest % blocks_per_group
        rest //= blocks_per_group
        g = rest % groups
        n = rest // groups
        k0 = g * kg + block * BLOCK_K
        count = min(BLOCK_K, g * kg + kg - k0)
        acc = np.zeros((BLOCK_K, out_w), dtype=y.dtype)
        for oh in range(out_h):
            acc[:] = 0
            for kd in range(kd_n):
                i_d = od * stride[0] + kd * dilation[0] - pad[0]
                if i_d < 0 or i_d >= depth:
                    continue
                for kh in range(kh_n):
                    i_h = oh * stride[1] + kh * dilation[1] - pad[1]
                    if i_h < 0 or i_h >= height:
                        continue
                    for kw in range(kw_n):
                        offset = kw * dilation[2] - pad[2]
                        lo, hi = _valid(out_w, width, stride[2], offset)
                        for c in range(cg):
                            ci = g * cg + c
                            if count == BLOCK_K:
                                w0 = w[k0, c, kd, kh, kw]
                                w1 = w[k0 + 1, c, kd, kh, kw]
                                w2 = w[k0 + 2, c, kd, kh, kw]
                                w3 = w[k0 + 3, c, kd, kh, kw]
                                for ow in range(lo, hi):
                                    v = x[n, ci, i_d, i_h, ow * stride[2] + offset]
                                    acc[0, ow] += w0 * v
                                    acc[1, ow] += w1 * v
                                    acc[2, ow] += w2 * v
                                    acc[3, ow] += w3 * v
                            else:
                                for b in range(count):
                                    wb = w[k0 + b, c, kd, kh, kw]
                                    for ow in range(lo, hi):
                                        acc[b, ow] += wb * x[n, ci, i_d, i_h,
                                                             ow * stride[2] + offset]
            for b in range(count):
                for ow in range(out_w):
                    y[n, k0 + b, od, oh, ow] = acc[b, ow]


@numba.njit(parallel=True, cache=True, fastmath=FLAGS)
def backward_data(w, dy, dx, stride, dilation, pad, groups):
    n_images, channels, depth, height, width = dx.shape
    filters, cg, kd_n, kh_n, kw_n = w.shape
    _, _, out_d, out_h, out_w = dy.shape
    kg = filters // groups
    for job in numba.prange(n_images * channels):
        n = job // channels
        ci = job % channels
        g = ci // cg
        c = ci % cg
        dx[n, ci] = 0
        for k in range(g * kg, g * kg + kg):
            for od in range(out_d):
                for kd in range(kd_n):
                    i_d = od * stride[0] + kd * dilation[0] - pad[0]
                    if i_d < 0 or i_d >= depth:
                        continue
                    for oh in range(out_h):
                        for kh in range(kh_n):
                            i_h = oh * stride[1] + kh * dilation[1] - pad[1]
                            if i_h < 0 or i_h >= height:
                                continue
                            for kw in range(kw_n):
                                offset = kw * dilation[2] - pad[2]
                                lo, hi = _valid(out_w, width, stride[2], offset)
                                wv = w[k, c, kd, kh, kw]
                                for ow in range(lo, hi):
                                    dx[n, ci, i_d, i_h, ow * stride[2] + offset] += (
                                        wv * dy[n, k, od, oh, ow])


@numba.njit(parallel=True, cache=True, fastmath=FLAGS)
def backward_filter(x, dy, dw, stride, dilation, pad, groups):
    n_images, channels, depth, height, width = x.shape
    filters, cg, kd_n, kh_n, kw_n = dw.shape
    _, _, out_d, out_h, out_w = dy.shape
    kg = filters // groups
    taps = kd_n * kh_n * kw_n
    for job in numba.prange(filters * cg * taps):
        tap = job % taps
        rest = job // taps
        c = rest % cg
        k = rest // cg
        kw = tap % kw_n
        kh = (tap // kw_n) % kh_n
        kd = tap // (kw_n * kh_n)
        ci = (k // kg) * cg + c
        offset = kw * dilation[2] - pad[2]
        lo, hi = _valid(out_w, width, stride[2], offset)
        total = 0.0
        for n in range(n_images):
            for od in range(out_d):
                i_d = od * stride[0] + kd * dilation[0] - pad[0]
                if i_d < 0 or i_d >= depth:
                    continue
                for oh in range(out_h):
                    i_h = oh * stride[1] + kh * dilation[1] - pad[1]
                    if i_h < 0 or i_h >= height:
                        continue
                    part = 0.0
                    for ow in range(lo, hi):
                        part += dy[n, k, od, oh, ow] * x[n, ci, i_d, i_h, ow * stride[2] + offset]
                    total += part
        dw[k, c, kd, kh, kw] = total


def as_5d(array: np.ndarray, spatial: int) -> np.ndarray:
    """A 4-D (2-D problem) tensor viewed with depth 1; a 5-D one as it is."""
    return array if spatial == 3 else array[:, :, np.newaxis]
