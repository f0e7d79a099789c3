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
  single-threaded meanwhile (_workers.py), so copies and transforms use every core too;
- each 2-D transform X -> L X R^T is one GEMM with the Kronecker product L (x) R over all tiles
  and channels of a chunk (for F4 that is 4x the multiplies of the separable form, but
  the separable form is two GEMMs with an inner dimension of 6, which OpenBLAS runs 3-4x below
  its peak: measured 10-25% slower on chunks in cache, and slower still over memory);
- chunks are never under MIN_CHUNK_TILES tiles, so layers of few tiles and many channels
  (res4, res5 at batch 8) stay one chunk: the filter transform and each of the 36 GEMMs run
  once per launch over the whole batch, on BLAS's own threads.

The filter transform U = G g G^T stays inside the timed launch: a training step transforms new
weights every time, and oneDNN, the peer these algorithms are compared with, transforms them
in every call too. (Measured at batch 8: under 1% of F4's launch on ResNet-50's res2, 12-18% on
res4 and 35% on res5, whose 512x512 weights transform into 36 MiB for 7x7 images.)

Directions (stride 1, dilation 1, 3x3 only):
- bwd_data is the same tile algorithm on dy, padded by 2 - pad, with the kernel rotated by 180
  degrees and its two channel axes swapped: the rotation reverses the columns of G (x) G, the
  swap is a transposed GEMM operand, so no rotated copy of the weights is made;
- bwd_filter is F(3x3, mxm): each dy tile (m x m) acts as the "filter" correlated with its input
  tile, giving a 3x3 contribution; the sum over all tiles is one GEMM per tile position
  (dy tiles^T @ input tiles, the tiles being the GEMM's inner dimension).
"""
from __future__ import annotations

from fractions import Fraction
from typing import ClassVar

import numpy as np

from harness.reference import ProblemData
from harness.backends.cpu.toom_cook import matrices
from harness.backends.cpu._blas import gemm_into
from harness.backends.cpu._tiles import Chunk, Tiling, chunks, place_all, scratch
from harness.backends.cpu._workers import run_chunks
from harness.backends.cpu._common import CpuAlgorithm, CpuPrepared, allocate, workspace_of
from harness.problem import ConvProblem
from harness.sweep import Point
from harness.threads import available_cores


# Tiles per chunk (module docstring): a chunk's tile buffer (positions x tiles x the wider
# channel count) is sized to about CHUNK_BYTES, so that its buffers stay in this Xeon's 2 MiB
# L2 per core while each chunk's pipeline passes over them five times...
CHUNK_BYTES = 1 << 20
# ...but never under MIN_CHUNK_TILES tiles (GEMM rows), below which the per-position GEMMs
# ran well under BLAS's speed, and each chunk re-reads all transformed weights (36 MiB on
# res5): on layers of few tiles and many channels one chunk takes the whole batch and BLAS's
# own threads share its GEMMs.
MIN_CHUNK_TILES = 64
# bwd_filter sums every chunk's GEMMs into a (positions x K x C) accumulator per thread: at
# fewer tiles (the GEMMs' inner dimension) per chunk, reading and writing it back would cost
# more than its GEMMs on wide layers.
MIN_FILTER_CHUNK_TILES = 256


def _kron(a: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    return np.kron(a, b).astype(dtype)


def _chunks(t: Tiling, batch: int, widest: int, dtype: type, least: int) -> list[Chunk]:
    tile_bytes = t.alpha * t.alpha * widest * np.dtype(dtype).itemsize
    return chunks(t, batch, max(least, CHUNK_BYTES // tile_bytes))


def _slots(chunk_list: list[Chunk]) -> int:
    """Threads (scratch slots) a launch may use: one per core, at most one per chunk."""
    return max(1, min(available_cores(), len(chunk_list)))


def _per_slot(sizes: dict[str, int], slots: int) -> dict[str, int]:
    return {f"{name}{slot}": size for slot in range(slots) for name, size in sizes.items()}


def _transform_input(t: Tiling, bb: np.ndarray, windows: np.ndarray, chunk: Chunk,
                     tiles: np.ndarray, out: np.ndarray) -> None:
    """out (a*a, tiles, C) = B^T d B of every window d of a chunk, gathered from the plane's
    `windows` view into `tiles` (same size as out) by one copy."""
    view = chunk.of(windows)
    gathered = tiles.reshape(view.shape)
    np.copyto(gathered, view)
    np.matmul(bb, gathered.reshape(len(bb), -1), out=out.reshape(len(bb), -1))


# ---- the GEMMs per tile position ---------------------------------------------------------------
def _by_group(a: np.ndarray, groups: int) -> np.ndarray:
    """(positions, tiles, G*n) -> view (positions, G, tiles, n)."""
    positions, tiles, _ = a.shape
    return a.reshape(positions, tiles, groups, -1).transpose(0, 2, 1, 3)


def _multiply(v: np.ndarray, u: np.ndarray, out: np.ndarray, groups: int) -> None:
    """out[ab, t, g*F + f] = sum_c v[ab, t, g*C + c] u[ab, g, c, f]: one GEMM per position and
    group, over all tiles. With one channel per group (depthwise) it is an outer product, done
    by broadcasting instead of one tiny GEMM per (position, group)."""
    lhs, res = _by_group(v, groups), _by_group(out, groups)
    if u.shape[-2] == 1:
        np.multiply(lhs, u, out=res)
    else:
        np.matmul(lhs, u, out=res)


def _correlate_tiles(dy_t: np.ndarray, v: np.ndarray, acc: np.ndarray, groups: int,
                     accumulate: bool) -> None:
    """acc[ab, g] (+)= dy_t[ab, :, g]^T @ v[ab, :, g], the sum over a chunk's tiles (the GEMMs'
    inner dimension). Added inside BLAS (beta = 1) where NumPy's BLAS allows it: an extra pass
    over the accumulator per chunk would cost as much as a narrow chunk's GEMMs."""
    lhs = _by_group(dy_t, groups).swapaxes(-1, -2)
    rhs = _by_group(v, groups)
    gemm = gemm_into(acc.dtype)
    depthwise = lhs.shape[-2] == 1 and rhs.shape[-1] == 1
    if gemm is not None and not depthwise:
        for ab in range(acc.shape[0]):
            for g in range(groups):
                gemm(lhs[ab, g], rhs[ab, g], acc[ab, g], accumulate)
        return
    product = np.einsum("...it,...tj->...ij", lhs, rhs) if depthwise else np.matmul(lhs, rhs)
    if accumulate:
        np.add(acc, product, out=acc)
    else:
        np.copyto(acc, product)


# ---- the two tile pipelines --------------------------------------------------------------------
class _Correlation:
    """out (N, F, Ho, Wo) = stride-1 3x3 correlation, tile by tile, of an NCHW source with C
    channels placed at (top, left) in an otherwise zero plane, given the transformed weights as
    one (C/groups x F/groups) matrix per tile position and group.

    Per chunk, two tile buffers of its thread take turns (each step reads one and writes the
    other): tiles, then transformed tiles, then their products with U, then the output tiles,
    then (where tiles overhang the output) a cropped copy."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, groups: int, channels: int,
                 filters: int, batch: int, rows: int, cols: int, dtype: type):
        self.t = t = Tiling.of(m, rows, cols)
        self.groups, self.channels, self.filters = groups, channels, filters
        self.bb = _kron(mats["bt"], mats["bt"], dtype)    # (a*a, a*a)
        self.aa = _kron(mats["at"], mats["at"], dtype)    # (m*m, a*a)
        positions, outputs = t.alpha * t.alpha, t.m * t.m
        self.chunks = _chunks(t, batch, max(channels, filters), dtype, MIN_CHUNK_TILES)
        self.slots = _slots(self.chunks)
        self.overhang = (t.m * t.th, t.m * t.tw) != (rows, cols)
        most = max(c.tiles(t) for c in self.chunks)
        slot = {"front": most * positions * max(channels, filters),
                "back": most * max(positions * channels, outputs * filters)}
        if self.overhang:
            slot["crop"] = most * outputs * filters
        self.sizes = {"plane": int(np.prod(t.plane(batch, channels))),
                      **_per_slot(slot, self.slots)}

    def __call__(self, buf: dict[str, np.ndarray], src: np.ndarray, top: int, left: int,
                 u: np.ndarray, out: np.ndarray) -> None:
        plane = scratch(buf["plane"], self.t.plane(src.shape[0], self.channels))
        place_all(src, top, left, plane, self.slots)
        windows = self.t.input_windows(plane)
        run_chunks(self.chunks, lambda slot, chunk: self._chunk(buf, slot, chunk, windows, u,
                                                                 out), self.slots)

    def _chunk(self, buf: dict[str, np.ndarray], slot: int, chunk: Chunk, windows: np.ndarray,
               u: np.ndarray, out: np.ndarray) -> None:
        t, front, back = self.t, buf[f"front{slot}"], buf[f"back{slot}"]
        positions, outputs, tiles = t.alpha * t.alpha, t.m * t.m, chunk.tiles(t)
        v = scratch(back, (positions, tiles, self.channels))
        _transform_input(t, self.bb, windows, chunk, scratch(front, v.shape), v)
        products = scratch(front, (positions, tiles, self.filters))
        _multiply(v, u, products, self.groups)
        y = scratch(back, (outputs, tiles, self.filters))
        np.matmul(self.aa, products.reshape(positions, -1), out=y.reshape(outputs, -1))
        self._write(buf, slot, chunk, y, out)

    def _write(self, buf: dict[str, np.ndarray], slot: int, chunk: Chunk, y: np.ndarray,
               out: np.ndarray) -> None:
        """NCHW out[chunk's images, :, its rows] = the output tiles y [i, j, tile, f]: one
        transposing copy, into `out` itself unless tiles overhang it (then into scratch, and
        its crop into `out`)."""
        t, m, f = self.t, self.t.m, self.filters
        images, rows = chunk.n1 - chunk.n0, chunk.u1 - chunk.u0
        tiles = y.reshape(m, m, images, rows, t.tw, f).transpose(2, 5, 3, 0, 4, 1)
        first = m * chunk.u0
        if not self.overhang:
            band = out[chunk.n0:chunk.n1, :, first:first + m * rows]
            np.copyto(band.reshape(tiles.shape), tiles)
            return
        crop = scratch(buf[f"crop{slot}"], tiles.shape)
        np.copyto(crop, tiles)
        height = min(m * rows, out.shape[2] - first)
        np.copyto(out[chunk.n0:chunk.n1, :, first:first + height],
                  crop.reshape(images, f, m * rows, m * t.tw)[:, :, :height, :out.shape[3]])


class _FilterGradient:
    """dw (K, C/groups, 3, 3) = F(3x3, mxm) over the m x m tiles of dy: per tile position one
    GEMM (K x tiles) @ (tiles x C) sums the products of transformed dy and input tiles.

    Each thread sums its chunks into an accumulator of its own (the accumulators are added at
    the end). Its tile buffer "front" holds the input tiles, then the dy tiles; "back" the
    transformed input tiles and "dy_t" the transformed dy tiles, the GEMMs' two operands."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, p: ConvProblem, dtype: type):
        self.p, self.t = p, (t := Tiling.of(m, p.out_h, p.out_w))
        self.bb = _kron(mats["bt"], mats["bt"], dtype)      # (a*a, a*a)
        self.gg = _kron(mats["g_f"], mats["g_f"], dtype)    # (a*a, m*m)
        self.aa = _kron(mats["at_f"], mats["at_f"], dtype)  # (9, a*a)
        positions = t.alpha * t.alpha
        c, k = p.in_channels, p.out_channels
        self.chunks = _chunks(t, p.batch, max(c, k), dtype, MIN_FILTER_CHUNK_TILES)
        self.slots = _slots(self.chunks)
        most = max(chunk.tiles(t) for chunk in self.chunks)
        acc = positions * k * p.channels_per_group
        slot = {"front": positions * most * max(c, k), "back": positions * most * c,
                "dy_t": positions * most * k, "acc": acc}
        self.sizes = {"plane": int(np.prod(t.plane(p.batch, c))),
                      "dy_plane": int(np.prod(t.output_plane(p.batch, k))),
                      "taps": 9 * acc // positions, **_per_slot(slot, self.slots)}

    def __call__(self, buf: dict[str, np.ndarray], x: np.ndarray, dy: np.ndarray,
                 dw: np.ndarray) -> None:
        p, t = self.p, self.t
        plane = scratch(buf["plane"], t.plane(p.batch, p.in_channels))
        dy_plane = scratch(buf["dy_plane"], t.output_plane(p.batch, p.out_channels))
        place_all(x, p.pad_top, p.pad_left, plane, self.slots)
        place_all(dy, 0, 0, dy_plane, self.slots)
        windows, dy_tiles = t.input_windows(plane), t.output_tiles(dy_plane)
        positions = t.alpha * t.alpha
        acc_shape = (positions, p.groups, p.filters_per_group, p.channels_per_group)
        started = [False] * self.slots

        def work(slot: int, chunk: Chunk) -> None:
            v = self._input_tiles(buf, slot, windows, chunk)
            dy_t = self._gradient_tiles(buf, slot, dy_tiles, chunk)
            acc = buf[f"acc{slot}"].reshape(acc_shape)
            _correlate_tiles(dy_t, v, acc, p.groups, accumulate=started[slot])
            started[slot] = True

        run_chunks(self.chunks, work, self.slots)
        acc = buf["acc0"].reshape(positions, -1)
        for slot in range(1, self.slots):
            if started[slot]:
                np.add(acc, buf[f"acc{slot}"].reshape(acc.shape), out=acc)
        # dw[k, c, r, s] = sum_ab (A_f (x) A_f)[rs, ab] acc[ab, k, c]. Written straight into dw
        # as acc^T @ (A_f (x) A_f)^T, a GEMM only 9 wide, it measured 1.3-2x slower than this
        # GEMM plus a transposing copy (res5: acc is 38 MB).
        taps = buf["taps"].reshape(3, 3, p.out_channels, p.channels_per_group)
        np.matmul(self.aa, acc, out=taps.reshape(9, -1))
        np.copyto(dw, taps.transpose(2, 3, 0, 1))

    def _input_tiles(self, buf: dict[str, np.ndarray], slot: int, windows: np.ndarray,
                     chunk: Chunk) -> np.ndarray:
        """B^T d B of every input tile of a chunk: (a*a, tiles, C)."""
        t = self.t
        v = scratch(buf[f"back{slot}"],
                     (t.alpha * t.alpha, chunk.tiles(t), self.p.in_channels))
        _transform_input(t, self.bb, windows, chunk, scratch(buf[f"front{slot}"], v.shape), v)
        return v

    def _gradient_tiles(self, buf: dict[str, np.ndarray], slot: int, dy_tiles: np.ndarray,
                        chunk: Chunk) -> np.ndarray:
        """G_f e G_f^T of every m x m dy tile of a chunk (the overhang is zero): (a*a, tiles, K)."""
        t, k = self.t, self.p.out_channels
        positions, tiles = t.alpha * t.alpha, chunk.tiles(t)
        view = chunk.of(dy_tiles)
        e = scratch(buf[f"front{slot}"], view.shape)
        np.copyto(e, view)
        dy_t = scratch(buf[f"dy_t{slot}"], (positions, tiles, k))
        np.matmul(self.gg, e.reshape(t.m * t.m, -1), out=dy_t.reshape(positions, -1))
        return dy_t


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
                            p.out_h, p.out_w, dtype)
        g_kron = _kron(mats["g"], mats["g"], dtype)
        buf = allocate(point, dtype, dict(_flat(core.sizes), u=_weights_shape(p, self.m)))
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)
        u = buf["u"]

        def kernel() -> None:
            _transform_weights(g_kron, w, u)
            core(buf, x, p.pad_top, p.pad_left, u.swapaxes(-1, -2), y)

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        mats = self._mats()
        core = _Correlation(mats, self.m, p.groups, p.out_channels, p.in_channels, p.batch,
                            p.in_h, p.in_w, dtype)
        # Rotating the kernel by 180 degrees reverses its 9 taps, i.e. the columns of G (x) G.
        g_rotated = np.ascontiguousarray(_kron(mats["g"], mats["g"], dtype)[:, ::-1])
        buf = allocate(point, dtype, dict(_flat(core.sizes), u=_weights_shape(p, self.m)))
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        u = buf["u"]

        def kernel() -> None:
            _transform_weights(g_rotated, w, u)
            # Full convolution = correlation of dy, with 2 - pad zeros around it, and the
            # rotated kernel whose channel axes are swapped: u[ab, g] is (K/g x C/g) as it is.
            core(buf, dy, 2 - p.pad_top, 2 - p.pad_left, u, dx)

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        core = _FilterGradient(self._mats(), self.m, p, dtype)
        buf = allocate(point, dtype, _flat(core.sizes))
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)

        def kernel() -> None:
            core(buf, x, dy, dw)

        return CpuPrepared(dw, kernel, workspace_of(buf))


def _flat(sizes: dict[str, int]) -> dict[str, tuple[int]]:
    """Scratch is allocated flat so that a block's view (a prefix) is contiguous."""
    return {name: (size,) for name, size in sizes.items()}


def _weights_shape(p: ConvProblem, m: int) -> tuple[int, int, int, int]:
    return ((m + 2) ** 2, p.groups, p.filters_per_group, p.channels_per_group)


def _transform_weights(g_kron: np.ndarray, w: np.ndarray, u: np.ndarray) -> None:
    """u[ab, g, k, c] = G g G^T for every (filter, channel) pair: one GEMM (G (x) G) @ the
    weights as (9, K*C/g)."""
    np.matmul(g_kron, w.reshape(-1, 9).T, out=u.reshape(u.shape[0], -1))


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
