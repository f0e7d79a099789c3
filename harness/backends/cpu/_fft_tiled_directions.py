"""The three directions of the tiled FFT convolution (_fft_tiled.py), each a lowered stride-1
correlation of tiles:
- fwd: x's tiles (t rows) with the kernel; each tile keeps its first m outputs;
- bwd_data: a full convolution of dy with the kernel, written as a correlation of dy shifted by
  r-1 (zero in front) with the rotated, channel-swapped kernel, tiled over the phase input;
- bwd_filter: per tile, x's window (t rows) correlated with dy's tile (m rows, zeros after):
  only the first r x s lags are kept, and the sum over images and tiles is the contraction.

Operands are staged channels-last (rows, cols, g, n, c), so a tile gather copies runs of
channels; all buffers are allocated once, under the point's workspace limit.
"""
from __future__ import annotations

import numpy as np

from harness.backends.cpu._common import CpuPrepared, allocate, interior
from harness.backends.cpu._fft_lowering import Lowering, taps
from harness.backends.cpu._fft_tiled import (FOUR, TWO, Forward, Inverse, Shape, Tiling,
                                             contract, window_view)
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point


def pays(p: ConvProblem) -> bool:
    """Whether the tiled path runs rather than the whole-image one (fft.py)."""
    return p.channels_per_group * p.filters_per_group > 1


class _Plan:
    """Sizes and transforms of one direction; `buffers` allocates its scratch."""

    def __init__(self, p: ConvProblem, lo: Lowering, direction: str, dtype: type):
        self.p, self.lo, self.dtype = p, lo, dtype
        self.shape = Shape.of(p, lo, direction)
        self.t = t = self.shape.best()
        self.nt = p.batch * t.tiles
        self.signal = Forward(t, t.th, t.tw, -1, FOUR, dtype)
        if direction == "bwd_filter":
            self.other = Forward(t, t.mh, t.mw, +1, TWO, dtype)   # dy, conjugated
            self.inverse = Inverse(t, lo.rs, lo.ss, dtype)
        else:
            self.other = Forward(t, lo.rs, lo.ss, +1, TWO, dtype)  # kernel, conjugated
            self.inverse = Inverse(t, t.mh, t.mw, dtype)

    def buffers(self, point: Point, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        constants = sum(f.nbytes() for f in (self.signal, self.other, self.inverse))
        self.constants = constants
        return allocate(point, self.dtype, shapes, constants)

    def workspace(self, buffers: dict[str, np.ndarray]) -> int:
        return sum(a.nbytes for a in buffers.values()) + self.constants

    def spectra(self, four: str, two: str, out: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """Spectrum buffers: the four-block signal, the two-block operand, the product and its
        scratch (out: per-frequency shape of one block)."""
        f = self.t.freqs
        return {"X": (f, 4, *self._block(four)), "V": (f, 2, *self._block(two)),
                "Z": (f, 2, *out), "S": (f, 2, *out)}

    def _block(self, axes: str) -> tuple[int, ...]:
        s, nt = self.shape, self.nt
        size = {"nt": nt, "cin": s.cin, "cout": s.cout}
        return (s.groups, *(size[a] for a in axes.split()))

    def staged(self, forward: Forward, rest: int) -> tuple[int]:
        return (forward.f2 * forward.staged_rows * rest,)

    def padded_reach(self) -> tuple[int, int]:
        """Rows and columns of the (phase-interleaved) padded input the tiles read, at least
        the padded input itself."""
        (rh, rw), p, lo = self.t.reach, self.p, self.lo
        return max(rh * lo.sh, p.padded_h), max(rw * lo.sw, p.padded_w)


def _channels_last(base: np.ndarray, src: np.ndarray, groups: int, at: tuple[slice, slice]):
    """base (H, W, g, n, c)[at] = src (n, g*c, h, w)."""
    n, channels, h, w = src.shape
    view = base[at].transpose(3, 2, 4, 0, 1)
    np.copyto(view, src.reshape(n, groups, channels // groups, h, w))


def _gather(dest: np.ndarray, base: np.ndarray, t: Tiling, size: tuple[int, int],
            phases: tuple[int, int], order: tuple[int, ...]) -> None:
    """dest = the tile windows of base, axes in `order` of (cols, rows, nh, nw, sh, sw, g, n, c)."""
    np.copyto(dest, window_view(base, t, size, phases).transpose(order))


def _scatter(tiles: np.ndarray, image: np.ndarray, t: Tiling, phases: tuple[int, int]) -> None:
    """tiles (mw, mh, g, n, nh, nw, c, sh, sw) -> image (n, g, c, nh*mh*sh, nw*mw*sw)."""
    n, g, c = image.shape[:3]
    (sh, sw) = phases
    view = image.reshape(n, g, c, t.nh, t.mh, sh, t.nw, t.mw, sw).transpose(7, 4, 1, 0, 3, 6, 2, 5, 8)
    np.copyto(view, tiles.reshape(view.shape))


def fwd(point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
    p, lo = point.problem, Lowering.of(point.problem)
    plan = _Plan(p, lo, "fwd", dtype)
    t, s, nt = plan.t, plan.shape, plan.nt
    g, n, cg, kg = p.groups, p.batch, p.channels_per_group, p.filters_per_group
    planes = g * s.cin * kg
    b = plan.buffers(point, {
        "xe": (*plan.padded_reach(), g, n, cg),
        "xt": (t.tw, t.th, g, n, t.nh, t.nw, cg, lo.sh, lo.sw),
        "xs": plan.staged(plan.signal, g * nt * s.cin),
        "wt": (lo.ss, lo.rs, g, cg, lo.sh, lo.sw, kg),
        "ws": plan.staged(plan.other, planes),
        **plan.spectra("nt cin", "cin cout", (g, nt, kg)),
        "zs": (t.f2 * 2 * t.mh * g * nt * kg,),
        "zt": (t.mw, t.mh, g, n, t.nh, t.nw, kg, 1, 1),
        "ye": (n, g, kg, t.nh * t.mh, t.nw * t.mw)})
    x, w = data.x.astype(dtype), data.w.astype(dtype)
    w_taps = w.reshape(g, kg, cg, p.kernel_h, p.kernel_w)
    wt = b["wt"].transpose(0, 1, 4, 5, 2, 6, 3)
    tap_list = taps(p, lo)
    y = np.empty(p.output_shape, dtype)
    at = interior(p)

    def kernel() -> None:
        _channels_last(b["xe"], x, g, at)
        _gather(b["xt"], b["xe"], t, (t.th, t.tw), (lo.sh, lo.sw), (0, 1, 6, 7, 2, 3, 8, 4, 5))
        for r, s_, i, a, j, c in tap_list:
            wt[j, i, a, c] = w_taps[..., r, s_]
        plan.signal(b["xt"].reshape(t.tw, -1), b["xs"], b["X"])
        plan.other(b["wt"].reshape(lo.ss, -1), b["ws"], b["V"])
        contract(b["X"], b["V"], b["Z"], b["S"])
        plan.inverse(b["Z"], b["zs"], b["zt"])
        _scatter(b["zt"], b["ye"], t, (1, 1))
        np.copyto(y, b["ye"].reshape(n, p.out_channels, *b["ye"].shape[3:])[
            :, :, :p.out_h, :p.out_w])

    return CpuPrepared(y, kernel, plan.workspace(b))


def bwd_data(point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
    p, lo = point.problem, Lowering.of(point.problem)
    plan = _Plan(p, lo, "bwd_data", dtype)
    t, s, nt = plan.t, plan.shape, plan.nt
    g, n, cg, kg = p.groups, p.batch, p.channels_per_group, p.filters_per_group
    reach_h, reach_w = t.reach
    b = plan.buffers(point, {
        "de": (max(reach_h, lo.rs - 1 + p.out_h), max(reach_w, lo.ss - 1 + p.out_w), g, n, kg),
        "dt": (t.tw, t.th, g, n, t.nh, t.nw, kg),
        "ds": plan.staged(plan.signal, g * nt * kg),
        "wt": (lo.ss, lo.rs, g, kg, cg, lo.sh, lo.sw),
        "ws": plan.staged(plan.other, g * kg * s.cout),
        **plan.spectra("nt cin", "cin cout", (g, nt, s.cout)),
        "zs": (t.f2 * 2 * t.mh * g * nt * s.cout,),
        "zt": (t.mw, t.mh, g, n, t.nh, t.nw, cg, lo.sh, lo.sw),
        "dxe": (n, g, cg, t.nh * t.mh * lo.sh, t.nw * t.mw * lo.sw)})
    w, dy = data.w.astype(dtype), data.dy.astype(dtype)
    w_taps = w.reshape(g, kg, cg, p.kernel_h, p.kernel_w)
    wt = b["wt"].transpose(0, 1, 5, 6, 2, 3, 4)
    tap_list = taps(p, lo)
    dx = np.empty(p.input_shape, dtype)
    # dy's r-1 leading zeros make the full convolution a correlation with the rotated kernel.
    at = (slice(lo.rs - 1, lo.rs - 1 + p.out_h), slice(lo.ss - 1, lo.ss - 1 + p.out_w))
    rows, cols = interior(p)

    def kernel() -> None:
        _channels_last(b["de"], dy, g, at)
        _gather(b["dt"].reshape(*b["dt"].shape, 1, 1), b["de"], t, (t.th, t.tw), (1, 1),
                (0, 1, 6, 7, 2, 3, 8, 4, 5))
        for r, s_, i, a, j, c in tap_list:
            wt[lo.ss - 1 - j, lo.rs - 1 - i, a, c] = w_taps[..., r, s_]
        plan.signal(b["dt"].reshape(t.tw, -1), b["ds"], b["X"])
        plan.other(b["wt"].reshape(lo.ss, -1), b["ws"], b["V"])
        contract(b["X"], b["V"], b["Z"], b["S"])
        plan.inverse(b["Z"], b["zs"], b["zt"])
        _scatter(b["zt"], b["dxe"], t, (lo.sh, lo.sw))
        np.copyto(dx, b["dxe"].reshape(n, p.in_channels, *b["dxe"].shape[3:])[:, :, rows, cols])

    return CpuPrepared(dx, kernel, plan.workspace(b))


def bwd_filter(point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
    p, lo = point.problem, Lowering.of(point.problem)
    plan = _Plan(p, lo, "bwd_filter", dtype)
    t, s, nt = plan.t, plan.shape, plan.nt
    g, n, cg, kg = p.groups, p.batch, p.channels_per_group, p.filters_per_group
    planes = g * s.cin * kg
    b = plan.buffers(point, {
        "xe": (*plan.padded_reach(), g, n, cg),
        "xt": (t.tw, t.th, g, cg, lo.sh, lo.sw, n, t.nh, t.nw),
        "xs": plan.staged(plan.signal, g * nt * s.cin),
        "de": (t.nh * t.mh, t.nw * t.mw, g, n, kg),
        "dt": (t.mw, t.mh, g, kg, n, t.nh, t.nw),
        "ds": plan.staged(plan.other, g * nt * kg),
        **plan.spectra("cin nt", "cout nt", (g, s.cin, kg)),
        "zs": (t.f2 * 2 * lo.rs * planes,),
        "dwt": (lo.ss, lo.rs, g, cg, lo.sh, lo.sw, kg)})
    x, dy = data.x.astype(dtype), data.dy.astype(dtype)
    dw = np.empty(p.weight_shape, dtype)
    dw_taps = dw.reshape(g, kg, cg, p.kernel_h, p.kernel_w)
    dwt = b["dwt"].transpose(0, 1, 4, 5, 2, 6, 3)
    tap_list = taps(p, lo)
    at = interior(p)
    dy_at = (slice(0, p.out_h), slice(0, p.out_w))

    def kernel() -> None:
        _channels_last(b["xe"], x, g, at)
        _gather(b["xt"], b["xe"], t, (t.th, t.tw), (lo.sh, lo.sw), (0, 1, 6, 8, 4, 5, 7, 2, 3))
        _channels_last(b["de"], dy, g, dy_at)
        _gather(b["dt"].reshape(*b["dt"].shape, 1, 1), b["de"], t, (t.mh, t.mw), (1, 1),
                (0, 1, 6, 8, 7, 2, 3, 4, 5))
        plan.signal(b["xt"].reshape(t.tw, -1), b["xs"], b["X"])
        plan.other(b["dt"].reshape(t.mw, -1), b["ds"], b["V"])
        contract(b["X"], b["V"].swapaxes(-1, -2), b["Z"], b["S"])
        plan.inverse(b["Z"], b["zs"], b["dwt"])
        for r, s_, i, a, j, c in tap_list:
            dw_taps[..., r, s_] = dwt[j, i, a, c]

    return CpuPrepared(dw, kernel, plan.workspace(b))
