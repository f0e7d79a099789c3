"""Winograd minimal filtering (Lavin & Gray 2016): F(2x2,3x3) and F(4x4,3x3), all directions.

Y = A^T [ (G g G^T) (.) (B^T d B) ] A on overlapping (m+2)^2 input tiles. The elementwise
product summed over channels is, per tile position (a, b), a GEMM: M[ab] = U[ab] (K x C) @
V[ab] (C x tiles), so the bulk of the work is (m+2)^2 batched GEMMs doing 9m^2/(m+2)^2 of
direct convolution's multiplies (1/2.25 for m=2, 1/4 for m=4).

The transform matrices are not typed in: `toom_cook` builds them from interpolation points by
the Toom-Cook construction (evaluate at the points and at infinity, interpolate), exactly in
rational arithmetic; tests/test_cpu_algorithms.py checks them against Lavin & Gray's published
matrices and against exact correlation.

The data movement is where NumPy spends its time, so per block of images: one strided copy per
tile position gathers the tiles straight from the unpadded NCHW input (padding entries are
never written and stay zero), each 2-D transform is a single GEMM with a Kronecker product
(B^T (x) B^T is 36 x 36 for F4) over all tiles of the block, and one strided copy per output
position scatters the results into NCHW.

Directions (stride 1, dilation 1, 3x3 only):
- bwd_data is the same tile algorithm on dy, padded by 2 - pad, with the kernel rotated by 180
  degrees and its two channel axes swapped (full convolution = correlation with the flip);
- bwd_filter is F(3x3, mxm): each dy tile (m x m) acts as the "filter" correlated with its input
  tile, giving a 3x3 contribution; the sum over tiles is again one GEMM per tile position.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Sequence

import numpy as np

from harness.reference import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate,
                                          workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point

Matrix = list[list[Fraction]]

# Images per block: the most (a divisor of the batch) whose gathered tiles fit this size: 2, 4,
# 4 and 8 images for ResNet-50's 3x3 layers at batch 8. Measured on the 2-core VM, 2-8 MiB ran
# within the machine's +-20% noise of each other; 1 MiB (GEMMs of under 200 tiles) was slower.
BLOCK_BYTES = 4 << 20


# ---- the Toom-Cook construction ----------------------------------------------------------------
def _poly_mul(a: Sequence[Fraction], b: Sequence[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def toom_cook(outputs: int, taps: int, points: Sequence[Fraction]) -> tuple[Matrix, Matrix, Matrix]:
    """(A^T, G, B^T) of the minimal 1-D correlation F(outputs, taps), y = A^T[(G g) (.) (B^T d)].

    Correlation is the transpose of polynomial multiplication, which evaluates both factors at
    alpha = outputs + taps - 1 points (the given finite ones and infinity) and interpolates:
    A^T is the transposed evaluation matrix of the outputs' polynomial, G that of the filter's,
    B^T the transposed Lagrange interpolation. The Lagrange denominators f_j are moved from B^T
    into G (as in Lavin & Gray), which leaves B^T with the coefficients of
    N_j(x) = prod_{l != j} (x - a_l) and, for infinity, of M(x) = prod_l (x - a_l).
    """
    alpha = outputs + taps - 1
    if len(points) != alpha - 1 or len(set(points)) != len(points):
        raise ValueError(f"F({outputs},{taps}) needs {alpha - 1} distinct finite points")
    at = [[a**i for a in points] + [Fraction(int(i == outputs - 1))] for i in range(outputs)]
    g, bt = [], []
    for j, a in enumerate(points):
        others = [b for i, b in enumerate(points) if i != j]
        numerator, denominator = [Fraction(1)], Fraction(1)
        for b in others:
            numerator = _poly_mul(numerator, [-b, Fraction(1)])
            denominator *= a - b
        g.append([a**k / denominator for k in range(taps)])
        bt.append(numerator + [Fraction(0)] * (alpha - len(numerator)))
    g.append([Fraction(int(k == taps - 1)) for k in range(taps)])
    everything = [Fraction(1)]
    for b in points:
        everything = _poly_mul(everything, [-b, Fraction(1)])
    bt.append(everything)
    return at, g, bt


def as_array(matrix: Matrix) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in matrix])


# ---- the tile engine ---------------------------------------------------------------------------
# Each 2-D transform X -> L X R^T of a tile is one GEMM with the Kronecker product L (x) R applied
# to the flattened tiles: all tiles of a block at once, with BLAS's fused multiply-adds, where the
# separable form would need a second gather and twice the passes over memory.
@dataclass(frozen=True)
class _Tiles:
    """A tiling of an output (rows x cols) into m x m tiles of alpha x alpha input windows."""
    m: int
    alpha: int
    th: int
    tw: int

    @classmethod
    def of(cls, m: int, alpha: int, rows: int, cols: int) -> "_Tiles":
        return cls(m, alpha, -(-rows // m), -(-cols // m))

    def gather(self, src: np.ndarray, top: int, left: int, size: int, out: np.ndarray) -> None:
        """out[i, j][c, n, u, v] = src[n, c, m*u + i - top, m*v + j - left] for the size x size
        window of every tile, read straight from the unpadded NCHW source: entries that fall in
        the padding are never written and keep the zeros the buffer was allocated with."""
        source = src.transpose(1, 0, 2, 3)
        for i in range(size):
            rows = _clip(i - top, src.shape[2], self.th, self.m)
            for j in range(size):
                cols = _clip(j - left, src.shape[3], self.tw, self.m)
                if rows and cols:
                    np.copyto(out[i, j][:, :, rows[0], cols[0]], source[:, :, rows[1], cols[1]])

    def scatter(self, y: np.ndarray, out: np.ndarray) -> None:
        """out[n, k, m*u + i, m*v + j] = y[i, j, k, n, u, v], dropping the tiles' overhang."""
        target = out.transpose(1, 0, 2, 3)
        for i in range(self.m):
            rows = _clip(i, out.shape[2], self.th, self.m)
            for j in range(self.m):
                cols = _clip(j, out.shape[3], self.tw, self.m)
                if rows and cols:
                    np.copyto(target[:, :, rows[1], cols[1]], y[i, j][:, :, rows[0], cols[0]])


def _clip(offset: int, size: int, tiles: int, m: int) -> tuple[slice, slice] | None:
    """(tile slice, source slice) of the tiles u < tiles whose element m*u + offset lies in
    [0, size), or None when none does."""
    first = max(0, -(offset // m))
    last = min(tiles, (size - 1 - offset) // m + 1)
    if last <= first:
        return None
    start = m * first + offset
    return slice(first, last), slice(start, start + m * (last - first - 1) + 1, m)


def _image_blocks(batch: int, bytes_per_image: int) -> list[tuple[int, int]]:
    """Equal blocks of images (a divisor of the batch), so every block writes the same entries
    of the tile buffers and the padding entries stay zero."""
    most = max(1, BLOCK_BYTES // max(1, bytes_per_image))
    size = max(d for d in range(1, batch + 1) if batch % d == 0 and d <= most)
    return [(n0, size) for n0 in range(0, batch, size)]


def _flat(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int]]:
    """Scratch is allocated flat so that a block's view (a prefix) is contiguous."""
    return {name: (int(np.prod(shape)),) for name, shape in shapes.items()}


def _block(buf: dict[str, np.ndarray], name: str, shapes: dict[str, tuple[int, ...]],
           axis: int, images: int) -> np.ndarray:
    """Contiguous view of flat scratch `name` with its image axis shortened to `images`."""
    shape = list(shapes[name])
    shape[axis] = images
    return buf[name][:int(np.prod(shape))].reshape(shape)


def _kron(a: np.ndarray, b: np.ndarray, dtype: type) -> np.ndarray:
    return np.kron(a, b).astype(dtype)


def _gemm(u: np.ndarray, v: np.ndarray, out: np.ndarray) -> None:
    """out[ab, g] = u[ab, g] @ v[ab, g]; with one channel per group (depthwise) it is an outer
    product, done by broadcasting instead of one tiny GEMM per (tile position, group)."""
    if u.shape[-1] == 1:
        np.multiply(u, v, out=out)
    else:
        np.matmul(u, v, out=out)


def _gemm_nt(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b^T over the last axis (tiles); a dot product per group when depthwise."""
    if a.shape[-2] == 1 and b.shape[-2] == 1:
        np.einsum("...it,...jt->...ij", a, b, out=out)
    else:
        np.matmul(a, b.swapaxes(-1, -2), out=out)


def _matrices(m: int, points: Sequence[Fraction]) -> dict[str, np.ndarray]:
    """Forward F(m, 3) and filter-gradient F(3, m) matrices on the same points (same B^T)."""
    at, g, bt = toom_cook(m, 3, points)
    at_f, g_f, bt_f = toom_cook(3, m, points)
    assert bt_f == bt
    return {"at": as_array(at), "g": as_array(g), "bt": as_array(bt), "at_f": as_array(at_f),
            "g_f": as_array(g_f)}


class _Correlation:
    """out (N, K, Ho, Wo) = stride-1 3x3 correlation, tile by tile, of weights (K, C/groups, 3, 3)
    with an NCHW source placed at (top, left) in an otherwise zero input plane."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, groups: int, channels: int,
                 filters: int, batch: int, rows: int, cols: int, dtype: type):
        a = m + 2
        self.t = t = _Tiles.of(m, a, rows, cols)
        self.groups, self.channels, self.filters = groups, channels, filters
        self.gg = _kron(mats["g"], mats["g"], dtype)      # (a*a, 9)
        self.bb = _kron(mats["bt"], mats["bt"], dtype)    # (a*a, a*a)
        self.aa = _kron(mats["at"], mats["at"], dtype)    # (m*m, a*a)
        item = np.dtype(dtype).itemsize
        self.blocks = _image_blocks(batch, a * a * channels * t.th * t.tw * item)
        nb = max(n for _, n in self.blocks)
        cg, kg = channels // groups, filters // groups
        self.shapes = {
            "u": (a * a, groups, kg, cg), "d": (a, a, channels, nb, t.th, t.tw),
            "v": (a * a, channels, nb, t.th, t.tw), "m": (a * a, filters, nb, t.th, t.tw),
            "y": (m, m, filters, nb, t.th, t.tw)}

    def __call__(self, buf: dict[str, np.ndarray], src: np.ndarray, top: int, left: int,
                 w: np.ndarray, out: np.ndarray) -> None:
        t, a, m = self.t, self.t.alpha, self.t.m
        g, cg, kg = self.groups, self.channels // self.groups, self.filters // self.groups
        u = buf["u"].reshape(self.shapes["u"])
        # U = G w G^T for every (filter, channel) pair: (G (x) G) @ weights as (9, K*C/g).
        np.matmul(self.gg, w.reshape(-1, 9).T, out=u.reshape(a * a, -1))
        for n0, n in self.blocks:
            tiles = _block(buf, "d", self.shapes, 3, n)
            t.gather(src[n0:n0 + n], top, left, a, tiles)
            v = _block(buf, "v", self.shapes, 2, n)
            np.matmul(self.bb, tiles.reshape(a * a, -1), out=v.reshape(a * a, -1))
            mm = _block(buf, "m", self.shapes, 2, n)
            _gemm(u, v.reshape(a * a, g, cg, -1), mm.reshape(a * a, g, kg, -1))
            y = _block(buf, "y", self.shapes, 3, n)
            np.matmul(self.aa, mm.reshape(a * a, -1), out=y.reshape(m * m, -1))
            t.scatter(y, out[n0:n0 + n])


class _FilterGradient:
    """dw (K, C/groups, 3, 3) = F(3x3, mxm) over the m x m tiles of dy: per tile position a GEMM
    (K x tiles) @ (tiles x C) sums the products of transformed dy and input tiles."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, p: ConvProblem, dtype: type):
        a = m + 2
        self.p, self.t = p, (t := _Tiles.of(m, a, p.out_h, p.out_w))
        self.bb = _kron(mats["bt"], mats["bt"], dtype)      # (a*a, a*a)
        self.gg = _kron(mats["g_f"], mats["g_f"], dtype)    # (a*a, m*m)
        self.aa = _kron(mats["at_f"], mats["at_f"], dtype)  # (9, a*a)
        item = np.dtype(dtype).itemsize
        self.blocks = _image_blocks(p.batch, a * a * p.in_channels * t.th * t.tw * item)
        nb = max(n for _, n in self.blocks)
        g, kg, cg, k = p.groups, p.filters_per_group, p.channels_per_group, p.out_channels
        self.shapes = {
            "d": (a, a, p.in_channels, nb, t.th, t.tw), "v": (a * a, p.in_channels, nb, t.th, t.tw),
            "e": (m, m, k, nb, t.th, t.tw), "dyt": (a * a, k, nb, t.th, t.tw),
            "acc": (a * a, g, kg, cg), "part": (a * a, g, kg, cg), "dw": (3, 3, k, cg)}

    def __call__(self, buf: dict[str, np.ndarray], x: np.ndarray, dy: np.ndarray,
                 dw: np.ndarray) -> None:
        p, t, a, m = self.p, self.t, self.t.alpha, self.t.m
        g, kg, cg = p.groups, p.filters_per_group, p.channels_per_group
        acc = buf["acc"].reshape(self.shapes["acc"])
        part = buf["part"].reshape(self.shapes["part"])
        for i, (n0, n) in enumerate(self.blocks):
            tiles = _block(buf, "d", self.shapes, 3, n)
            t.gather(x[n0:n0 + n], p.pad_top, p.pad_left, a, tiles)
            v = _block(buf, "v", self.shapes, 2, n)
            np.matmul(self.bb, tiles.reshape(a * a, -1), out=v.reshape(a * a, -1))
            grads = _block(buf, "e", self.shapes, 3, n)
            t.gather(dy[n0:n0 + n], 0, 0, m, grads)
            dyt = _block(buf, "dyt", self.shapes, 2, n)
            np.matmul(self.gg, grads.reshape(m * m, -1), out=dyt.reshape(a * a, -1))
            _gemm_nt(dyt.reshape(a * a, g, kg, -1), v.reshape(a * a, g, cg, -1),
                     acc if i == 0 else part)
            if i:
                np.add(acc, part, out=acc)
        out = buf["dw"].reshape(self.shapes["dw"])
        np.matmul(self.aa, acc.reshape(a * a, -1), out=out.reshape(9, -1))
        np.copyto(dw, out.transpose(2, 3, 0, 1))


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
        return _matrices(self.m, self.points)

    def fwd(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        core = _Correlation(self._mats(), self.m, p.groups, p.in_channels, p.out_channels,
                            p.batch, p.out_h, p.out_w, dtype)
        buf = allocate(point, dtype, _flat(core.shapes))
        x, w = data.x.astype(dtype), data.w.astype(dtype)
        y = np.empty(p.output_shape, dtype)

        def kernel() -> None:
            core(buf, x, p.pad_top, p.pad_left, w, y)

        return CpuPrepared(y, kernel, workspace_of(buf))

    def bwd_data(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        g, cg, kg = p.groups, p.channels_per_group, p.filters_per_group
        core = _Correlation(self._mats(), self.m, g, p.out_channels, p.in_channels, p.batch,
                            p.in_h, p.in_w, dtype)
        buf = allocate(point, dtype, dict(_flat(core.shapes), wrot=(p.in_channels, kg, 3, 3)))
        w, dy = data.w.astype(dtype), data.dy.astype(dtype)
        dx = np.empty(p.input_shape, dtype)
        rotated = buf["wrot"].reshape(g, cg, kg, 3, 3)

        def kernel() -> None:
            np.copyto(rotated, w.reshape(g, kg, cg, 3, 3)[..., ::-1, ::-1].transpose(0, 2, 1, 3, 4))
            # Full convolution = correlation of dy, with 2 - pad zeros around it, and the flip.
            core(buf, dy, 2 - p.pad_top, 2 - p.pad_left, buf["wrot"], dx)

        return CpuPrepared(dx, kernel, workspace_of(buf))

    def bwd_filter(self, point: Point, data: ProblemData, dtype: type) -> CpuPrepared:
        p = point.problem
        core = _FilterGradient(self._mats(), self.m, p, dtype)
        buf = allocate(point, dtype, _flat(core.shapes))
        x, dy = data.x.astype(dtype), data.dy.astype(dtype)
        dw = np.empty(p.weight_shape, dtype)

        def kernel() -> None:
            core(buf, x, dy, dw)

        return CpuPrepared(dw, kernel, workspace_of(buf))


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
