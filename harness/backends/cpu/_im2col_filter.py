"""im2col's bwd_filter GEMMs (harness/backends/cpu/im2col.py plans the blocks of whole images):
per block, dW += dy (K x cols) @ col^T, or dW^T (C*R*S x K) += col @ dy^T where the filters are
few (`transposed`); dy read in place where it can be (`reads_dy_in_place`).

Both forms accumulate in BLAS (beta = 1: no partial and no add pass per block). The operand
order matters for these skinny GEMMs with long reductions: in a scratch loop on the 2-core Intel
Xeon VM (OpenBLAS 0.3.31, 2 threads, 2026-11-24; dy @ col^T / col @ dy^T, GFLOP/s) DeepBench
row 6 (K = 32, C*R*S = 1600) ran 140 / 190, row 2 (32, 100) 95 / 127, ResNet-50 res2a (64, 576)
211 / 252; row 55 (64, 25) 100 / 85 and VGG conv1_1 (64, 27) 91 / 85 the other way round. Row
61 (512, 6400) measured 344 / 400 there, yet ran 1.39x slower as dW^T in the launch, hence
TRANSPOSED_MAX_FILTERS. Blocks of output rows instead of whole images (allowed by the
accumulation) ran 1.08-1.09x slower on rows 2 and 6, a tie elsewhere.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from harness.backends.cpu._blas import MAX_GROUP_CALLS, GemmInto, gemm_into
from harness.backends.cpu._columns import Columns
from harness.problem import ConvProblem

# dW^T where the filters are this few (and the column matrix's rows more): measured as in the
# module's docstring, DeepBench row 61 (512 filters) ran 1.39x slower as dW^T in the launch (rows
# 2 and 6, 32 filters, 1.15-1.18x faster).
TRANSPOSED_MAX_FILTERS = 64
# dy is read in place where each image's GEMM reduces over at least this many pixels (here the
# image's columns are the GEMM's depth, not its width as in _in_place.MIN_COLUMNS). Measured
# interleaved as in the module's docstring (5 rounds, load about 1), dy copied / in place:
# DeepBench rows 2 and 55, VGG conv1_1 (13,000-56,000 pixels an image) 1.19-1.44; row 61 (369)
# 1.04-1.06; ResNet-50 res3a and VGG conv4_1 (784) 1.01-1.02, conv5_1 (196) 1.02, res4a (196)
# 0.96; res5a, identical code on both sides, 1.04: from 196 to 784 the effect is in the noise.
MIN_IMAGE_COLUMNS = 256


def batched(p: ConvProblem) -> bool:
    """Whether a block's GEMMs over the groups are one np.matmul and an add (many groups:
    _blas.MAX_GROUP_CALLS) rather than one accumulating BLAS call per group."""
    return p.groups > MAX_GROUP_CALLS


def transposed(p: ConvProblem) -> bool:
    """Whether dW^T = col @ dy^T: the column matrix's rows (M) at least the filters (N)."""
    kg = p.filters_per_group
    return (not batched(p) and kg <= TRANSPOSED_MAX_FILTERS
            and p.channels_per_group * p.kernel_h * p.kernel_w >= kg)


def columns_for(p: ConvProblem, dtype: type) -> Columns:
    """Exact windows where dy can be read in place (`reads_dy_in_place`), the rule of
    Columns.of elsewhere."""
    columns = Columns.of(p)
    exact = replace(columns, kept=p.out_w)
    return exact if reads_dy_in_place(exact, dtype) else columns


def reads_dy_in_place(columns: Columns, dtype: type) -> bool:
    """Whether each image's GEMM reads dy[n] (K x P*Q) as it stands, not a copy with gap zeros:
    exact windows, a plane that is not the column matrix already, an accumulating BLAS and GEMMs
    deep enough per image (MIN_IMAGE_COLUMNS; blocks are whole images here). The copy was as
    large as the gather where K > C*R*S (VGG conv1_1, DeepBench row 55)."""
    p = columns.p
    return (columns.kept == p.out_w and not columns.plane_is_column_matrix
            and gemm_into(dtype) is not None and p.out_h * p.out_w >= MIN_IMAGE_COLUMNS)


def scratch_shapes(p: ConvProblem, columns: Columns, block_columns: int,
                   dtype: type) -> dict[str, tuple]:
    """A block's column matrix, its dy columns unless read in place, and dW^T where the GEMM
    leaves it."""
    shapes = {"col": (columns.column_elements(block_columns),)}
    if not reads_dy_in_place(columns, dtype):
        shapes["dy"] = (p.out_channels * block_columns,)
    taps = p.channels_per_group * p.kernel_h * p.kernel_w
    if transposed(p):
        shapes["dw_t"] = (p.groups, taps, p.filters_per_group)
    if batched(p):
        shapes["partial"] = (p.groups, p.filters_per_group, taps)
    return shapes


def _numpy_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, accumulate: bool) -> None:
    """gemm_into's contract where NumPy's BLAS is not the bundled OpenBLAS."""
    if accumulate:
        c += a @ b
    else:
        np.matmul(a, b, out=c)


def bind(columns: Columns, blocks: list[tuple[int, int, int, int]], x: np.ndarray,
         dy: np.ndarray, buf: dict[str, np.ndarray], dw_taps: np.ndarray) -> Callable[[], None]:
    """The launch: dw_taps (G, Kg, Cg*taps, taps in the column matrix's order) <- the filter
    gradient, block by block ((n0, images, p0, rows) of dy), through buf's planes, col, dy and
    dw_t (scratch_shapes)."""
    p = columns.p
    g, kg, k = p.groups, p.filters_per_group, p.out_channels
    gemm: GemmInto = gemm_into(x.dtype) or _numpy_gemm
    planes, col_flat = buf["planes"], buf["col"]
    dw_t, partial = buf.get("dw_t"), buf.get("partial")
    in_place = reads_dy_in_place(columns, x.dtype)

    def accumulate(col_i: np.ndarray, dy_i: np.ndarray, first: bool) -> None:
        """dW (+)= dy_i @ col_i^T over the groups ((G, Kg, cols) and (G, Cg*taps, cols))."""
        if partial is not None:
            np.matmul(dy_i, col_i.transpose(0, 2, 1), out=dw_taps if first else partial)
            if not first:
                np.add(dw_taps, partial, out=dw_taps)
            return
        for j in range(g):
            if dw_t is None:
                gemm(dy_i[j], col_i[j].T, dw_taps[j], not first)
            else:
                gemm(col_i[j], dy_i[j].T, dw_t[j], not first)

    def operands(col: np.ndarray, n0: int, ni: int, p0: int, pr: int) -> list[tuple]:
        """(columns, dy) GEMM operand pairs of a block: per image where dy is read in place."""
        if in_place:
            pq = p.out_h * p.out_w
            return [(col[:, i * pq:(i + 1) * pq], dy[n0 + i].reshape(k, pq)) for i in range(ni)]
        cols = col.shape[1]
        dyb = buf["dy"][:k * cols].reshape(k, ni, pr, columns.kept)
        np.copyto(dyb[..., :p.out_w], dy[n0:n0 + ni, :, p0:p0 + pr].transpose(1, 0, 2, 3))
        dyb[..., p.out_w:] = 0    # the flat matrix's gap columns must add nothing
        return [(col, dyb.reshape(k, cols))]

    def kernel() -> None:
        columns.fill_planes(planes, x)
        first = True
        for n0, ni, p0, pr in blocks:
            col = columns.gather(planes, col_flat, n0, ni, p0, pr)
            for col_i, dy_i in operands(col, n0, ni, p0, pr):
                accumulate(col_i.reshape(g, -1, col_i.shape[1]), dy_i.reshape(g, kg, -1), first)
                first = False
        if dw_t is not None:
            np.copyto(dw_taps, dw_t.transpose(0, 2, 1))

    return kernel
