"""im2col's column-path GEMM written straight into y (harness/backends/cpu/im2col/algorithm.py).

With exact windows (Q columns an output row, no gap) a block's GEMM result per image is y's
own block, K rows of rows*Q values one image apart: BLAS writes it in place, reading the image's
columns of the column matrix as a strided operand. No GEMM output buffer, and no copy out of it
(that copy was 46-48% of DeepBench row 55's and VGG conv1_1's forward, 20% of row 2's): their
forward took 0.62-0.84 of the time before (evidence/notes/constants.md#im2col-in_place).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from harness.backends.cpu.blas import MAX_GROUP_CALLS, GemmInto, gemm_into
from harness.backends.cpu.im2col.columns import Columns

# In place only where each image's GEMM of a block is this wide: ResNet-50 res5a (7x7 outputs,
# 49 columns an image instead of 392 a block) ran 1.37-1.41x slower in place (fwd, bwd_data);
# the layers above take 2,000-20,000 columns an image.
MIN_COLUMNS = 1024
# On one core, in-place blocks hold this much column matrix (where their GEMMs stay MIN_COLUMNS
# wide; else algorithm.BLOCK_BYTES): the GEMM then reads from L2 (1 MiB a core on the AMD EPYC
# VM) what the gather just wrote, rather than from memory. Against 8 MiB blocks on the 2-core
# AMD EPYC VM, one thread: VGG-16 conv1_1 fwd 0.87 and 0.93 (13 and 11 interleaved rounds),
# DeepBench row 55 0.92 and 0.90 (row 2 keeps 8 MiB: its last 1 MiB block, 2 rows, is too
# narrow). Not on two: each narrow GEMM split over BLAS's threads, a fork and join per block,
# read 0.91 in one run and 1.25 in the next on conv1_1
# (evidence/logs/im2col-fwd-filter-cpu-amd-epyc-2026-11-28.txt).
BLOCK_BYTES = 1 << 20


def block_bytes(cores: int, default: int) -> int:
    """Column-matrix bytes an in-place block holds on `cores` cores (see BLOCK_BYTES)."""
    return min(default, BLOCK_BYTES) if cores == 1 else default


def rows_contiguous(y: np.ndarray) -> bool:
    """Whether y's output rows follow one another (not a strided phase of dx)."""
    _, _, _, q = y.shape
    return y.strides[3] == y.itemsize and y.strides[2] == q * y.itemsize


def exact_where_in_place(columns: Columns, y: np.ndarray) -> Columns | None:
    """Exact windows (the flat columns' gaps dropped) where y's rows are contiguous and the
    bundled OpenBLAS's GEMM can write into a view, a call per image and group (so not for many
    groups: MAX_GROUP_CALLS); None where y cannot take the result."""
    if (columns.plane_is_column_matrix or not rows_contiguous(y) or gemm_into(y.dtype) is None
            or columns.p.groups > MAX_GROUP_CALLS):
        return None     # (a plane that is the column matrix already costs no copy)
    return replace(columns, kept=columns.p.out_w)


def wide_enough(image_columns: int) -> bool:
    """Whether the GEMM per image of a block (`image_columns` wide) is wide enough."""
    return image_columns >= MIN_COLUMNS


def gemm_into_y(gemm: GemmInto, wmat: np.ndarray, col: np.ndarray, y_block: np.ndarray) -> None:
    """y_block (images, K, rows, Q) <- W (G, Kg, Cg*R*S) @ col, per image and group."""
    images, _, rows, q = y_block.shape
    g, kg, _ = wmat.shape
    cols = col.reshape(g, -1, images, rows * q)
    for i in range(images):
        target = y_block[i].reshape(g, kg, rows * q, copy=False)
        for j in range(g):
            gemm(wmat[j], cols[j, :, i], target[j], False)
