"""Winograd minimal filtering (Lavin & Gray 2016): F(2x2,3x3) and F(4x4,3x3), all directions.

Y = A^T [ (G g G^T) (.) (B^T d B) ] A on overlapping (m+2)^2 input tiles. The elementwise
product summed over channels is, per tile position (a, b), a GEMM: M[ab] = V[ab] (tiles x C)
@ U[ab]^T (C x K), so the bulk of the work is (m+2)^2 batched GEMMs doing 9m^2/(m+2)^2 of
direct convolution's multiplies (1/2.25 for m=2, 1/4 for m=4).

The transform matrices are not typed in: `toom_cook` builds them from interpolation points by
the Toom-Cook construction (evaluate at the points and at infinity, interpolate), exactly in
rational arithmetic; tests/test_cpu_algorithms.py checks them against Lavin & Gray's published
matrices and against exact correlation.

NumPy spends its time in data movement and in thin GEMMs, so per block of images:
- the NCHW input is copied once into a zero-bordered NHWC plane, and every tile's window is
  gathered by one copy of an as_strided view of that plane: channels innermost, each copy moves
  runs of C contiguous values (gathering straight from NCHW moves runs of 1 value, every m-th,
  and measured 1.5-4x slower on ResNet-50's 3x3 layers);
- each 2-D transform X -> L X R^T is one GEMM with the Kronecker product L (x) R over all tiles
  and channels of the block (for F4 that is 4x the multiplies of the separable form, but
  the separable form is two GEMMs with an inner dimension of 6, which OpenBLAS runs 3-4x below
  its peak: measured no faster, and it needs a second pass over memory);
- the results are scattered by one copy into an NHWC plane and one transposing copy into NCHW;
- blocks are sized by the GEMMs' shape, not by bytes (`MIN_GEMM_COLUMNS`): every GEMM gets at
  least that many tiles, so at ResNet-50's batch 8 F4 takes each 3x3 layer in one block: the
  filter transform and each of the 36 GEMMs run once per launch with the widest operands.

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
from harness.backends.cpu._tiles import Tiling, place, unplace
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate,
                                          workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point


# Tiles (GEMM columns, or the inner dimension for bwd_filter) per block: images are added to a
# block until its GEMMs are at least this wide. Measured on the 2-core VM, the per-position
# GEMMs ran ~20% slower on 392 tiles than on 1568 (64 channels) and on 64 than on 128 (256
# channels), and every block re-reads the transformed weights (36 MiB for res5's 512 channels,
# whose 7x7 images give 4 tiles each). F4 takes each ResNet-50 3x3 layer at batch 8 whole.
MIN_GEMM_COLUMNS = 1024
# ...unless a tile buffer would then exceed this: a memory bound for large images and batches
# (VGG's 224x224 layers reach MIN_GEMM_COLUMNS with one image anyway).
BLOCK_BYTES = 256 << 20


def _kron(a: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    return np.kron(a, b).astype(dtype)


# ---- tiles and planes --------------------------------------------------------------------------
def _image_blocks(batch: int, per_image: int, image_bytes: int) -> list[tuple[int, int]]:
    """(first image, images) of near-equal blocks, each with at least MIN_GEMM_COLUMNS tiles
    (the whole batch when it has fewer) and at most BLOCK_BYTES in a tile buffer."""
    least = -(-MIN_GEMM_COLUMNS // per_image)
    least = max(1, min(least, BLOCK_BYTES // max(1, image_bytes)))
    count = max(1, batch // least)
    size, larger = divmod(batch, count)
    sizes = [size + 1] * larger + [size] * (count - larger)
    return [(sum(sizes[:i]), n) for i, n in enumerate(sizes)]


def _scratch(buf: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A contiguous array of `shape` at the start of flat scratch `buf` (blocks of fewer images
    use a prefix)."""
    return buf[:int(np.prod(shape))].reshape(shape)


def _transform_input(t: Tiling, bb: np.ndarray, src: np.ndarray, top: int, left: int,
                     plane: np.ndarray, tiles: np.ndarray, out: np.ndarray) -> None:
    """out (a*a, tiles, C) = B^T d B of every window d of NCHW `src` placed at (top, left) in
    the zero-bordered NHWC `plane`, gathered into `tiles` (same shape as out) by one copy."""
    place(src, top, left, plane)
    windows = t.input_windows(plane)
    np.copyto(tiles.reshape(windows.shape), windows)
    np.matmul(bb, tiles.reshape(len(bb), -1), out=out.reshape(len(bb), -1))


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


def _correlate_tiles(dy_t: np.ndarray, v: np.ndarray, out: np.ndarray, groups: int) -> None:
    """out[ab, g] = dy_t[ab, :, g]^T @ v[ab, :, g], the sum over all tiles (the GEMMs' inner
    dimension); a dot product per (position, group) when depthwise."""
    lhs = _by_group(dy_t, groups).swapaxes(-1, -2)
    rhs = _by_group(v, groups)
    if lhs.shape[-2] == 1 and rhs.shape[-1] == 1:
        np.einsum("...it,...tj->...ij", lhs, rhs, out=out)
    else:
        np.matmul(lhs, rhs, out=out)


# ---- the two tile pipelines --------------------------------------------------------------------
class _Correlation:
    """out (N, F, Ho, Wo) = stride-1 3x3 correlation, tile by tile, of an NCHW source with C
    channels placed at (top, left) in an otherwise zero plane, given the transformed weights as
    one (C/groups x F/groups) matrix per tile position and group.

    Two tile buffers take turns (each step reads one and writes the other): tiles, then
    transformed tiles, then their products with U, then the output tiles, then the output
    plane."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, groups: int, channels: int,
                 filters: int, batch: int, rows: int, cols: int, dtype: type):
        self.t = t = Tiling.of(m, rows, cols)
        self.groups, self.channels, self.filters = groups, channels, filters
        self.bb = _kron(mats["bt"], mats["bt"], dtype)    # (a*a, a*a)
        self.aa = _kron(mats["at"], mats["at"], dtype)    # (m*m, a*a)
        positions, outputs = t.alpha * t.alpha, t.m * t.m
        widest = max(channels, filters)
        item = np.dtype(dtype).itemsize
        self.blocks = _image_blocks(batch, t.per_image, positions * t.per_image * widest * item)
        images = max(n for _, n in self.blocks)
        tiles = images * t.per_image
        self.sizes = {"plane": int(np.prod(t.plane(images, channels))),
                      "front": tiles * positions * widest,
                      "back": tiles * max(positions * channels, outputs * filters)}

    def __call__(self, buf: dict[str, np.ndarray], src: np.ndarray, top: int, left: int,
                 u: np.ndarray, out: np.ndarray) -> None:
        t, c, f = self.t, self.channels, self.filters
        positions, outputs = t.alpha * t.alpha, t.m * t.m
        for n0, n in self.blocks:
            tiles = n * t.per_image
            plane = _scratch(buf["plane"], t.plane(n, c))
            v = _scratch(buf["back"], (positions, tiles, c))
            _transform_input(t, self.bb, src[n0:n0 + n], top, left, plane,
                             _scratch(buf["front"], v.shape), v)
            products = _scratch(buf["front"], (positions, tiles, f))
            _multiply(v, u, products, self.groups)
            y = _scratch(buf["back"], (outputs, tiles, f))
            np.matmul(self.aa, products.reshape(positions, -1), out=y.reshape(outputs, -1))
            result = _scratch(buf["front"], t.output_plane(n, f))
            np.copyto(t.output_tiles(result), y.reshape(t.output_tiles(result).shape))
            unplace(result, out[n0:n0 + n])


class _FilterGradient:
    """dw (K, C/groups, 3, 3) = F(3x3, mxm) over the m x m tiles of dy: per tile position one
    GEMM (K x tiles) @ (tiles x C) sums the products of transformed dy and input tiles.

    The tile buffer "front" holds the input tiles, then the dy tiles; "back" the transformed
    input tiles and "dy_t" the transformed dy tiles, the GEMMs' two operands."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, p: ConvProblem, dtype: type):
        self.p, self.t = p, (t := Tiling.of(m, p.out_h, p.out_w))
        self.bb = _kron(mats["bt"], mats["bt"], dtype)      # (a*a, a*a)
        self.gg = _kron(mats["g_f"], mats["g_f"], dtype)    # (a*a, m*m)
        self.aa = _kron(mats["at_f"], mats["at_f"], dtype)  # (9, a*a)
        positions = t.alpha * t.alpha
        item = np.dtype(dtype).itemsize
        c, k = p.in_channels, p.out_channels
        self.blocks = _image_blocks(p.batch, t.per_image,
                                    positions * t.per_image * max(c, k) * item)
        images = max(n for _, n in self.blocks)
        tiles = images * t.per_image
        acc = positions * k * p.channels_per_group
        self.sizes = {"plane": int(np.prod(t.plane(images, c))),
                      "dy_plane": int(np.prod(t.output_plane(images, k))),
                      "front": positions * tiles * max(c, k), "back": positions * tiles * c,
                      "dy_t": positions * tiles * k, "acc": acc, "taps": 9 * acc // positions}
        if len(self.blocks) > 1:
            self.sizes["part"] = acc

    def __call__(self, buf: dict[str, np.ndarray], x: np.ndarray, dy: np.ndarray,
                 dw: np.ndarray) -> None:
        p, t = self.p, self.t
        positions = t.alpha * t.alpha
        acc_shape = (positions, p.groups, p.filters_per_group, p.channels_per_group)
        acc = buf["acc"].reshape(acc_shape)
        for i, (n0, n) in enumerate(self.blocks):
            v = self._input_tiles(buf, x[n0:n0 + n])
            dy_t = self._gradient_tiles(buf, dy[n0:n0 + n])
            # Several blocks only where one would hold over BLOCK_BYTES or at least twice
            # MIN_GEMM_COLUMNS tiles: adding their partial sums then costs under 1/4000 of
            # the GEMMs' multiply-adds.
            part = acc if i == 0 else buf["part"].reshape(acc_shape)
            _correlate_tiles(dy_t, v, part, p.groups)
            if i:
                np.add(acc, part, out=acc)
        # dw[k, c, r, s] = sum_ab (A_f (x) A_f)[rs, ab] acc[ab, k, c]. Written straight into dw
        # as acc^T @ (A_f (x) A_f)^T, a GEMM only 9 wide, it measured 1.3-2x slower than this
        # GEMM plus a transposing copy (res5: acc is 38 MB).
        taps = buf["taps"].reshape(3, 3, p.out_channels, p.channels_per_group)
        np.matmul(self.aa, acc.reshape(positions, -1), out=taps.reshape(9, -1))
        np.copyto(dw, taps.transpose(2, 3, 0, 1))

    def _input_tiles(self, buf: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """B^T d B of every input tile of a block: (a*a, tiles, C)."""
        p, t, n = self.p, self.t, x.shape[0]
        v = _scratch(buf["back"], (t.alpha * t.alpha, n * t.per_image, p.in_channels))
        _transform_input(t, self.bb, x, p.pad_top, p.pad_left,
                         _scratch(buf["plane"], t.plane(n, p.in_channels)),
                         _scratch(buf["front"], v.shape), v)
        return v

    def _gradient_tiles(self, buf: dict[str, np.ndarray], dy: np.ndarray) -> np.ndarray:
        """G_f e G_f^T of every m x m dy tile of a block (the overhang is zero): (a*a, tiles, K)."""
        p, t = self.p, self.t
        positions, tiles = t.alpha * t.alpha, dy.shape[0] * t.per_image
        plane = _scratch(buf["dy_plane"], t.output_plane(dy.shape[0], p.out_channels))
        place(dy, 0, 0, plane)
        e = _scratch(buf["front"], (t.m * t.m, tiles, p.out_channels))
        np.copyto(e.reshape(t.output_tiles(plane).shape), t.output_tiles(plane))
        dy_t = _scratch(buf["dy_t"], (positions, tiles, p.out_channels))
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
