"""The three directions of the tiled FFT convolution (tiled.py), each a lowered stride-1
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

from collections.abc import Callable

import numpy as np

from harness.backends.cpu.common import CpuPrepared, allocate, interior
from harness.backends.cpu.fft.lowering import Lowering, taps
from harness.backends.cpu.fft.spectra import KernelForward, KernelInverse, contract
from harness.backends.cpu.fft.tiled import FOUR, TWO, Forward, Inverse, Shape, Tiling, window_view
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point

# Channel pairs (Cg x Kg) per group from which the tiled path runs. With fewer, each
# frequency's product is a handful of multiply-adds and algorithm.py's whole-image path, which sums
# them elementwise, wins: measured (batch 1, fp32; whole / tiled ms, fwd) depthwise 7x7 at 64
# channels 56x56 1.95 / 8.80, 3x3 at 64 channels in groups of 2 x 2 2.98 / 2.13 but 2.81 /
# 3.59 bwd_data, in groups of 4 x 4 3.57 / 1.82 (tiled ahead in all three directions).
TILED_MIN_PAIRS = 16


def pays(p: ConvProblem) -> bool:
    """Whether the tiled path runs rather than the whole-image one (algorithm.py)."""
    return p.channels_per_group * p.filters_per_group >= TILED_MIN_PAIRS


class _Plan:
    """Sizes and transforms of one direction; `buffers` allocates its scratch."""

    def __init__(self, p: ConvProblem, lo: Lowering, direction: str, dtype: type):
        self.p, self.lo, self.dtype = p, lo, dtype
        self.shape = Shape.of(p, lo, direction)
        self.t = t = self.shape.best()
        self.nt = p.batch * t.tiles
        self.planes = p.groups * p.filters_per_group * p.channels_per_group * lo.phases
        # Taps are read in the weights' own layout where no phase split or dilation moves them.
        self.direct_taps = lo.phases == 1 and p.dilation_h == p.dilation_w == 1
        if direction == "bwd_filter":
            self.signal = Forward(t, t.th, t.tw, -1, TWO, dtype)        # x
            self.other = Forward(t, t.mh, t.mw, +1, FOUR, dtype)        # dy, conjugated
            self.inverse = KernelInverse(t, lo.rs, lo.ss, dtype)
        else:
            self.signal = Forward(t, t.th, t.tw, -1, FOUR, dtype)       # x or dy
            self.other = KernelForward(t, lo.rs, lo.ss, direction == "bwd_data", dtype)
            self.inverse = Inverse(t, t.mh, t.mw, dtype)

    def buffers(self, point: Point, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
        self.constants = sum(f.nbytes() for f in (self.signal, self.other, self.inverse))
        if not self.direct_taps:
            shapes["taps"] = (self.planes, self.lo.rs, self.lo.ss)
        return allocate(point, self.dtype, shapes, self.constants)

    def workspace(self, buffers: dict[str, np.ndarray]) -> int:
        return sum(a.nbytes for a in buffers.values()) + self.constants

    def staged(self, rows: int, rest: int) -> tuple[int]:
        return (self.t.f2 * 2 * rows * rest,)

    def x_tiles(self) -> dict[str, tuple[int, ...]]:
        """x padded channels-last ("xe"), its tiles, channels before images and tiles ("xt"),
        and their column spectra ("xs")."""
        p, lo, t = self.p, self.lo, self.t
        g, n, cg = p.groups, p.batch, p.channels_per_group
        return {"xe": (*self.padded_reach(), g, n, cg),
                "xt": (t.tw, t.th, g, cg, lo.sh, lo.sw, n, t.nh, t.nw),
                "xs": self.staged(t.th, g * self.nt * self.shape.cin)}

    def padded_reach(self) -> tuple[int, int]:
        """Rows and columns of the (phase-interleaved) padded input the tiles read, at least
        the padded input itself."""
        (rh, rw), p, lo = self.t.reach, self.p, self.lo
        return max(rh * lo.sh, p.padded_h), max(rw * lo.sw, p.padded_w)

    def taps_in(self, w: np.ndarray, b: dict[str, np.ndarray]) -> Callable[[], np.ndarray]:
        """Weights (K, C/g, R, S) as phase taps (planes, rs, ss), planes (g, kg, cg, sh, sw):
        w itself where nothing moves, else a buffer the returned call fills."""
        p, lo = self.p, self.lo
        if self.direct_taps:
            return lambda: w.reshape(self.planes, lo.rs, lo.ss)
        tap_list, buffer = taps(p, lo), b["taps"]
        phased = buffer.reshape(p.out_channels, p.channels_per_group, lo.sh, lo.sw, lo.rs, lo.ss)
        w_taps = w.reshape(p.out_channels, p.channels_per_group, p.kernel_h, p.kernel_w)

        def fill() -> np.ndarray:
            for r, s, i, a, j, c in tap_list:
                phased[:, :, a, c, i, j] = w_taps[..., r, s]
            return buffer
        return fill


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
    sh, sw = phases
    view = image.reshape(n, g, c, t.nh, t.mh, sh, t.nw, t.mw, sw).transpose(
        7, 4, 1, 0, 3, 6, 2, 5, 8)
    np.copyto(view, tiles.reshape(view.shape))


# Tile-window axes (cols, rows, nh, nw, sh, sw, g, n, c) in the orders the transforms take:
# images and tiles before the channels (fwd, bwd_data), or last (bwd_filter: summed).
_TILES_THEN_CHANNELS = (0, 1, 6, 7, 2, 3, 8, 4, 5)
_CHANNELS_THEN_TILES = (0, 1, 6, 8, 4, 5, 7, 2, 3)


def fwd(point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
    p, lo = point.problem, Lowering.of(point.problem)
    plan = _Plan(p, lo, "fwd", dtype)
    t, s, nt = plan.t, plan.shape, plan.nt
    g, n, kg = p.groups, p.batch, p.filters_per_group
    b = plan.buffers(point, {
        **plan.x_tiles(),
        "ws": plan.staged(lo.rs, plan.planes),
        "X": (t.freqs, 4, g, s.cin, nt), "V": (t.freqs, 2, g, kg, s.cin),
        "Z": (t.freqs, 2, g, kg, nt), "S": (t.freqs, 2, g, kg, nt),
        "zs": plan.staged(t.mh, g * nt * kg),
        "zt": (t.mw, t.mh, g, kg, n, t.nh, t.nw),
        "ye": (n, g, kg, t.nh * t.mh, t.nw * t.mw)})
    x, w = data.x.astype(dtype), data.w.astype(dtype)
    w_taps = plan.taps_in(w, b)
    y = np.empty(p.output_shape, dtype)
    at = interior(p)

    def kernel() -> None:
        _channels_last(b["xe"], x, g, at)
        _gather(b["xt"], b["xe"], t, (t.th, t.tw), (lo.sh, lo.sw), _CHANNELS_THEN_TILES)
        plan.signal(b["xt"].reshape(t.tw, -1), b["xs"], b["X"])
        plan.other(w_taps(), b["ws"], b["V"])
        contract(b["X"], b["V"], b["Z"], b["S"], four_left=False)
        plan.inverse(b["Z"], b["zs"], b["zt"])
        _scatter(b["zt"].transpose(0, 1, 2, 4, 5, 6, 3)[..., None, None], b["ye"], t, (1, 1))
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
        "dt": (t.tw, t.th, g, n, t.nh, t.nw, kg, 1, 1),
        "ds": plan.staged(t.th, g * nt * kg),
        "ws": plan.staged(lo.rs, plan.planes),
        "X": (t.freqs, 4, g, nt, kg), "V": (t.freqs, 2, g, kg, s.cout),
        "Z": (t.freqs, 2, g, nt, s.cout), "S": (t.freqs, 2, g, nt, s.cout),
        "zs": plan.staged(t.mh, g * nt * s.cout),
        "zt": (t.mw, t.mh, g, n, t.nh, t.nw, cg, lo.sh, lo.sw),
        "dxe": (n, g, cg, t.nh * t.mh * lo.sh, t.nw * t.mw * lo.sw)})
    w, dy = data.w.astype(dtype), data.dy.astype(dtype)
    w_taps = plan.taps_in(w, b)
    dx = np.empty(p.input_shape, dtype)
    # dy's r-1 leading zeros make the full convolution a correlation with the rotated kernel.
    at = (slice(lo.rs - 1, lo.rs - 1 + p.out_h), slice(lo.ss - 1, lo.ss - 1 + p.out_w))
    rows, cols = interior(p)

    def kernel() -> None:
        _channels_last(b["de"], dy, g, at)
        _gather(b["dt"], b["de"], t, (t.th, t.tw), (1, 1), _TILES_THEN_CHANNELS)
        plan.signal(b["dt"].reshape(t.tw, -1), b["ds"], b["X"])
        plan.other(w_taps(), b["ws"], b["V"])
        contract(b["X"], b["V"], b["Z"], b["S"])
        plan.inverse(b["Z"], b["zs"], b["zt"])
        _scatter(b["zt"], b["dxe"], t, (lo.sh, lo.sw))
        np.copyto(dx, b["dxe"].reshape(n, p.in_channels, *b["dxe"].shape[3:])[:, :, rows, cols])

    return CpuPrepared(dx, kernel, plan.workspace(b))


def bwd_filter(point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
    p, lo = point.problem, Lowering.of(point.problem)
    plan = _Plan(p, lo, "bwd_filter", dtype)
    t, s, nt = plan.t, plan.shape, plan.nt
    g, n, kg = p.groups, p.batch, p.filters_per_group
    b = plan.buffers(point, {
        **plan.x_tiles(),
        "de": (t.nh * t.mh, t.nw * t.mw, g, n, kg),
        "dt": (t.mw, t.mh, g, kg, 1, 1, n, t.nh, t.nw),
        "ds": plan.staged(t.mh, g * nt * kg),
        "D": (t.freqs, 4, g, kg, nt), "X": (t.freqs, 2, g, s.cin, nt),
        "Z": (t.freqs, 2, g, kg, s.cin), "S": (t.freqs, 2, g, kg, s.cin),
        "zs": plan.staged(lo.rs, plan.planes)})
    x, dy = data.x.astype(dtype), data.dy.astype(dtype)
    dw = np.empty(p.weight_shape, dtype)
    lags = _Lags(plan, dw, b)
    at = interior(p)
    dy_at = (slice(0, p.out_h), slice(0, p.out_w))

    def kernel() -> None:
        _channels_last(b["xe"], x, g, at)
        _gather(b["xt"], b["xe"], t, (t.th, t.tw), (lo.sh, lo.sw), _CHANNELS_THEN_TILES)
        _channels_last(b["de"], dy, g, dy_at)
        _gather(b["dt"], b["de"], t, (t.mh, t.mw), (1, 1), _CHANNELS_THEN_TILES)
        plan.signal(b["xt"].reshape(t.tw, -1), b["xs"], b["X"])
        plan.other(b["dt"].reshape(t.mw, -1), b["ds"], b["D"])
        contract(b["D"], b["X"].swapaxes(-1, -2), b["Z"], b["S"])
        plan.inverse(b["Z"], b["zs"], lags.buffer)
        lags.spread()

    return CpuPrepared(dw, kernel, plan.workspace(b))


class _Lags:
    """Where bwd_filter's lags (planes, rs, ss) go: dw itself where taps sit where they are,
    else the taps buffer, `spread` then copying each tap to dw."""

    def __init__(self, plan: _Plan, dw: np.ndarray, b: dict[str, np.ndarray]):
        p, lo = plan.p, plan.lo
        self.buffer = dw.reshape(plan.planes, lo.rs, lo.ss) if plan.direct_taps else b["taps"]
        self.tap_list = [] if plan.direct_taps else taps(p, lo)
        self.phased = self.buffer.reshape(p.out_channels, p.channels_per_group, lo.sh, lo.sw,
                                          lo.rs, lo.ss)
        self.dw_taps = dw

    def spread(self) -> None:
        for r, s, i, a, j, c in self.tap_list:
            self.dw_taps[..., r, s] = self.phased[:, :, a, c, i, j]
