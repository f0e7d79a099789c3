"""Winograd minimal filtering (Lavin & Gray 2016): F(2x2,3x3) and F(4x4,3x3), all directions.

Y = A^T [ (G g G^T) (.) (B^T d B) ] A on overlapping (m+2)^2 input tiles. The elementwise
product summed over channels is, per tile position (a, b), a GEMM: M[ab] = V[ab] (tiles x C)
@ U[ab]^T (C x K), so the bulk of the work is (m+2)^2 batched GEMMs doing 9m^2/(m+2)^2 of
direct convolution's multiplies (1/2.25 for m=2, 1/4 for m=4).

The transform matrices are not typed in: `toom_cook` builds them from interpolation points by
the Toom-Cook construction (evaluate at the points and at infinity, interpolate), exactly in
rational arithmetic; tests/test_cpu_algorithms.py checks them against Lavin & Gray's published
matrices and against exact correlation.

NumPy spends its time in data movement and in thin GEMMs, and its copies use one core, so:
- the NCHW input is copied once into a zero-bordered NHWC plane (its images shared among the
  threads), and every tile's window is gathered by one copy of an as_strided view of that
  plane: channels innermost, each copy moves runs of C contiguous values (gathering straight
  from NCHW moves runs of 1 value, every m-th, and measured 1.5-4x slower on ResNet-50's 3x3
  layers);
- the tiles are cut into chunks (bands of tile rows of an image, or groups of whole images)
  of about CHUNK_BYTES of transformed tiles, and each chunk runs the whole pipeline (gather,
  input transform, the per-position GEMMs, output transform, the transposing copy into NCHW)
  while its buffers are in cache; chunks run on as many Python threads as BLAS may use, BLAS
  single-threaded meanwhile (cpu/workers.py), so copies and transforms use every core too;
- each 2-D transform X -> L X R^T is one GEMM with the Kronecker product L (x) R over all tiles
  and channels of a chunk (for F4 that is 4x the multiplies of the separable form, but
  the separable form is two GEMMs with an inner dimension of 6, which OpenBLAS runs 3-4x below
  its peak: measured 10-25% slower on chunks in cache, and slower still over memory);
- layers of few tiles and many channels (res5 at batch 8) are shared out among the
  threads by filters instead (BY_FILTERS_MAX_CHUNKS): the input transform in chunks into one
  buffer, then each thread the GEMMs, output transform and copy of its filters over all tiles,
  transforming its filters' weights a few at a time beside their GEMMs (FUSED_U_BYTES), so
  that the transformed weights are read once per launch, from cache.

The filter transform U = G g G^T stays inside the timed launch: a training step transforms new
weights every time, and oneDNN, the peer these algorithms are compared with, transforms them
in every call too. (Measured at batch 8: under 1% of F4's launch on ResNet-50's res2, 12-18% on
res4 and 35% on res5, whose 512x512 weights transform into 36 MiB for 7x7 images.)

Directions (stride 1, dilation 1, 3x3 only):
- bwd_data is the same tile algorithm on dy, padded by 2 - pad, with the kernel rotated by 180
  degrees and its two channel axes swapped: the rotation reverses the columns of G (x) G, the
  swap is a transposed GEMM operand, so no rotated copy of the weights is made;
- bwd_filter is F(3x3, mxm) on the same points (bwd_filter.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import ClassVar

import numpy as np

from harness.backends.cpu.common import CpuAlgorithm, CpuPrepared, allocate, workspace_of
from harness.backends.cpu.tiles import (Chunk, Tiling, by_group, chunks, even_parts, kron, per_slot,
                                        place_tasks, plan, scratch, slot_count, transform_input)
from harness.backends.cpu.winograd.bwd_filter import FilterGradient
from harness.backends.cpu.winograd.toom_cook import matrices
from harness.backends.cpu.workers import run_chunks, run_tasks
from harness.problem import ConvProblem
from harness.reference import ProblemData
from harness.sweep import Point
from harness.threads import cores_for


# ---- the GEMMs per tile position ---------------------------------------------------------------
def _multiply(v: np.ndarray, u: np.ndarray, out: np.ndarray, groups: int) -> None:
    """out[ab, t, g*F + f] = sum_c v[ab, t, g*C + c] u[ab, g, c, f]: one GEMM per position and
    group, over all tiles. With one channel per group (depthwise) it is an outer product, done
    by broadcasting instead of one tiny GEMM per (position, group)."""
    lhs, res = by_group(v, groups), by_group(out, groups)
    if u.shape[-2] == 1:
        np.multiply(lhs, u, out=res)
    else:
        np.matmul(lhs, u, out=res)


# ---- the two tile pipelines --------------------------------------------------------------------
# Layers whose tiles make at most this many chunks (one: the MIN_CHUNK_TILES floor holds all
# tiles, which one thread then took through thin GEMMs on BLAS's threads), with one group, are
# shared out among the threads by filters instead: the input transform in chunks into one
# buffer of all transformed tiles, then each thread the GEMMs of its filters over all tiles,
# reading only its filters' transformed weights. With one chunk that gained (res5a F4 fwd 8.2 ->
# 6.7 ms); from 2 chunks by filters ran slower or as fast on most layers
# (evidence/notes/constants.md#winograd-by_filters_max_chunks).
BY_FILTERS_MAX_CHUNKS = 1
# By filters, each thread transforms its filters' weights a few at a time, about this many bytes
# of U, and runs their GEMMs while that U is still in its 2 MiB L2, instead of writing all of U
# (36 MiB on res5a) out to memory first: res5a F4 bwd_data 11.9 -> 9.5 ms, and that workspace
# is gone (evidence/notes/constants.md#winograd-fused_u_bytes).
FUSED_U_BYTES = 5 << 18


class _Correlation:
    """out (N, F, Ho, Wo) = stride-1 3x3 correlation, tile by tile, of an NCHW source with C
    channels placed at (top, left) in an otherwise zero plane, with the weights it transforms
    itself (`_Weights`; `rotated`: bwd_data's kernel, whose filters are w's second axis): U,
    one (C/groups x F/groups) matrix per tile position and group, all at once before the
    chunks, or by filters a few filters at a time.

    Per chunk, two tile buffers of its thread take turns (each step reads one and writes the
    other): tiles, then transformed tiles, then their products with U, then the output tiles,
    then (where tiles overhang the output) a cropped copy. By filters (few tiles, one group),
    the chunks write the transformed tiles into one shared buffer "v", then each thread takes
    blocks of filters through the GEMMs, the output transform and the copy into `out`."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, groups: int, channels: int,
                 filters: int, batch: int, rows: int, cols: int, dtype: type, cores: int,
                 rotated: bool = False):
        self.t = t = Tiling.of(m, rows, cols)
        self.groups, self.channels, self.filters = groups, channels, filters
        self.bb = kron(mats["bt"], mats["bt"], dtype)    # (a*a, a*a)
        self.aa = kron(mats["at"], mats["at"], dtype)    # (m*m, a*a)
        positions, outputs = t.alpha * t.alpha, t.m * t.m
        self.tiles = batch * t.per_image
        self.chunks = plan(t, batch, max(channels, filters), dtype, filter_gradient=False,
                           cores=cores)
        self.by_filters = groups == 1 and len(self.chunks) <= BY_FILTERS_MAX_CHUNKS
        if self.by_filters:
            self.chunks = chunks(t, batch, -(-self.tiles // cores))
            unit = positions * channels * np.dtype(dtype).itemsize
            self.filters_per_transform = max(1, FUSED_U_BYTES // unit)
        self.slots = slot_count(self.chunks, cores)
        self.overhang = (t.m * t.th, t.m * t.tw) != (rows, cols)
        most = max(c.tiles(t) for c in self.chunks)
        if self.by_filters:
            # One block per thread: smaller blocks re-read all of V per block, and ran slower
            # (res4a F2, 1 thread, half the filters: 2.95 ms in one block, 3.64 in 2, 5.23 in 4).
            self.blocks = even_parts(filters, -(-filters // self.slots))
            block = max(n for _, n in self.blocks)
            widest = block * self.tiles
            fused = min(self.filters_per_transform, block) * channels
            slot = {"front": max(most * positions * channels, widest * positions),
                    "back": widest * outputs, "u_part": positions * fused}
            if rotated:     # its filters' taps are staged (_Weights.filters_into)
                slot["taps"] = 9 * fused
            shared = {"v": positions * self.tiles * channels}
        else:
            slot = {"front": most * positions * max(channels, filters),
                    "back": most * max(positions * channels, outputs * filters)}
            shared = {"u": positions * channels * filters // groups}
        if self.overhang:
            slot["crop"] = slot["back"] if self.by_filters else most * outputs * filters
        self.sizes = {"plane": int(np.prod(t.plane(batch, channels))), **shared,
                      **per_slot(slot, self.slots)}

    def __call__(self, buf: dict[str, np.ndarray], src: np.ndarray, top: int, left: int,
                 weights: _Weights, out: np.ndarray) -> None:
        """out <- src (*) the weights, through the scratch `buf` (self.sizes)."""
        plane = scratch(buf["plane"], self.t.plane(src.shape[0], self.channels))
        placing = place_tasks(src, top, left, plane, self.slots)
        windows = self.t.input_windows(plane)
        if not self.by_filters:
            # U of every (channel, filter) pair first, beside placing src.
            g = self.groups
            u = scratch(buf["u"], (self.t.alpha ** 2, g, self.channels // g, self.filters // g))
            run_tasks([*weights.all_into(u, self.slots), *placing], self.slots)
            run_chunks(self.chunks, lambda slot, chunk: self._chunk(buf, slot, chunk, windows,
                                                                     u, out), self.slots)
            return
        run_tasks(placing, self.slots)
        t = self.t
        v = scratch(buf["v"], (t.alpha * t.alpha, self.tiles, self.channels))

        def transform(slot: int, chunk: Chunk) -> None:
            first = (chunk.n0 * t.th + chunk.u0) * t.tw
            part = v[:, first:first + chunk.tiles(t)]
            transform_input(t, self.bb, windows, chunk, scratch(buf[f"front{slot}"], part.shape),
                            part)

        run_chunks(self.chunks, transform, self.slots)
        run_chunks(self.blocks,
                   lambda slot, block: self._filters(buf, slot, block, v, weights, out),
                   self.slots)

    def _chunk(self, buf: dict[str, np.ndarray], slot: int, chunk: Chunk, windows: np.ndarray,
               u: np.ndarray, out: np.ndarray) -> None:
        t, front, back = self.t, buf[f"front{slot}"], buf[f"back{slot}"]
        positions, outputs, tiles = t.alpha * t.alpha, t.m * t.m, chunk.tiles(t)
        v = scratch(back, (positions, tiles, self.channels))
        transform_input(t, self.bb, windows, chunk, scratch(front, v.shape), v)
        products = scratch(front, (positions, tiles, self.filters))
        _multiply(v, u, products, self.groups)
        y = scratch(back, (outputs, tiles, self.filters))
        np.matmul(self.aa, products.reshape(positions, -1), out=y.reshape(outputs, -1))
        m, images, rows = t.m, chunk.n1 - chunk.n0, chunk.u1 - chunk.u0
        self._write(buf[f"crop{slot}"] if self.overhang else None,
                    y.reshape(m, m, images, rows, t.tw, -1).transpose(2, 5, 3, 0, 4, 1),
                    out[chunk.n0:chunk.n1, :, m * chunk.u0:])

    def _filters(self, buf: dict[str, np.ndarray], slot: int, block: tuple[int, int],
                 v: np.ndarray, weights: _Weights, out: np.ndarray) -> None:
        """Filters f0..f0+n-1 of every tile, a few at a time (FUSED_U_BYTES): their U, then per
        position U[ab] (few x C) @ V[ab]^T (C x tiles) (filters as the GEMM's rows, not tiles:
        on one thread, half of res5a's filters, F4 2.80 ms against 3.87, F2 3.65 against
        3.89); then the output transform of all n, and the copy into out."""
        (f0, n), t = block, self.t
        positions, outputs = t.alpha * t.alpha, t.m * t.m
        products = scratch(buf[f"front{slot}"], (positions, n, self.tiles))
        for first, count in even_parts(n, self.filters_per_transform):
            u = weights.filters_into(f0 + first, count, buf.get(f"taps{slot}"),
                                     buf[f"u_part{slot}"])
            np.matmul(u, v.swapaxes(1, 2), out=products[:, first:first + count])
        y = scratch(buf[f"back{slot}"], (outputs, n, self.tiles))
        np.matmul(self.aa, products.reshape(positions, -1), out=y.reshape(outputs, -1))
        self._write(buf[f"crop{slot}"] if self.overhang else None,
                    y.reshape(t.m, t.m, n, -1, t.th, t.tw).transpose(3, 2, 4, 0, 5, 1),
                    out[:, f0:f0 + n])

    def _write(self, crop: np.ndarray | None, tiles: np.ndarray, out: np.ndarray) -> None:
        """out[n, f, m*u + i, m*v + j] = tiles [n, f, u, i, v, j] (a view of output tiles) where
        it lands in out: one transposing copy, into `out` itself unless tiles overhang it (then
        into scratch `crop`, and its crop into `out`)."""
        images, filters, rows, m, tw, _ = tiles.shape
        if crop is None:
            np.copyto(out[:, :, :m * rows].reshape(tiles.shape), tiles)
            return
        cropped = scratch(crop, tiles.shape)
        np.copyto(cropped, tiles)
        height = min(m * rows, out.shape[2])
        np.copyto(out[:, :, :height],
                  cropped.reshape(images, filters, m * rows, m * tw)[:, :, :height, :out.shape[3]])


class _Winograd(CpuAlgorithm):
    """F(m x m, 3 x 3) for one m; subclasses choose m and the interpolation points."""
    family = "winograd"
    m: ClassVar[int]
    points: ClassVar[tuple[Fraction, ...]]

    def shape_reason(self, problem: ConvProblem, direction: str) -> str | None:
        p = problem
        if (p.kernel_h, p.kernel_w) != (3, 3):
            return f"{self.name} is for 3x3 kernels, not {p.kernel_h}x{p.kernel_w}"
        if (p.stride_h, p.stride_w) != (1, 1):
            return (f"{self.name} needs stride 1 (stride {p.stride_h}x{p.stride_w} would compute "
                    "every output of the tile and keep a fraction)")
        if (p.dilation_h, p.dilation_w) != (1, 1):
            return f"{self.name} needs dilation 1, not {p.dilation_h}x{p.dilation_w}"
        return None

    def _mats(self) -> dict[str, np.ndarray]:
        return matrices(self.m, self.points)

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        mats = self._mats()
        core = _Correlation(mats, self.m, p.groups, p.in_channels, p.out_channels, p.batch,
                            p.out_h, p.out_w, dtype, cores_for(point.threads))
        buf = allocate(point, dtype, _flat(core.sizes))
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)
        weights = _Weights(kron(mats["g"], mats["g"], dtype), w, rotated=False)

        def kernel() -> None:
            core(buf, x, p.pad_top, p.pad_left, weights, y)

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        mats = self._mats()
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        # Rotating the kernel by 180 degrees reverses its 9 taps, i.e. the columns of G (x) G.
        g_rotated = np.ascontiguousarray(kron(mats["g"], mats["g"], dtype)[:, ::-1])
        weights = _Weights(g_rotated, w, rotated=True)
        core = _Correlation(mats, self.m, p.groups, p.out_channels, p.in_channels, p.batch,
                            p.in_h, p.in_w, dtype, cores_for(point.threads),
                            rotated=weights.rotated)
        buf = allocate(point, dtype, _flat(core.sizes))
        dx = np.empty(p.input_shape, dtype)

        def kernel() -> None:
            # Full convolution = correlation of dy, with 2 - pad zeros around it, and the
            # rotated kernel.
            core(buf, dy, 2 - p.pad_top, 2 - p.pad_left, weights, dx)

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        core = FilterGradient(self._mats(), self.m, p, dtype, cores_for(point.threads))
        buf = allocate(point, dtype, _flat(core.sizes))
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)

        def kernel() -> None:
            core(buf, x, dy, dw)

        return CpuPrepared(dw, kernel, workspace_of(buf))


def _flat(sizes: dict[str, int]) -> dict[str, tuple[int]]:
    """Scratch is allocated flat so that a chunk's view (a prefix) is contiguous."""
    return {name: (size,) for name, size in sizes.items()}


@dataclass(frozen=True)
class _Weights:
    """A correlation's weights as the core transforms them: w (K, C/g, 3, 3), G (x) G (its
    columns reversed for a rotated kernel), and whether the kernel is bwd_data's rotated one,
    whose filters are w's second axis (the problem's channels) and channels its first."""
    g_kron: np.ndarray
    w: np.ndarray
    rotated: bool

    def all_into(self, u: np.ndarray, parts: int) -> list[Callable[[], None]]:
        """Tasks writing U of every pair into u (positions, G, channels/g, filters/g): for a
        rotated kernel that is w's own order, (G, K/g, C/g)."""
        return _weight_tasks(self.g_kron, self.w, u, parts, swapped=not self.rotated)

    def filters_into(self, first: int, count: int, stage: np.ndarray | None,
                     u_part: np.ndarray) -> np.ndarray:
        """U of filters first..first+count-1 (one group), written into the scratch u_part, as a
        (positions, count, channels) view. A rotated kernel's filters are a column block of w:
        it is copied whole rows at a time into `stage` (K, count, taps), and its U left as
        (positions, K, count), read transposed (copying it transposed into (count, K, taps),
        runs of 9 values, took 2.9 of res5a F4 bwd_data's 11.6 ms)."""
        positions = len(self.g_kron)
        taps = self.w.reshape(self.w.shape[0], self.w.shape[1], -1)
        source = taps[first:first + count]
        if self.rotated:
            source = scratch(stage, (taps.shape[0], count, taps.shape[2]))
            np.copyto(source, taps[:, first:first + count])
        u = scratch(u_part, (positions,) + source.shape[:2])
        np.matmul(self.g_kron, source.reshape(-1, source.shape[2]).T,
                  out=u.reshape(positions, -1))
        return u.swapaxes(1, 2) if self.rotated else u


def _weight_tasks(g_kron: np.ndarray, w: np.ndarray, u: np.ndarray, parts: int,
                  swapped: bool = False) -> list[Callable[[], None]]:
    """Tasks that together write u[ab, g, i, j] = (G g G^T)[ab] of every (filter, channel)
    pair, each over a share of the weights. u is laid out (positions, G, K/g, C/g) as the
    weights are (a task: one GEMM (G (x) G) @ (9 x its pairs)), or, `swapped`, (positions, G,
    C/g, K/g) (a task: one GEMM (G (x) G) @ (9 x K/g) per channel, batched, reading and writing
    strided views: res5's weights, half the channels on one thread, 2.61 ms against 2.48
    unswapped, where a swapped copy of the weights first took 3.22). Run on the launch's
    threads at one BLAS thread each: a multithreaded GEMM here left OpenBLAS's workers
    spinning through the chunks that followed (res2a forward 6.3 -> 12-13 ms)."""
    groups, rows, cols = u.shape[1:]
    if not swapped:
        flat, u2d = w.reshape(-1, 9), u.reshape(len(u), -1)
        return [partial(np.matmul, g_kron, flat[first * cols:(first + count) * cols].T,
                        out=u2d[:, first * cols:(first + count) * cols])
                for first, count in even_parts(groups * rows, -(-groups * rows // parts))]
    w4 = w.reshape(groups, cols, rows, 9)   # (G, K/g, C/g, taps)
    shares = ([(g, n, 0, rows) for g, n in even_parts(groups, -(-groups // parts))]
              if groups > 1 else [(0, 1, c, n) for c, n in even_parts(rows, -(-rows // parts))])
    return [partial(np.matmul, g_kron,
                    w4[g:g + ng, :, c:c + nc].transpose(0, 2, 3, 1),       # (ng, nc, 9, K/g)
                    out=u[:, g:g + ng, c:c + nc].transpose(1, 2, 0, 3))    # (ng, nc, ab, K/g)
            for g, ng, c, nc in shares]


class WinogradF2(_Winograd):
    name = "winograd_f2x2_3x3"
    description = "Winograd F(2x2,3x3): 2x2 outputs per 4x4 tile, 2.25x fewer multiplies"
    m = 2
    # Transform entries are 0, +-1, +-1/2. Measured over 2400 random 3x3 problems per precision:
    # errors a median 0.12 of the factor-1 tolerance (2.4x the GEMM algorithms' 0.05), at most
    # 1.4 (2.1 on a 1-element output found by a targeted search). 4 covers it with headroom.
    error_factor = 4.0
    points = (Fraction(0), Fraction(1), Fraction(-1))


class WinogradF4(_Winograd):
    name = "winograd_f4x4_3x3"
    description = "Winograd F(4x4,3x3): 4x4 outputs per 6x6 tile, 4x fewer multiplies"
    m = 4
    # Points 0, +-1, 1/2, -2: measured 25-30% less fp32 error than Lavin & Gray's 0, +-1, +-2
    # (and than 0, +-1, +-1/2) on random data, as Barabasz et al. (2020) also found.
    points = (Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2))
    # Transform entries up to 5 (B^T) and 8 (A^T) amplify rounding. Measured over 2400 random
    # 3x3 problems per precision: errors a median 0.56 of the factor-1 tolerance (11x the GEMM
    # algorithms'), 99.9th percentile 3.8. The worst found, by hypothesis' search for failures,
    # 8.2 on a 12-element output (2x2 pixels, heavy padding); results of 1-2 elements reach 34,
    # as chance cancellation makes any relative error meaningless there. 16 covers the rest
    # with 2x headroom; on real layers (fp32 error ~2e-6) a wrong index errs ~1e4 times more.
    error_factor = 16.0
