"""Winograd minimal filtering (Lavin & Gray 2016): F(2x2,3x3) and F(4x4,3x3), all directions.

Y = A^T [ (G g G^T) (.) (B^T d B) ] A on overlapping (m+2)^2 input tiles. The elementwise
product summed over channels is, per tile position (a, b), a GEMM: M[ab] = U[ab] (K x C) @
V[ab] (C x tiles), so the bulk of the work is (m+2)^2 batched GEMMs doing 9m^2/(m+2)^2 of
direct convolution's multiplies (1/2.25 for m=2, 1/4 for m=4).

The transform matrices are not typed in: `toom_cook` builds them from interpolation points by
the Toom-Cook construction (evaluate at the points and at infinity, interpolate), exactly in
rational arithmetic; tests/test_cpu_algorithms.py checks them against Lavin & Gray's published
matrices and against exact correlation.

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

from harness.backends.base import ProblemData
from harness.backends.cpu._common import (CpuAlgorithm, CpuPrepared, allocate, interior,
                                          workspace_of)
from harness.problem import ConvProblem
from harness.sweep import Point

Matrix = list[list[Fraction]]

# Image blocks are sized so the transformed-input block V stays near this size, about half the
# 2 MiB per-core L2 of the development machine: the GEMMs then read what the transform just
# wrote, while each GEMM stays wide enough (hundreds of tiles) to run at BLAS speed.
BLOCK_BYTES = 1 << 20


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


# ---- applying a small transform along one tile axis ------------------------------------------
def _is_unit(matrix: np.ndarray) -> bool:
    """Entries in {-1, 0, 1}: adds and subtracts of whole arrays beat a gather and a GEMM."""
    return bool(np.all(np.isin(matrix, (-1.0, 0.0, 1.0))))


def _signed_sum(row: np.ndarray, views: Sequence[np.ndarray], out: np.ndarray) -> None:
    """out = sum_j row[j] * views[j] for a row of -1/0/1 entries."""
    first = True
    for coefficient, view in zip(row, views):
        if coefficient == 0:
            continue
        if first:
            (np.copyto(out, view) if coefficient > 0 else np.negative(view, out=out))
        else:
            (np.add if coefficient > 0 else np.subtract)(out, view, out=out)
        first = False


def _transform(matrix: np.ndarray, views: Sequence[np.ndarray], out: np.ndarray,
               gather: np.ndarray | None) -> None:
    """out[a] = sum_j matrix[a, j] * views[j]; `gather` is scratch (J, *view shape) for
    matrices that are not unit (then one GEMM over the gathered views does all rows)."""
    if gather is None:
        for a, row in enumerate(matrix):
            _signed_sum(row, views, out[a])
        return
    for j, view in enumerate(views):
        np.copyto(gather[j], view)
    np.matmul(matrix, gather.reshape(len(views), -1), out=out.reshape(len(matrix), -1))


def _strided(a: np.ndarray, axis: int, start: int, step: int, count: int) -> np.ndarray:
    index = [slice(None)] * a.ndim
    index[axis] = slice(start, start + (count - 1) * step + 1, step)
    return a[tuple(index)]


# ---- plans -----------------------------------------------------------------------------------
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

    @property
    def in_rows(self) -> int:
        return self.th * self.m + self.alpha - self.m

    @property
    def in_cols(self) -> int:
        return self.tw * self.m + self.alpha - self.m


def _image_blocks(batch: int, bytes_per_image: int) -> list[tuple[int, int]]:
    per = max(1, min(batch, BLOCK_BYTES // max(1, bytes_per_image)))
    count = -(-batch // per)
    size = -(-batch // count)
    return [(n0, min(size, batch - n0)) for n0 in range(0, batch, size)]


class _InputTransform:
    """V (alpha, alpha, C, images, th, tw) = B^T d B for every input tile of a block of images,
    columns first (strided gathers touch the smaller array), then rows (contiguous runs)."""

    def __init__(self, bt: np.ndarray, tiles: _Tiles, channels: int, images: int, dtype: type):
        self.bt, self.t = bt.astype(dtype), tiles
        a, t = tiles.alpha, tiles
        unit = _is_unit(bt)
        self.shapes = {"z1": (a, channels, images, t.in_rows, t.tw)}
        if not unit:
            self.shapes["g1"] = self.shapes["z1"]
            self.shapes["g2"] = (a, a, channels, images, t.th, t.tw)

    def __call__(self, buf: dict[str, np.ndarray], d: np.ndarray, v: np.ndarray) -> None:
        """d: (C, n, in_rows, in_cols) block of the zero-padded input; v: (a, a, C, n, th, tw)."""
        t, a, n = self.t, self.t.alpha, d.shape[1]
        z1 = _block(buf, "z1", self.shapes, 2, n)
        g1 = _block(buf, "g1", self.shapes, 2, n)
        g2 = _block(buf, "g2", self.shapes, 3, n)
        _transform(self.bt, [_strided(d, 3, j, t.m, t.tw) for j in range(a)], z1, g1)
        _transform(self.bt, [_strided(z1, 3, i, t.m, t.th) for i in range(a)], v, g2)


def _flat(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int]]:
    """Scratch is allocated flat so that a block's view (a prefix) is contiguous."""
    return {name: (int(np.prod(shape)),) for name, shape in shapes.items()}


def _block(buf: dict[str, np.ndarray], name: str, shapes: dict[str, tuple[int, ...]],
           axis: int, images: int) -> np.ndarray | None:
    """Contiguous view of flat scratch `name` with its image axis shortened to `images`."""
    if name not in shapes:
        return None
    shape = list(shapes[name])
    shape[axis] = images
    return buf[name][:int(np.prod(shape))].reshape(shape)


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
    """out (N, K, Ho, Wo) = stride-1 3x3 correlation of a zero-padded input buffer
    (C, N, in_rows, in_cols) with weights (K, C/groups, 3, 3), tile by tile."""

    def __init__(self, mats: dict[str, np.ndarray], m: int, groups: int, channels: int,
                 filters: int, batch: int, rows: int, cols: int, dtype: type):
        a = m + 2
        self.t = t = _Tiles.of(m, a, rows, cols)
        self.groups, self.channels, self.filters, self.rows, self.cols = (groups, channels,
                                                                         filters, rows, cols)
        self.at, self.g = mats["at"].astype(dtype), mats["g"].astype(dtype)
        self.unit_out = _is_unit(mats["at"])
        item = np.dtype(dtype).itemsize
        self.blocks = _image_blocks(batch, a * a * channels * t.th * t.tw * item)
        nb = max(n for _, n in self.blocks)
        self.inputs = _InputTransform(mats["bt"], t, channels, nb, dtype)
        cg, kg = channels // groups, filters // groups
        tiles = nb * t.th * t.tw
        self.shapes = dict(self.inputs.shapes, **{
            "u": (a * a, groups, kg, cg), "w1": (filters, cg, a, 3), "w2": (filters, cg, a, a),
            "v": (a, a, channels, nb, t.th, t.tw), "m": (a, a, filters, nb, t.th, t.tw),
            "y1": (m, a, filters, nb, t.th, t.tw), "y": (m, m, filters, nb, t.th, t.tw)})
        self.aligned = rows == t.th * m and cols == t.tw * m
        if not self.aligned:
            self.shapes["tiles"] = (nb, filters, t.th * m, t.tw * m)
        del tiles

    def __call__(self, buf: dict[str, np.ndarray], d: np.ndarray, w: np.ndarray,
                 out: np.ndarray) -> None:
        t, a, m, k = self.t, self.t.alpha, self.t.m, self.filters
        g, cg, kg = self.groups, self.channels // self.groups, self.filters // self.groups
        u = buf["u"].reshape(self.shapes["u"])
        self._filters(buf, w, u)
        for n0, n in self.blocks:
            v = _block(buf, "v", self.shapes, 3, n)
            self.inputs(buf, d[:, n0:n0 + n], v)
            mm = _block(buf, "m", self.shapes, 3, n)
            _gemm(u, v.reshape(a * a, g, cg, -1), mm.reshape(a * a, g, kg, -1))
            y = self._outputs(buf, mm, n)
            target = out[n0:n0 + n] if self.aligned else _block(buf, "tiles", self.shapes, 0, n)
            np.copyto(target.reshape(n, k, t.th, m, t.tw, m), y.transpose(3, 2, 4, 0, 5, 1))
            if not self.aligned:
                np.copyto(out[n0:n0 + n], target[:, :, :self.rows, :self.cols])

    def _filters(self, buf: dict[str, np.ndarray], w: np.ndarray, u: np.ndarray) -> None:
        """U = G w G^T, stored (a*a, groups, K/groups, C/groups) for the GEMMs."""
        a = self.t.alpha
        w1, w2 = buf["w1"].reshape(self.shapes["w1"]), buf["w2"].reshape(self.shapes["w2"])
        np.matmul(self.g, w, out=w1)
        np.matmul(w1, self.g.T, out=w2)
        kg, cg = self.filters // self.groups, self.channels // self.groups
        np.copyto(u.reshape(a, a, self.groups, kg, cg),
                  w2.reshape(self.groups, kg, cg, a, a).transpose(3, 4, 0, 1, 2))

    def _outputs(self, buf: dict[str, np.ndarray], mm: np.ndarray, n: int) -> np.ndarray:
        """Y = A^T M A: (m, m, K, n, th, tw)."""
        m, a = self.t.m, self.t.alpha
        y1 = _block(buf, "y1", self.shapes, 3, n)
        y = _block(buf, "y", self.shapes, 3, n)
        if self.unit_out:
            for i in range(m):
                _signed_sum(self.at[i], mm, y1[i])
            for i in range(m):
                for j in range(m):
                    _signed_sum(self.at[j], y1[i], y[i, j])
        else:
            np.matmul(self.at, mm.reshape(a, -1), out=y1.reshape(m, -1))
            np.matmul(self.at, y1.reshape(m, a, -1), out=y.reshape(m, m, -1))
        return y
